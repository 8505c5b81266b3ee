"""On PostgreSQL, simultaneous launches never exceed a quota nor share a whole GPU, and
sessions racing over one cluster's line (each computed without locks) never double-book."""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import connection

from scheduling.models import Allocation, GpuDevice
from tenants import services as tenant_services
from tenants.choices import Role
from tests.marks import requires_postgres
from workloads import admission, services
from workloads.choices import State, WorkloadKind
from workloads.models import Workload

pytestmark = [requires_postgres, pytest.mark.django_db(transaction=True)]


def launch_all(users, template, flavor) -> None:
    start = threading.Barrier(len(users))

    def launch(user) -> None:
        try:
            start.wait()
            services.launch_environment(actor=user, template=template, flavor=flavor)
        except ValidationError:
            pass  # refused (over the per-member limit): what some of these tests expect
        finally:
            connection.close()

    threads = [threading.Thread(target=launch, args=(u,)) for u in users]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)


def students(world, n: int):
    people = []
    for i in range(n):
        user = get_user_model().objects.create_user(username=f"s{i:02d}")
        tenant_services.set_membership(
            actor=world.root, tenant=world.class_a, user=user, role=Role.STUDENT
        )
        people.append(user)
    return people


def test_fifty_simultaneous_launches_against_a_quota_of_ten_admit_exactly_ten(
    world, catalog, backend
) -> None:
    world.quota(world.class_a, environments=10)
    launch_all(students(world, 50), catalog.jupyter, catalog.small)

    by_state = {s: Workload.objects.filter(state=s).count() for s in State.values}
    assert by_state[State.STARTING] == 10
    assert by_state[State.QUEUED] == 40
    world.class_a.quota.refresh_from_db()
    assert world.class_a.quota.used_environments == 10
    queued = Workload.objects.filter(state=State.QUEUED).first()
    assert queued.reason.startswith("waiting for quota: class ML-101: 10 of 10 environments")


def test_simultaneous_gpu_launches_never_get_the_same_gpu(world, catalog, backend) -> None:
    for i in range(2, 6):
        GpuDevice.objects.create(node=catalog.node, index=i, model="A100", memory_mib=40960)
    launch_all(students(world, 12), catalog.jupyter, catalog.gpu)

    devices = list(Allocation.objects.values_list("device_id", flat=True))
    assert len(devices) == 6 and len(set(devices)) == 6
    assert Workload.objects.filter(state=State.QUEUED).count() == 6


def test_simultaneous_launches_of_one_student_hold_the_per_member_limit(
    world, catalog, backend
) -> None:
    catalog.grant.member_limit = 1
    catalog.grant.save()
    launch_all([world.bob] * 20, catalog.jupyter, catalog.small)

    assert Workload.objects.filter(owner=world.bob).count() == 1


def sessions_race(cluster, n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``n`` sessions at once, each first computing its plan from the same snapshot (they wait
    for each other before committing), so all but one find their plan taken."""
    start, computed = threading.Barrier(n), threading.Barrier(n)
    first = threading.local()
    compute = admission._compute

    def compute_together(cluster):
        plan = compute(cluster)
        if not getattr(first, "done", False):  # the retries that follow run alone
            first.done = True
            computed.wait(timeout=30)
        return plan

    monkeypatch.setattr(admission, "_compute", compute_together)

    def session() -> None:
        try:
            start.wait()
            services.admit_queued(cluster)
        finally:
            connection.close()

    threads = [threading.Thread(target=session) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    monkeypatch.undo()


@pytest.mark.parametrize("quota", [None, 5])  # 6 GPUs free: the GPUs bind, or the quota
def test_sessions_racing_over_one_line_never_double_book_nor_overcharge(
    world, catalog, backend, monkeypatch, quota
) -> None:
    for i in range(2, 6):
        GpuDevice.objects.create(node=catalog.node, index=i, model="A100", memory_mib=40960)
    world.quota(world.class_a, gpus=quota)
    admitted = 6 if quota is None else quota
    people = students(world, 12)
    Workload.objects.bulk_create(
        Workload(
            kind=WorkloadKind.NOTEBOOK,
            name=f"w{i}",
            owner=user,
            tenant=world.class_a,
            cluster=catalog.cluster,
            template=catalog.jupyter,
            grant=catalog.grant,
            flavor=catalog.gpu,
        )
        for i, user in enumerate(people)
    )
    sessions_race(catalog.cluster, 4, monkeypatch)

    devices = list(Allocation.objects.values_list("device_id", flat=True))
    assert len(devices) == admitted and len(set(devices)) == admitted
    assert Workload.objects.filter(state=State.STARTING, charged=True).count() == admitted
    assert Workload.objects.filter(state=State.QUEUED).count() == 12 - admitted
    world.class_a.quota.refresh_from_db()
    assert world.class_a.quota.used_gpus == admitted
    sessions_race(catalog.cluster, 4, monkeypatch)  # nothing changed: the same again
    assert Allocation.objects.count() == admitted
