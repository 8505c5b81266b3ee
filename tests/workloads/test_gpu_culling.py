"""GPU utilisation per workload and GPU-aware culling, read through a fake NVML: a workload
holding a GPU that stays below its threshold is warned, then stopped after the grace period,
unless its owner keeps it; no reading never culls; jobs are off unless their grant says so.
The pages show the utilisation to those who may see the workload, and to nobody else."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.audit import AuditEvent
from core.models import Notice
from scheduling.backends.base import Phase
from scheduling.backends.local import LocalBackend
from scheduling.models import GpuSample
from tests.gpu_fakes import FakeNvml, nvml  # noqa: F401 (the fixture)
from workloads import reconcile, services, utilisation
from workloads.choices import State, WorkloadKind
from workloads.models import Workload, WorkloadGpuSample

pytestmark = pytest.mark.django_db
MINUTE = dt.timedelta(minutes=1)


@pytest.fixture
def gpu_source(backend: Any, nvml: FakeNvml, tmp_path: Any) -> FakeNvml:  # noqa: F811
    """The fake backend reads its GPUs as the local backend does: NVML, here the fake."""
    local = LocalBackend(tmp_path, node_name="gpu-host")
    backend.gpu_readings = local.gpu_readings
    return nvml


def _running_on_gpu(world: Any, catalog: Any, backend: Any, run: Any, **fields: Any) -> Workload:
    """Bob's JupyterLab on one GPU, Running since an hour ago (so the owner's actions, at the
    real now, come after the samples the test writes in the past)."""
    w = run(
        services.launch_environment, actor=world.bob, template=catalog.jupyter, flavor=catalog.gpu
    )
    backend.set(w.pk, Phase.RUNNING)
    run(reconcile.reconcile, catalog.cluster)
    w.refresh_from_db()
    assert w.state == State.RUNNING and w.allocations.filter(device__isnull=False).exists()
    start = timezone.now() - dt.timedelta(hours=1)
    Workload.objects.filter(pk=w.pk).update(started_at=start, **fields)
    w.refresh_from_db()
    return w


def _held_index(w: Workload) -> int:
    return w.allocations.get(device__isnull=False).device.index


def _minutes(run: Any, start: dt.datetime, first: int, last: int) -> list[str]:
    """Sample every minute from ``start + first`` to ``start + last`` and cull after each;
    the ids stopped."""
    stopped: list[str] = []
    for minute in range(first, last + 1):
        now = start + minute * MINUTE
        utilisation.sample(now=now)
        stopped += run(services.cull, now=now)
    return stopped


@pytest.fixture
def rule(catalog: Any) -> None:
    """Class A's grant: below 10 % for 30 minutes (the template would say 5 % for 60)."""
    catalog.grant.gpu_idle_percent = 10
    catalog.grant.gpu_idle_minutes = 30
    catalog.grant.idle_timeout_minutes = 0  # kernel idleness is another test's business
    catalog.grant.save()


def test_samples_follow_the_device_the_workload_holds(
    world, catalog, backend, run, gpu_source, rule
) -> None:
    w = _running_on_gpu(world, catalog, backend, run)
    gpu_source.devices[_held_index(w)].utilisation = 87
    gpu_source.devices[_held_index(w)].memory_used_mib = 12000
    gpu_source.devices[1 - _held_index(w)].utilisation = 3
    done = utilisation.sample(now=timezone.now())
    assert (done.devices, done.workloads) == (2, 1)
    sample = WorkloadGpuSample.objects.get(workload=w)
    assert (sample.utilisation, sample.memory_used_mib) == (87, 12000)
    assert sorted(GpuSample.objects.values_list("utilisation", flat=True)) == [3, 87]


def test_a_workload_below_the_threshold_is_warned_then_stopped(
    world, catalog, backend, run, gpu_source, rule, settings
) -> None:
    settings.GPU_CULL_GRACE_MINUTES = 15
    w = _running_on_gpu(world, catalog, backend, run)
    gpu_source.devices[_held_index(w)].utilisation = 2
    start = w.started_at
    assert _minutes(run, start, 1, 30) == []  # 29 minutes low: not yet
    w.refresh_from_db()
    assert w.gpu_warned_at is None
    assert _minutes(run, start, 31, 31) == []
    w.refresh_from_db()
    assert w.gpu_warned_at == start + 31 * MINUTE and w.state == State.RUNNING
    warning = w.events.last()
    assert warning.reason_code == "gpu_idle_warning"
    assert "below 10 % busy for 30 minutes; it stops in 15 minutes" in warning.reason
    notice = Notice.objects.get(user=world.bob)
    assert notice.level == Notice.Level.WARNING and notice.link == f"/workloads/{w.pk}/"
    assert _minutes(run, start, 32, 45) == []  # within the grace period
    assert _minutes(run, start, 46, 46) == [str(w.pk)]
    w.refresh_from_db()
    assert w.state == State.STOPPED
    assert w.reason == "stopped: its GPU stayed below 10 % busy for 30 minutes"
    assert w.events.filter(to_state=State.STOPPING, reason_code="gpu_idle_for").exists()
    assert AuditEvent.objects.filter(action="workload.gpu_cull", target_id=str(w.pk)).exists()
    assert Notice.objects.filter(user=world.bob).count() == 1  # warned once


