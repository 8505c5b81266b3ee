"""The one reconcile loop: what it leaves alone (work admitted after it read the database),
what it drives to an end (a stop whose task was lost), and the after-commit batches the
lifecycle tells its listeners."""

from __future__ import annotations

import datetime as dt
import time

import psutil
import pytest
from django.db import transaction
from django.utils import timezone

from scheduling.backends import registry
from scheduling.backends.base import Phase
from scheduling.models import Allocation
from tests.workloads.conftest import local_catalog, wait_for
from workloads import lifecycle, reconcile, services, tasks
from workloads.choices import State, WorkloadKind
from workloads.models import Workload


@pytest.fixture
def lost_stops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Stop tasks vanish (a worker killed before it ran them, Redis restarted empty)."""
    lost: list[str] = []
    monkeypatch.setattr(tasks.stop, "delay", lambda workload_id: lost.append(workload_id))
    return lost


def age(workload: Workload, by: dt.timedelta) -> None:
    """As if the workload's last change had been ``by`` ago."""
    Workload.objects.filter(pk=workload.pk).update(updated_at=timezone.now() - by)
    workload.refresh_from_db()


@pytest.mark.django_db
def test_work_admitted_while_reconcile_runs_is_not_taken_for_an_orphan(
    world, catalog, backend, run
) -> None:
    running = run(services.launch_environment, actor=world.bob, template=catalog.jupyter)
    backend.set(running.pk, Phase.RUNNING, attempt=0)
    late: list[Workload] = []
    listed = backend.running

    def running_after_a_launch() -> set[str]:
        # Between reconcile's read of the database and the backend's list, another request
        # launches, admits and submits an environment.
        workload = services.launch_environment(actor=world.bob, template=catalog.jupyter)
        services.admit_queued(catalog.cluster)
        reconcile.submit(str(workload.pk))
        late.append(workload)
        return listed()

    backend.running = running_after_a_launch  # type: ignore[method-assign]
    counts = run(reconcile.reconcile, catalog.cluster)
    [newcomer] = late
    newcomer.refresh_from_db()
    assert str(newcomer.pk) in backend.running() and counts["orphans"] == 0
    assert backend.stops == []
    assert newcomer.state == State.STARTING


@pytest.mark.django_db
def test_a_real_orphan_is_still_stopped(world, catalog, backend, run) -> None:
    backend.orphans.add("0b5e0000-0000-0000-0000-000000000000")
    counts = run(reconcile.reconcile, catalog.cluster)
    assert counts["orphans"] == 1 and backend.stops == ["0b5e0000-0000-0000-0000-000000000000"]


@pytest.mark.django_db
def test_a_stop_whose_task_was_lost_is_sent_again_and_ends_stopped(
    world, catalog, backend, run, lost_stops
) -> None:
    workload = run(
        services.launch_environment, actor=world.bob, template=catalog.jupyter, flavor=catalog.gpu
    )
    backend.set(workload.pk, Phase.RUNNING)
    run(reconcile.reconcile, catalog.cluster)
    run(services.stop, actor=world.bob, workload=workload)
    assert lost_stops == [str(workload.pk)] and backend.stops == []

    run(reconcile.reconcile, catalog.cluster)  # within the grace period: it may still come
    workload.refresh_from_db()
    assert workload.state == State.STOPPING and backend.stops == []
    assert Allocation.objects.filter(workload=workload).exists()  # held until it is gone

    age(workload, reconcile.STOP_GRACE + dt.timedelta(seconds=1))
    counts = run(reconcile.reconcile, catalog.cluster)
    assert counts["resent"] == 1 and backend.stops == [str(workload.pk)]
    run(reconcile.reconcile, catalog.cluster)  # the backend now says it is gone
    workload.refresh_from_db()
    assert (workload.state, workload.reason, workload.charged) == (
        State.STOPPED,
        "stopped by bob",
        False,
    )
    assert not Allocation.objects.filter(workload=workload).exists()
    world.class_a.quota.refresh_from_db()
    assert world.class_a.quota.used_gpus == 0 and world.class_a.quota.used_environments == 0


