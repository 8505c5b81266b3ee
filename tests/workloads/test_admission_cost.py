"""An admission session costs what changed, not the length of the line: the queries of a
session over 10 or 100 waiting workloads are the same, an unchanged line writes nothing, and a
burst of launches asks for one session per cluster (``tasks.admit_soon``)."""

from __future__ import annotations

import re

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling.models import Allocation
from workloads import services, tasks
from workloads.choices import State, WorkloadKind
from workloads.models import Workload

pytestmark = pytest.mark.django_db

WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)
SLACK = 2  # the line's size may cost a statement or two more (bulk writes in batches)


def full_node(world, catalog) -> None:
    """Both GPUs of the catalog's node held by a running workload."""
    holder = Workload.objects.create(
        kind=WorkloadKind.NOTEBOOK,
        name="holder",
        owner=world.alice,
        tenant=world.class_a,
        cluster=catalog.cluster,
        template=catalog.jupyter,
        grant=catalog.grant,
        flavor=catalog.gpu,
        state=State.RUNNING,
    )
    for gpu in catalog.gpus:
        Allocation.objects.create(
            workload=holder, node=catalog.node, device=gpu, gpu_milli=1000, cpu_milli=1000
        )


def line(world, catalog, n: int) -> None:
    """``n`` more Pending workloads asking for a GPU, from two students and two classes."""
    owners = [(world.bob, world.class_a), (world.charlie, world.class_b)]
    Workload.objects.bulk_create(
        Workload(
            kind=WorkloadKind.NOTEBOOK,
            name=f"w{i}",
            owner=owners[i % 2][0],
            tenant=owners[i % 2][1],
            cluster=catalog.cluster,
            template=catalog.jupyter,
            grant=catalog.grant,
            flavor=[catalog.gpu, catalog.half][i % 2],
        )
        for i in range(n)
    )


def session(cluster) -> tuple[int, int]:
    with CaptureQueriesContext(connection) as queries:
        services.admit_queued(cluster)
    sql = [q["sql"] for q in queries.captured_queries]
    return len(sql), sum(1 for q in sql if WRITE.match(q))


def test_a_sessions_queries_do_not_grow_with_the_line(world, catalog, backend) -> None:
    full_node(world, catalog)
    world.quota(world.class_b, gpus=0)  # half the line waits for quota, half for capacity
    line(world, catalog, 10)
    first_10, _ = session(catalog.cluster)
    steady_10, writes_10 = session(catalog.cluster)
    line(world, catalog, 90)
    first_100, _ = session(catalog.cluster)
    steady_100, writes_100 = session(catalog.cluster)

    assert first_100 <= first_10 + SLACK
    assert steady_100 <= steady_10 + SLACK
    assert writes_10 == writes_100 == 0  # nothing changed: nothing written, nothing locked
    queued = Workload.objects.filter(state=State.QUEUED)
    assert queued.count() == 100
    assert queued.filter(reason__startswith="waiting for quota: class DL-201").count() == 50
    assert queued.filter(reason__startswith="waiting for capacity").count() == 50


def test_a_start_is_written_and_the_unchanged_rest_is_not(world, catalog, backend) -> None:
    full_node(world, catalog)
    line(world, catalog, 20)
    session(catalog.cluster)
    before = dict(Workload.objects.filter(state=State.QUEUED).values_list("pk", "updated_at"))
    Workload.objects.get(name="holder").allocations.filter(device=catalog.gpus[1]).delete()
    session(catalog.cluster)

    started = Workload.objects.get(state=State.STARTING)
    assert started.name == "w0"  # first in the line, a whole GPU
    assert Allocation.objects.filter(device=catalog.gpus[1]).get().workload == started
    after = dict(Workload.objects.filter(state=State.QUEUED).values_list("pk", "updated_at"))
    assert len(after) == 19
    assert after == {pk: before[pk] for pk in after}  # the node is full again: same reasons


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """What ``admit_soon`` sends to the broker, not run (as with a worker that is busy)."""
    sent: list[int] = []
    monkeypatch.setattr(tasks, "_runs_in_process", lambda: False)  # a broker, not in-process
    monkeypatch.setattr(tasks.admit_cluster, "delay", sent.append)
    cache.delete_many([tasks.ADMIT_PENDING.format(pk) for pk in range(1, 100)])
    return sent


def test_a_burst_of_launches_asks_for_one_session(world, catalog, backend, run, enqueued) -> None:
    catalog.grant.member_limit = 4
    catalog.grant.save()
    for _ in range(3):
        run(services.launch_environment, actor=world.bob, template=catalog.jupyter)
    assert enqueued == [catalog.cluster.pk]
    assert set(Workload.objects.values_list("state", flat=True)) == {State.PENDING}

    assert run(tasks.admit_cluster, catalog.cluster.pk) == 3  # the worker runs the session
    assert set(Workload.objects.values_list("state", flat=True)) == {State.STARTING}

    run(services.launch_environment, actor=world.bob, template=catalog.jupyter)
    assert enqueued == [catalog.cluster.pk] * 2  # the flag went with the session that ran


def test_a_launch_while_a_session_runs_asks_for_one_more(
    world, catalog, backend, run, enqueued
) -> None:
    run(services.launch_environment, actor=world.bob, template=catalog.jupyter)
    real = services.admit_queued

    def session_meanwhile(cluster):
        run(services.launch_environment, actor=world.bob, template=catalog.jupyter)
        run(services.launch_environment, actor=world.bob, template=catalog.jupyter)
        return real(cluster)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(services, "admit_queued", session_meanwhile)
        run(tasks.admit_cluster, catalog.cluster.pk)
    assert enqueued == [catalog.cluster.pk] * 2  # the first, and one follow-up for two


def test_the_old_per_workload_task_asks_for_its_clusters_session(
    world, catalog, backend, enqueued
) -> None:
    line(world, catalog, 2)
    workload = Workload.objects.first()
    assert tasks.admit(str(workload.pk)) == State.PENDING  # enqueued, not run here
    assert tasks.admit(str(workload.pk)) == State.PENDING
    assert enqueued == [catalog.cluster.pk]


def test_in_process_admission_runs_at_once(world, catalog, backend, run) -> None:
    cache.delete(tasks.ADMIT_PENDING.format(catalog.cluster.pk))
    for _ in range(2):
        w = run(services.launch_environment, actor=world.bob, template=catalog.jupyter)
        w.refresh_from_db()
        assert w.state == State.STARTING


def test_in_process_a_launch_during_a_session_gets_one_more_round_not_a_second_session(
    world, catalog, backend, run, monkeypatch
) -> None:
    real = services.admit_queued
    sessions: list[int] = []

    def session(cluster):
        sessions.append(cluster.pk)
        if len(sessions) == 1:  # a launch comes while the first session runs
            assert tasks.admit_soon(cluster.pk) is False  # asks for another round
        return real(cluster)

    monkeypatch.setattr(services, "admit_queued", session)
    run(services.launch_environment, actor=world.bob, template=catalog.jupyter)
    assert sessions == [catalog.cluster.pk] * 2  # one more round, in the same thread