def test_keeping_it_after_the_warning_starts_the_idle_window_again(
    world, catalog, backend, run, gpu_source, rule
) -> None:
    w = _running_on_gpu(world, catalog, backend, run)
    gpu_source.devices[_held_index(w)].utilisation = 1
    _minutes(run, w.started_at, 1, 31)
    w.refresh_from_db()
    assert w.gpu_warned_at is not None
    with pytest.raises(ValidationError, match="only its owner"):
        services.keep_gpu(actor=world.alice, workload=w)
    kept = services.keep_gpu(actor=world.bob, workload=w)
    w.refresh_from_db()
    assert w.gpu_warned_at is None and w.gpu_kept_at == kept
    assert w.events.last().reason_code == "gpu_kept"
    assert AuditEvent.objects.filter(action="workload.keep_gpu", actor=world.bob).exists()
    # Still idle, but counted from the keep: past the old grace period, not stopped.
    assert _minutes(run, kept, 1, 29) == []
    w.refresh_from_db()
    assert w.state == State.RUNNING and w.gpu_warned_at is None
    _minutes(run, kept, 30, 31)
    w.refresh_from_db()
    assert w.gpu_warned_at is not None  # a new warning, 30 minutes after the keep


def test_extending_also_starts_the_gpu_idle_window_again(
    world, catalog, backend, run, gpu_source, rule
) -> None:
    w = _running_on_gpu(world, catalog, backend, run)
    gpu_source.devices[_held_index(w)].utilisation = 1
    _minutes(run, w.started_at, 1, 31)
    services.extend(actor=world.bob, workload=w)
    w.refresh_from_db()
    assert w.gpu_warned_at is None and w.gpu_kept_at is not None
    assert _minutes(run, w.gpu_kept_at, 1, 20) == []


def test_a_busy_moment_resets_the_low_stretch(
    world, catalog, backend, run, gpu_source, rule
) -> None:
    w = _running_on_gpu(world, catalog, backend, run)
    device = gpu_source.devices[_held_index(w)]
    device.utilisation = 2
    _minutes(run, w.started_at, 1, 20)
    device.utilisation = 60  # one minute of real work
    _minutes(run, w.started_at, 21, 21)
    device.utilisation = 2
    _minutes(run, w.started_at, 22, 45)
    w.refresh_from_db()
    assert w.gpu_warned_at is None  # low for 24 minutes since the busy one, not 30
    _minutes(run, w.started_at, 46, 52)
    w.refresh_from_db()
    assert w.gpu_warned_at == w.started_at + 52 * MINUTE
    device.utilisation = 75  # busy again after the warning: it is withdrawn, nothing stops
    assert _minutes(run, w.started_at, 53, 80) == []
    w.refresh_from_db()
    assert w.gpu_warned_at is None and w.state == State.RUNNING


def test_without_a_reading_nothing_is_culled_on_gpu_grounds(
    world, catalog, backend, run, gpu_source, rule, settings
) -> None:
    gpu_source.no_driver = True  # no NVIDIA driver on this host
    w = _running_on_gpu(world, catalog, backend, run)
    assert _minutes(run, w.started_at, 1, 120) == []
    w.refresh_from_db()
    assert w.state == State.RUNNING and w.gpu_warned_at is None
    assert not WorkloadGpuSample.objects.exists()


def test_readings_that_stopped_coming_do_not_cull(
    world, catalog, backend, run, gpu_source, rule
) -> None:
    w = _running_on_gpu(world, catalog, backend, run)
    gpu_source.devices[_held_index(w)].utilisation = 0
    _minutes(run, w.started_at, 1, 10)
    gpu_source.no_driver = True  # the driver went away: the old low readings are stale
    assert _minutes(run, w.started_at, 11, 90) == []
    w.refresh_from_db()
    assert w.gpu_warned_at is None and w.state == State.RUNNING