@pytest.mark.django_db
def test_a_resent_stop_is_sent_once_per_grace_period(
    world, catalog, backend, run, lost_stops
) -> None:
    workload = run(services.launch_environment, actor=world.bob, template=catalog.jupyter)
    backend.set(workload.pk, Phase.RUNNING)
    run(reconcile.reconcile, catalog.cluster)
    run(services.stop, actor=world.bob, workload=workload)
    backend.stop = lambda handle: backend.stops.append(handle.workload_id)  # type: ignore[method-assign]
    age(workload, reconcile.STOP_GRACE * 2)
    run(reconcile.reconcile, catalog.cluster)
    run(reconcile.reconcile, catalog.cluster)  # the grace counts anew from the resend
    assert backend.stops == [str(workload.pk)]
    workload.refresh_from_db()
    assert workload.state == State.STOPPING


@pytest.mark.django_db(transaction=True)
def test_a_lost_stop_on_this_host_ends_the_process_and_gives_everything_back(
    world, lost_stops
) -> None:
    registry.forget()
    cluster, _template, flavor = local_catalog(world, "jupyter")
    job = services.submit_job(
        actor=world.bob, tenant=world.class_a, flavor=flavor, command="sleep 300"
    )
    job = wait_for(cluster, job, State.RUNNING)
    pid = int(job.backend_state["tasks"][0]["pid"])
    assert psutil.pid_exists(pid)

    services.stop(actor=world.bob, workload=job)
    assert lost_stops == [str(job.pk)]
    job.refresh_from_db()
    assert job.state == State.STOPPING and psutil.pid_exists(pid)

    age(job, reconcile.STOP_GRACE + dt.timedelta(seconds=1))
    job = wait_for(cluster, job, State.STOPPED)
    assert not _alive(pid)
    assert str(job.pk) not in registry.get_backend(cluster).running()
    assert not Allocation.objects.filter(workload=job).exists()
    world.class_a.quota.refresh_from_db()
    assert world.class_a.quota.used_jobs == 0 and world.class_a.quota.used_cpu_cores == 0
    registry.forget()


@pytest.mark.django_db(transaction=True)
def test_a_stop_ends_processes_that_left_the_jobs_session(world, settings, tmp_path) -> None:
    """A job whose command starts a ``setsid`` child and a double-forked daemon (its own
    session, parent gone): Stop ends them all, and the job is Stopped only after that."""
    settings.DATA_DIR = tmp_path
    registry.forget()
    cluster, _template, flavor = local_catalog(world, "jupyter")
    command = "sh -c \"setsid sleep 300 & (setsid sh -c 'sleep 301 &' &); echo started; wait\""
    job = services.submit_job(actor=world.bob, tenant=world.class_a, flavor=flavor, command=command)
    job = wait_for(cluster, job, State.RUNNING)
    deadline = time.monotonic() + 10
    # Until both sleeps run (a count of processes would not do: a sandbox adds bwrap's own).
    while time.monotonic() < deadline:
        if [p.name() for p in _marked(str(job.pk))].count("sleep") == 2:
            break
        time.sleep(0.05)
    names = sorted(process.name() for process in _marked(str(job.pk)))
    assert names.count("sleep") == 2, names

    services.stop(actor=world.bob, workload=job)
    job = wait_for(cluster, job, State.STOPPED, timeout=40)
    assert _marked(str(job.pk)) == []
    assert str(job.pk) not in registry.get_backend(cluster).running()
    registry.forget()


