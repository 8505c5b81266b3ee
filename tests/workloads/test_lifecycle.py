"""A workload's life from launch to its end, driven through the services with a fake
backend: admission, queueing reasons, quota, gang, retries, stop, idle culling."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from scheduling.backends.base import BackendError, Phase
from scheduling.models import Allocation, GpuDevice
from workloads import reconcile, services
from workloads.choices import State
from workloads.lifecycle import transition
from workloads.models import Workload

pytestmark = pytest.mark.django_db


def states(workload: Workload) -> list[str]:
    return [e.to_state for e in workload.events.all() if e.from_state != e.to_state]


def test_a_launch_goes_from_pending_to_running_to_stopped(world, catalog, backend, run) -> None:
    w = run(services.launch_environment, actor=world.bob, template=catalog.jupyter)
    assert w.state == State.STARTING and w.charged
    spec = backend.specs[str(w.pk)]
    assert spec.base_url == f"/nb/{w.pk}/" and spec.owner == "bob"
    assert Allocation.objects.filter(workload=w).count() == 1

    backend.set(w.pk, Phase.RUNNING, last_activity=timezone.now())
    run(reconcile.reconcile, catalog.cluster)
    w.refresh_from_db()
    assert w.state == State.RUNNING and w.deadline_at is not None

    run(services.stop, actor=world.bob, workload=w)
    w.refresh_from_db()
    assert w.state == State.STOPPED and w.reason == "stopped by bob"
    assert states(w) == ["Starting", "Running", "Stopping", "Stopped"]
    assert backend.stops == [str(w.pk)]
    assert not Allocation.objects.filter(workload=w).exists()
    world.class_a.quota.refresh_from_db()
    assert world.class_a.quota.used_environments == 0


def test_a_template_not_granted_to_you_cannot_be_launched(world, catalog, backend) -> None:
    with pytest.raises(ValidationError) as err:
        services.launch_environment(actor=world.charlie, template=catalog.jupyter)
    assert "not granted to you" in err.value.message_dict["template"][0]


def test_a_flavor_outside_the_grant_is_refused(world, catalog, backend) -> None:
    catalog.grant.flavors.set([catalog.small])
    with pytest.raises(ValidationError) as err:
        services.launch_environment(actor=world.bob, template=catalog.jupyter, flavor=catalog.gpu)
    assert "not allowed" in err.value.message_dict["flavor"][0]


def test_the_per_member_limit_of_a_grant_is_enforced(world, catalog, backend, run) -> None:
    catalog.grant.member_limit = 1
    catalog.grant.save()
    run(services.launch_environment, actor=world.bob, template=catalog.jupyter)
    with pytest.raises(ValidationError, match="1 of 1"):
        services.launch_environment(actor=world.bob, template=catalog.jupyter)


def test_a_flavor_bigger_than_any_node_is_rejected_at_once(world, catalog, backend, run) -> None:
    w = run(
        services.launch_environment, actor=world.bob, template=catalog.jupyter, flavor=catalog.huge
    )
    assert w.state == State.REJECTED
    assert w.reason == "bigger than any node: asks 64 CPU cores, the largest node has 16"
    assert not w.charged and not Allocation.objects.filter(workload=w).exists()
    assert backend.submits == []


def test_gpu_work_waits_where_there_is_no_gpu_and_starts_when_one_appears(
    world, catalog, backend, run
) -> None:
    GpuDevice.objects.all().delete()
    w = run(
        services.launch_environment, actor=world.bob, template=catalog.jupyter, flavor=catalog.gpu
    )
    assert w.state == State.QUEUED
    assert w.reason == "waiting for capacity: this cluster has no GPU right now"
    GpuDevice.objects.create(node=catalog.node, index=0, model="A100", memory_mib=40960)
    run(services.admit_queued, catalog.cluster)
    w.refresh_from_db()
    assert w.state == State.STARTING


def test_quota_names_the_limit_and_the_next_launch_starts_when_it_frees(
    world, catalog, backend, run
) -> None:
    world.quota(world.class_a, gpus=Decimal(1))
    first = run(
        services.launch_environment, actor=world.bob, template=catalog.jupyter, flavor=catalog.gpu
    )
    second = run(
        services.launch_environment, actor=world.bob, template=catalog.jupyter, flavor=catalog.gpu
    )
    assert first.state == State.STARTING
    assert second.state == State.QUEUED
    assert second.reason == "waiting for quota: class ML-101: 1 of 1 GPUs in use (asked for 1)"
    run(services.stop, actor=world.bob, workload=first)
    run(services.admit_queued, catalog.cluster)
    second.refresh_from_db()
    assert second.state == State.STARTING


def test_a_gang_that_cannot_fit_waits_whole_and_starts_when_capacity_frees(
    world, catalog, backend, run
) -> None:
    blocker = run(
        services.launch_environment, actor=world.bob, template=catalog.jupyter, flavor=catalog.gpu
    )
    job = run(
        services.submit_job,
        actor=world.bob,
        tenant=world.class_a,
        flavor=catalog.gpu,
        command="python train.py",
        workers=2,
    )
    assert job.state == State.QUEUED
    assert job.reason == "waiting for all 2 workers of the gang to fit (1 fit now)"
    assert not Allocation.objects.filter(workload=job).exists()  # nothing held while waiting
    run(services.stop, actor=world.bob, workload=blocker)
    run(services.admit_queued, catalog.cluster)
    job.refresh_from_db()
    assert job.state == State.STARTING
    spec = backend.specs[str(job.pk)]
    assert sorted(p.gpu_indices for p in spec.placement) == [(0,), (1,)]


def test_two_half_gpus_share_one_device(world, catalog, backend, run) -> None:
    a = run(
        services.launch_environment, actor=world.bob, template=catalog.jupyter, flavor=catalog.half
    )
    b = run(
        services.launch_environment,
        actor=world.alice,
        template=catalog.jupyter,
        flavor=catalog.half,
    )
    devices = {Allocation.objects.get(workload=w).device_id for w in (a, b)}
    assert len(devices) == 1  # packed onto one device, the other stays whole


def test_a_closed_time_window_queues_with_the_window_named(world, catalog, backend, run) -> None:
    closed_day = (timezone.localtime().weekday() + 3) % 7
    catalog.grant.windows = [{"day": closed_day, "start": "14:00", "end": "16:00"}]
    catalog.grant.save()
    w = run(services.launch_environment, actor=world.bob, template=catalog.jupyter)
    assert w.state == State.QUEUED and "time window" in w.reason and "14:00–16:00" in w.reason


def test_vscode_on_the_local_backend_is_rejected_with_the_reason(
    world, catalog, backend, run
) -> None:
    catalog.jupyter.kind = "vscode"
    catalog.jupyter.save()
    w = run(services.launch_environment, actor=world.bob, template=catalog.jupyter)
    assert w.state == State.REJECTED and "needs a Kubernetes cluster" in w.reason


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"workers": 0}, "workers"),
        ({"workers": 1000}, "workers"),
        ({"command": "python 'unclosed"}, "command"),
        ({"command": ""}, "command"),
        ({"env": {"RANK": "3"}}, "env"),
        ({"env": {"1BAD": "x"}}, "env"),
        ({"max_retries": 99}, "max_retries"),
    ],
)
def test_bad_job_input_is_refused_naming_the_field(world, catalog, backend, kwargs, field):
    args = {
        "actor": world.bob,
        "tenant": world.class_a,
        "flavor": catalog.small,
        "command": "python train.py",
        **kwargs,
    }
    with pytest.raises(ValidationError) as err:
        services.submit_job(**args)
    assert field in err.value.message_dict
    assert not Workload.objects.exists()


def test_a_job_bigger_than_the_quota_is_refused_at_submit_with_the_quota_reason(
    world, catalog, backend, run
) -> None:
    world.quota(world.class_a, gpus=2)
    with pytest.raises(ValidationError) as err:
        services.submit_job(
            actor=world.bob,
            tenant=world.class_a,
            flavor=catalog.half,  # half a GPU each: 6 workers ask for 3 GPUs
            command="python train.py",
            workers=6,
        )
    [message] = err.value.message_dict["workers"]
    assert message == (
        "class ML-101: 0 of 2 GPUs in use (asked for 3): more than the quota allows even with "
        "nothing else running; your quota allows 2 more GPUs"
    )
    assert not Workload.objects.exists()
    # Within the limit it is accepted (and waits for room if others use it).
    job = run(
        services.submit_job,
        actor=world.bob,
        tenant=world.class_a,
        flavor=catalog.half,
        command="python train.py",
        workers=4,
    )
    assert job.state in (State.STARTING, State.QUEUED)


def test_a_failing_job_is_retried_then_fails_with_the_reason(world, catalog, backend, run) -> None:
    job = run(
        services.submit_job,
        actor=world.bob,
        tenant=world.class_a,
        flavor=catalog.small,
        command=["python", "train.py"],
        max_retries=1,
    )
    backend.set(job.pk, Phase.FAILED, "worker 0 exited with code 3", exit_code=3)
    run(reconcile.reconcile, catalog.cluster)
    job.refresh_from_db()
    assert job.state == State.STARTING and job.attempt == 1
    assert "attempt 2 of 2" in job.reason
    assert backend.submits == [(str(job.pk), 0), (str(job.pk), 1)]
    backend.set(job.pk, Phase.FAILED, "worker 0 exited with code 3", exit_code=3, attempt=1)
    run(reconcile.reconcile, catalog.cluster)
    job.refresh_from_db()
    assert (job.state, job.exit_code) == (State.FAILED, 3)
    assert job.reason == "worker 0 exited with code 3"
    world.class_a.quota.refresh_from_db()
    assert world.class_a.quota.used_jobs == 0


def test_a_permanent_backend_error_fails_the_workload_and_frees_everything(
    world, catalog, backend, run
) -> None:
    backend.fail_submit = BackendError("image quanta/pytorch:2 not found", transient=False)
    w = run(services.launch_environment, actor=world.bob, template=catalog.jupyter)
    assert (w.state, w.reason) == (State.FAILED, "image quanta/pytorch:2 not found")
    assert not w.charged and not Allocation.objects.filter(workload=w).exists()


def test_late_and_duplicate_messages_change_nothing(world, catalog, backend, run) -> None:
    w = run(services.launch_environment, actor=world.bob, template=catalog.jupyter)
    run(services.stop, actor=world.bob, workload=w)
    w.refresh_from_db()
    assert w.state == State.STOPPED
    events = w.events.count()
    assert transition(w, State.RUNNING, reason="late") is False
    assert transition(w, State.STOPPED, reason="again") is False
    backend.set(w.pk, Phase.RUNNING)
    reconcile.apply_observation(w, backend.phases[str(w.pk)])
    w.refresh_from_db()
    assert w.state == State.STOPPED and w.events.count() == events


def test_a_running_workload_the_backend_lost_fails_with_the_reason(
    world, catalog, backend, run
) -> None:
    w = run(services.launch_environment, actor=world.bob, template=catalog.jupyter)
    backend.set(w.pk, Phase.RUNNING)
    run(reconcile.reconcile, catalog.cluster)
    del backend.phases[str(w.pk)]
    run(reconcile.reconcile, catalog.cluster)
    w.refresh_from_db()
    assert w.state == State.FAILED and w.reason.startswith("lost")


def test_orphans_left_by_a_crash_are_stopped(world, catalog, backend) -> None:
    backend.orphans.add("3f1e0000-0000-0000-0000-000000000000")
    reconcile.reconcile(catalog.cluster)
    assert backend.stops == ["3f1e0000-0000-0000-0000-000000000000"]


def _running(world, catalog, backend, run) -> Workload:
    w = run(services.launch_environment, actor=world.bob, template=catalog.jupyter)
    backend.set(w.pk, Phase.RUNNING)
    run(reconcile.reconcile, catalog.cluster)
    w.refresh_from_db()
    return w


def test_an_idle_environment_is_warned_then_stopped(world, catalog, backend, run) -> None:
    w = _running(world, catalog, backend, run)
    start = w.started_at
    run(services.cull, now=start + dt.timedelta(minutes=52))
    w.refresh_from_db()
    assert w.state == State.RUNNING
    assert w.events.last().reason == "idle: stops in 8 minutes unless used"
    run(services.cull, now=start + dt.timedelta(minutes=61))
    w.refresh_from_db()
    assert w.state == State.STOPPED and w.reason == "idle for 60 minutes"


def test_activity_keeps_an_environment_alive(world, catalog, backend, run) -> None:
    w = _running(world, catalog, backend, run)
    later = w.started_at + dt.timedelta(minutes=55)
    backend.set(w.pk, Phase.RUNNING, last_activity=later)
    run(reconcile.reconcile, catalog.cluster)
    run(services.cull, now=later + dt.timedelta(minutes=30))
    w.refresh_from_db()
    assert w.state == State.RUNNING


def test_use_through_the_proxy_or_ssh_keeps_an_environment_alive(
    world, catalog, backend, run
) -> None:
    """Apps that report no activity of their own (VS Code, a desktop, SSH) are kept alive by
    the traffic the portal sees; an older report from the backend does not undo it."""
    from django.core.cache import cache

    from workloads.activity import record_activity

    w = _running(world, catalog, backend, run)
    used = w.started_at + dt.timedelta(minutes=55)
    cache.clear()
    assert record_activity(w.pk, at=used)
    assert not record_activity(w.pk, at=used + dt.timedelta(seconds=5))  # throttled
    backend.set(w.pk, Phase.RUNNING, last_activity=w.started_at + dt.timedelta(minutes=1))
    run(reconcile.reconcile, catalog.cluster)
    w.refresh_from_db()
    assert w.last_activity_at == used
    run(services.cull, now=used + dt.timedelta(minutes=30))
    w.refresh_from_db()
    assert w.state == State.RUNNING
    run(services.cull, now=used + dt.timedelta(minutes=61))
    w.refresh_from_db()
    assert w.state == State.STOPPED and w.reason == "idle for 60 minutes"


def test_the_maximum_duration_stops_and_extending_moves_it(world, catalog, backend, run) -> None:
    catalog.grant.max_extensions = 1
    catalog.grant.save()
    w = _running(world, catalog, backend, run)
    with pytest.raises(ValidationError, match="only its owner"):
        services.extend(actor=world.alice, workload=w)
    first = w.deadline_at
    services.extend(actor=world.bob, workload=w)
    assert w.deadline_at > first
    with pytest.raises(ValidationError, match="the most the grant allows"):
        services.extend(actor=world.bob, workload=w)
    backend.set(w.pk, Phase.RUNNING, last_activity=w.deadline_at)
    run(reconcile.reconcile, catalog.cluster)
    run(services.cull, now=w.deadline_at + dt.timedelta(seconds=1))
    w.refresh_from_db()
    assert w.state == State.STOPPED and "maximum duration (240 minutes)" in w.reason


def test_each_extension_adds_the_grants_time_to_the_current_end(
    world, catalog, backend, run
) -> None:
    w = _running(world, catalog, backend, run)
    first = w.deadline_at
    step = dt.timedelta(minutes=catalog.grant.max_duration_minutes)
    services.extend(actor=world.bob, workload=w)
    assert w.deadline_at == first + step  # from the end, not from now
    services.extend(actor=world.bob, workload=w)
    assert w.deadline_at == first + 2 * step
    reasons = [e.reason for e in w.events.all() if e.reason.startswith("extended until")]
    assert len(set(reasons)) == 2  # two different times, not the same one twice


def test_an_extension_that_adds_no_time_is_refused_and_not_spent(
    world, catalog, backend, run
) -> None:
    w = _running(world, catalog, backend, run)
    Workload.objects.filter(pk=w.pk).update(deadline_at=None)
    with pytest.raises(ValidationError, match="no time limit to extend"):
        services.extend(actor=world.bob, workload=w)
    w.refresh_from_db()
    assert w.extensions == 0


def test_an_expired_grant_rejects_what_waits(world, catalog, backend, run) -> None:
    world.quota(world.class_a, environments=0)
    w = run(services.launch_environment, actor=world.bob, template=catalog.jupyter)
    assert w.state == State.QUEUED
    catalog.grant.expires_on = timezone.localdate() - dt.timedelta(days=1)
    catalog.grant.save()
    services.expire_grants()
    w.refresh_from_db()
    assert w.state == State.REJECTED and "grant expired" in w.reason


def test_a_stop_by_class_staff_is_audited_and_the_owners_own_is_not(
    world, catalog, backend, run
) -> None:
    from core.models import AuditEvent

    mine = _running(world, catalog, backend, run)
    run(services.stop, actor=world.bob, workload=mine)
    assert not AuditEvent.objects.filter(action="workload.stop").exists()

    theirs = _running(world, catalog, backend, run)
    run(services.stop, actor=world.alice, workload=theirs, reason="class is over")
    [event] = AuditEvent.objects.filter(action="workload.stop")
    assert (event.actor, event.target_id, event.tenant) == (
        world.alice,
        str(theirs.pk),
        world.class_a,
    )
    assert event.data == {"owner": "bob", "reason": "class is over"}


def test_an_extension_is_audited_and_spent_once(world, catalog, backend, run) -> None:
    from core.models import AuditEvent

    catalog.grant.max_extensions = 1
    catalog.grant.save()
    w = _running(world, catalog, backend, run)
    stale = Workload.objects.get(pk=w.pk)  # a second page open on the same environment
    services.extend(actor=world.bob, workload=w)
    with pytest.raises(ValidationError, match="the most the grant allows"):
        services.extend(actor=world.bob, workload=stale)
    w.refresh_from_db()
    assert w.extensions == 1
    [event] = AuditEvent.objects.filter(action="workload.extend")
    assert (event.actor, event.data["extensions"]) == (world.bob, 1)


def test_the_environment_limits_hold_for_every_caller_of_the_service(world, catalog) -> None:
    too_many = {f"V{i}": "x" for i in range(65)}
    with pytest.raises(ValidationError, match="at most 64 variables"):
        services.submit_job(
            actor=world.bob,
            tenant=world.class_a,
            flavor=catalog.small,
            command="true",
            env=too_many,
        )
    assert not Workload.objects.exists()


def test_finished_work_is_deleted_only_when_old_and_by_the_portal_or_an_admin(
    world, catalog, backend, run
) -> None:
    from core.models import AuditEvent

    now = timezone.now()
    two_days_ago = now - dt.timedelta(days=2)
    old, recent, active, other = (
        run(
            services.submit_job,
            actor=world.bob,
            tenant=world.class_a,
            flavor=catalog.small,
            command="true",
        )
        for _ in range(4)
    )
    ended = Workload.objects.filter
    ended(pk=old.pk).update(state=State.SUCCEEDED, finished_at=two_days_ago)
    ended(pk=recent.pk).update(state=State.FAILED, finished_at=now)
    # Another class's old work is not class A's to forget.
    ended(pk=other.pk).update(tenant=world.class_b, state=State.STOPPED, finished_at=two_days_ago)
    day_ago = now - dt.timedelta(days=1)
    for person in (world.charlie, world.bob, world.alice):  # a student, the owner, the teacher
        with pytest.raises(PermissionDenied):
            services.delete_finished(actor=person, tenant=world.class_a, finished_before=day_ago)
    assert Workload.objects.count() == 4
    assert services.delete_finished(actor=None, tenant=world.class_a, finished_before=day_ago) == 1
    assert set(Workload.objects.values_list("pk", flat=True)) == {recent.pk, active.pk, other.pk}
    assert not AuditEvent.objects.filter(action="workload.delete_finished").exists()
    later = now + dt.timedelta(minutes=1)
    assert (
        services.delete_finished(actor=world.dean, tenant=world.class_a, finished_before=later) == 1
    )
    [event] = AuditEvent.objects.filter(action="workload.delete_finished")
    assert (event.actor, event.data["deleted"]) == (world.dean, 1)
    assert set(Workload.objects.values_list("pk", flat=True)) == {active.pk, other.pk}