def test_jobs_are_not_gpu_culled_unless_their_grant_says_so(
    world, catalog, backend, run, gpu_source
) -> None:
    catalog.grant.idle_timeout_minutes = 0
    catalog.grant.save()
    job = run(
        services.submit_job,
        actor=world.bob,
        tenant=world.class_a,
        flavor=catalog.gpu,
        command="python train.py",
    )
    assert (job.gpu_idle_percent, job.gpu_idle_minutes) == (
        0,
        0,
    )  # the template's 5 % is not for jobs
    environment = run(
        services.launch_environment, actor=world.bob, template=catalog.jupyter, flavor=catalog.half
    )
    assert (environment.gpu_idle_percent, environment.gpu_idle_minutes) == (5, 60)
    catalog.grant.gpu_idle_percent, catalog.grant.gpu_idle_minutes = 20, 45
    catalog.grant.save()
    strict = run(
        services.submit_job,
        actor=world.bob,
        tenant=world.class_a,
        flavor=catalog.gpu,
        command="python train.py",
    )
    assert (strict.gpu_idle_percent, strict.gpu_idle_minutes) == (20, 45)
    # A job that runs with the GPU idle for hours is left alone.
    backend.set(job.pk, Phase.RUNNING)
    run(reconcile.reconcile, catalog.cluster)
    job.refresh_from_db()
    assert job.state == State.RUNNING
    for device in gpu_source.devices:
        device.utilisation = 0
    start = timezone.now() - dt.timedelta(hours=3)
    Workload.objects.filter(pk=job.pk).update(started_at=start)
    assert str(job.pk) not in _minutes(run, start, 1, 150)
    job.refresh_from_db()
    assert job.state == State.RUNNING and job.gpu_warned_at is None
    assert WorkloadGpuSample.objects.filter(workload=job, utilisation=0).exists()  # it was read


def test_the_history_is_downsampled_and_pruned(
    world, catalog, backend, run, gpu_source, rule, settings
) -> None:
    settings.GPU_HISTORY_HOURS = 2
    settings.GPU_FULL_RESOLUTION_MINUTES = 30
    settings.GPU_DOWNSAMPLE_MINUTES = 10
    w = _running_on_gpu(world, catalog, backend, run, gpu_idle_percent=0)
    device = gpu_source.devices[_held_index(w)]
    start = timezone.now() - dt.timedelta(hours=3)
    for minute in range(0, 180):
        device.utilisation = 40 if minute % 2 else 60
        utilisation.sample(now=start + minute * MINUTE)
    end = start + 179 * MINUTE
    rows = WorkloadGpuSample.objects.filter(workload=w)
    # Two hours kept: the last 30 minutes (up to one 10-minute bucket more) as read, the time
    # before in 10-minute means (the oldest bucket may be partly pruned), nothing older.
    assert 31 <= rows.filter(span_seconds=0).count() <= 41
    assert 8 <= rows.filter(span_seconds=600).count() <= 10
    assert rows.order_by("time").first().time >= end - dt.timedelta(hours=2, minutes=10)
    means = [r.utilisation for r in rows.filter(span_seconds=600).order_by("time")]
    assert set(means[1:-1]) == {50}  # whole buckets: five readings of 40 % and five of 60 %
    per_device = GpuSample.objects.filter(device__index=_held_index(w)).count()
    assert per_device == rows.count()


def _gpu_sessions(world: Any, catalog: Any, n: int, now: dt.datetime) -> dict[str, Any]:
    """``n`` Running GPU sessions (below 10 % for 30 minutes culls them) with readings of five
    kinds, none idle long enough to be warned; the idle-since each should have, by id."""
    made = Workload.objects.bulk_create(
        Workload(
            kind=WorkloadKind.NOTEBOOK,
            name=f"w{i}",
            owner=world.bob,
            tenant=world.class_a,
            cluster=catalog.cluster,
            template=catalog.jupyter,
            grant=catalog.grant,
            flavor=catalog.gpu,
            state=State.RUNNING,
            started_at=now - dt.timedelta(hours=1),
            gpu_idle_percent=10,
            gpu_idle_minutes=30,
            gpu_kept_at=now - 10.5 * MINUTE if i % 5 == 4 else None,
        )
        for i in range(n)
    )
    expected: dict[str, Any] = {}
    samples = []
    for i, w in enumerate(made):
        kind = i % 5
        for minute in range(30, -1, -1):
            if kind == 0:  # busy until 21 minutes ago, low since 20
                value = 50 if minute > 20 else 2
            elif kind == 1:  # low, but busy at the last reading
                value = 2 if minute else 80
            elif kind == 2:  # low, but the readings stopped five minutes ago
                if minute < 5:
                    continue
                value = 2
            elif kind == 3:  # never read
                continue
            else:  # busy 25 minutes ago, low since, kept 10.5 minutes ago
                value = 60 if minute == 25 else 1
            samples.append(
                WorkloadGpuSample(workload=w, time=now - minute * MINUTE, utilisation=value)
            )
        expected[str(w.pk)] = {0: now - 20 * MINUTE, 4: now - 10 * MINUTE}.get(kind)
    WorkloadGpuSample.objects.bulk_create(samples)
    return expected