def _marked(workload_id: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("QUANTA_WORKLOAD_ID") != workload_id:
                continue
            if process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.Error:
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# --- After-commit batches ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_listeners_hear_once_per_commit_with_that_commits_transitions(world, catalog) -> None:
    heard: list[list[tuple[str, str]]] = []
    listener = lambda batch: heard.append([(t.before, t.after) for t in batch])  # noqa: E731
    lifecycle.on_transitions(listener)
    try:
        jobs = [
            Workload.objects.create(
                kind=WorkloadKind.JOB,
                name=f"j{i}",
                owner=world.bob,
                tenant=world.class_a,
                cluster=catalog.cluster,
                flavor=catalog.small,
                command=["true"],
            )
            for i in range(3)
        ]
        with transaction.atomic():
            for job in jobs:
                lifecycle.transition(job, State.QUEUED, reason="waiting for its turn")
            assert heard == []  # nothing before commit
        assert heard == [[("Pending", "Queued")] * 3]
        with transaction.atomic():
            lifecycle.transition(jobs[0], State.REJECTED, reason="no")
        assert heard[-1] == [("Queued", "Rejected")]
    finally:
        lifecycle._listeners.remove(listener)


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_transaction_tells_nobody(world, catalog) -> None:
    heard: list[object] = []
    listener = heard.append
    lifecycle.on_transitions(listener)
    job = Workload.objects.create(
        kind=WorkloadKind.JOB,
        name="j",
        owner=world.bob,
        tenant=world.class_a,
        cluster=catalog.cluster,
        flavor=catalog.small,
        command=["true"],
    )
    try:
        with pytest.raises(RuntimeError), transaction.atomic():
            lifecycle.transition(job, State.QUEUED, reason="waiting")
            raise RuntimeError("rolled back")
        assert heard == []
        job.refresh_from_db()
        assert job.state == State.PENDING
    finally:
        lifecycle._listeners.remove(listener)


@pytest.mark.django_db
def test_a_broker_that_is_down_after_commit_is_not_an_error_and_the_sweeper_catches_up(
    world, catalog, backend, run, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    from kombu.exceptions import OperationalError
    from rest_framework.test import APIClient

    def down(*args: object) -> None:
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(tasks.admit_cluster, "delay", down)
    client = APIClient()
    client.force_authenticate(world.bob)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/api/v1/workloads/launch/", {"template": "jupyter"}, format="json")
    assert response.status_code == 201 and response.json()["state"] == State.PENDING
    run(services.admit_queued)  # the beat's reconcile, once the broker is back
    workload = Workload.objects.get(pk=response.json()["id"])
    assert workload.state == State.STARTING and backend.submits == [(str(workload.pk), 0)]


@pytest.mark.django_db
def test_work_admitted_but_never_handed_over_is_submitted_after_the_grace(
    world, catalog, backend, run, monkeypatch
) -> None:
    monkeypatch.setattr(tasks.submit, "delay", lambda workload_id: None)  # the task is lost
    workload = run(services.launch_environment, actor=world.bob, template=catalog.jupyter)
    assert workload.state == State.STARTING and backend.submits == []
    run(reconcile.reconcile, catalog.cluster)
    assert backend.submits == []  # within the grace: the task may only be late
    age(workload, reconcile.SUBMIT_GRACE + dt.timedelta(seconds=1))
    run(reconcile.reconcile, catalog.cluster)
    assert backend.submits == [(str(workload.pk), 0)]
    run(reconcile.reconcile, catalog.cluster)
    assert backend.submits == [(str(workload.pk), 0)]  # once


@pytest.mark.django_db
def test_a_workload_that_fails_while_stopping_ends_stopped(world, catalog, backend, run) -> None:
    workload = run(services.launch_environment, actor=world.bob, template=catalog.jupyter)
    backend.set(workload.pk, Phase.RUNNING)
    run(reconcile.reconcile, catalog.cluster)
    backend.stop = lambda handle: None  # type: ignore[method-assign]  # the stop is under way
    run(services.stop, actor=world.alice, workload=workload, reason="class is over")
    backend.set(workload.pk, Phase.FAILED, "exited on signal 15 (SIGTERM)", exit_code=-15)
    run(reconcile.reconcile, catalog.cluster)
    workload.refresh_from_db()
    assert (workload.state, workload.reason) == (State.STOPPED, "class is over")