def test_culling_reads_the_idle_since_of_1_or_20_sessions_in_the_same_queries(
    world, catalog, django_assert_max_num_queries
) -> None:
    now = timezone.now()
    one = _gpu_sessions(world, catalog, 1, now)
    with CaptureQueriesContext(connection) as queries:
        assert services.cull_idle_gpus(now) == []
    for_one = len(queries.captured_queries)
    assert for_one <= 2  # the candidates, their samples
    twenty = _gpu_sessions(world, catalog, 19, now) | one
    with django_assert_max_num_queries(for_one):
        assert services.cull_idle_gpus(now) == []
    assert not Workload.objects.filter(gpu_warned_at__isnull=False).exists()
    # The same answers the workload-at-a-time question gives, for each kind of readings.
    running = list(Workload.objects.filter(pk__in=twenty))
    assert utilisation.idle_since_many(running, now=now) == twenty
    assert {str(w.pk): utilisation.idle_since(w, 10, now) for w in running} == twenty
    assert utilisation.idle_since_many(running, 1, now=now) == dict.fromkeys(twenty)


# --- pages ---------------------------------------------------------------------------------


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_detail_page_shows_the_owner_the_utilisation_and_the_warning(
    world, catalog, backend, run, gpu_source, rule
) -> None:
    w = _running_on_gpu(world, catalog, backend, run)
    gpu_source.devices[_held_index(w)].utilisation = 3
    gpu_source.devices[_held_index(w)].memory_used_mib = 512
    start = timezone.now() - dt.timedelta(minutes=31)
    Workload.objects.filter(pk=w.pk).update(started_at=start - MINUTE)
    _minutes(run, start, 0, 31)
    page = _client(world.bob).get(f"/workloads/{w.pk}/").content.decode()
    assert "GPU utilisation" in page and "Now 3 % busy, 512 MiB of GPU memory used." in page
    assert 'data-role="gpu-idle-warning"' in page and "unless you keep it" in page
    assert f"/workloads/{w.pk}/keep-gpu/" in page
    response = _client(world.bob).post(f"/workloads/{w.pk}/keep-gpu/")
    assert response.status_code == 302
    w.refresh_from_db()
    assert w.gpu_warned_at is None
    # The teacher sees it too (without the owner's button); another student does not.
    teacher = _client(world.alice).get(f"/workloads/{w.pk}/").content.decode()
    assert "Now 3 % busy" in teacher
    assert _client(world.charlie).get(f"/workloads/{w.pk}/").status_code == 404
    assert _client(world.charlie).post(f"/workloads/{w.pk}/keep-gpu/").status_code == 404


def test_a_teacher_sees_the_sessions_that_hold_a_gpu_and_hardly_use_it(
    world, catalog, backend, run, gpu_source, rule
) -> None:
    w = _running_on_gpu(world, catalog, backend, run)
    gpu_source.devices[_held_index(w)].utilisation = 4
    utilisation.sample(now=timezone.now())
    page = _client(world.alice).get("/teaching/ml-101/").content.decode()
    assert 'data-role="low-gpu"' in page and "4 % busy" in page
    gpu_source.devices[_held_index(w)].utilisation = 90
    WorkloadGpuSample.objects.all().delete()
    utilisation.sample(now=timezone.now())
    page = _client(world.alice).get("/teaching/ml-101/").content.decode()
    assert 'data-role="low-gpu"' not in page and "90 %" in page
    assert _client(world.charlie).get("/teaching/ml-101/").status_code in (403, 404)


def test_the_hosts_page_shows_each_devices_utilisation_to_admins_only(
    world, catalog, backend, run, gpu_source
) -> None:
    gpu_source.devices[0].utilisation = 71
    gpu_source.devices[1].utilisation = 0
    utilisation.sample(now=timezone.now())
    page = _client(world.root).get("/console/hosts/").content.decode()
    assert "Busy now 71 %" in page and "Busy now 0 %" in page
    assert page.count('data-chart="gpu-chart-') == 2
    assert _client(world.charlie).get("/console/hosts/").status_code in (302, 403, 404)


def test_the_hosts_page_says_when_there_is_no_reading(world, catalog, backend) -> None:
    page = _client(world.root).get("/console/hosts/").content.decode()
    assert page.count("No utilisation reading.") == 2


def test_a_teacher_sets_the_gpu_rule_of_a_grant(world, catalog) -> None:
    from workloads import grants

    with pytest.raises(ValidationError) as error:
        grants.update_grant(actor=world.alice, grant=catalog.grant, gpu_idle_percent=101)
    assert "gpu_idle_percent" in error.value.message_dict
    with pytest.raises(ValidationError):
        grants.update_grant(actor=world.alice, grant=catalog.grant, gpu_idle_minutes=0)
    grants.update_grant(
        actor=world.alice, grant=catalog.grant, gpu_idle_percent=15, gpu_idle_minutes=20
    )
    catalog.grant.refresh_from_db()
    assert (catalog.grant.gpu_idle_percent, catalog.grant.gpu_idle_minutes) == (15, 20)
    with pytest.raises(PermissionDenied):
        grants.update_grant(actor=world.bob, grant=catalog.grant, gpu_idle_percent=0)


def test_the_grant_form_takes_the_gpu_rule(world, catalog) -> None:
    from tests.pages.test_grant_form import grant_data

    client = _client(world.alice)
    page = client.get(f"/teaching/grants/{catalog.grant.pk}/edit/")
    assert page.status_code == 200 and b'name="gpu_idle_percent"' in page.content
    url = f"/teaching/grants/{catalog.grant.pk}/edit/"
    wrong = client.post(url, grant_data(template="jupyter", gpu_idle_percent=150))
    assert wrong.status_code == 200  # the form again, with the field's error
    assert b'aria-invalid="true"' in wrong.content or b"errorlist" in wrong.content
    catalog.grant.refresh_from_db()
    assert catalog.grant.gpu_idle_percent is None
    done = client.post(url, grant_data(template="jupyter", gpu_idle_percent=8, gpu_idle_minutes=40))
    assert done.status_code == 302
    catalog.grant.refresh_from_db()
    assert (catalog.grant.gpu_idle_percent, catalog.grant.gpu_idle_minutes) == (8, 40)
    client.post(url, grant_data(template="jupyter", gpu_idle_percent="", gpu_idle_minutes=""))
    catalog.grant.refresh_from_db()
    assert catalog.grant.gpu_idle_percent is None  # empty: the template's rule again


# --- API ----------------------------------------------------------------------------------


def test_the_api_gives_a_workloads_utilisation_to_who_may_see_it(
    world, catalog, backend, run, gpu_source, rule, api
) -> None:
    w = _running_on_gpu(world, catalog, backend, run)
    gpu_source.devices[_held_index(w)].utilisation = 42
    utilisation.sample(now=timezone.now())
    body = api(world.bob).get(f"/api/v1/workloads/{w.pk}/gpu/").json()
    assert (body["gpu_idle_percent"], body["gpu_idle_minutes"]) == (10, 30)
    assert [s["utilisation"] for s in body["samples"]] == [42]
    assert api(world.alice).get(f"/api/v1/workloads/{w.pk}/gpu/").status_code == 200  # teacher
    assert api(world.charlie).get(f"/api/v1/workloads/{w.pk}/gpu/").status_code == 404
    assert api(None).get(f"/api/v1/workloads/{w.pk}/gpu/").status_code in (401, 403)


def test_the_api_keeps_a_warned_workload_for_its_owner_only(
    world, catalog, backend, run, gpu_source, rule, api
) -> None:
    w = _running_on_gpu(world, catalog, backend, run)
    gpu_source.devices[_held_index(w)].utilisation = 0
    _minutes(run, w.started_at, 1, 31)
    assert api(world.bob).get(f"/api/v1/workloads/{w.pk}/").json()["gpu_warned_at"]
    refused = api(world.alice).post(f"/api/v1/workloads/{w.pk}/keep-gpu/")
    assert refused.status_code == 400 and "only its owner" in refused.content.decode()
    assert api(world.charlie).post(f"/api/v1/workloads/{w.pk}/keep-gpu/").status_code == 404
    kept = api(world.bob).post(f"/api/v1/workloads/{w.pk}/keep-gpu/")
    assert kept.status_code == 200 and kept.json()["gpu_warned_at"] is None
