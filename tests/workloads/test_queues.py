"""Queues and priorities on a portal-scheduled cluster: the scheduler core's session decides
what starts, what is preempted or reclaimed for it, and why the rest waits."""

from __future__ import annotations

import pytest

from scheduling.backends.base import Phase
from scheduling.models import PriorityClass, Queue
from workloads import reconcile, services
from workloads.choices import State
from workloads.models import Grant

pytestmark = pytest.mark.django_db


@pytest.fixture
def class_b_grant(world, catalog) -> Grant:
    grant = Grant.objects.create(template=catalog.jupyter, tenant=world.class_b)
    grant.flavors.set([catalog.gpu])
    return grant


def gpu_job(run, world, catalog, user, tenant, workers=1):
    return run(
        services.submit_job,
        actor=user,
        tenant=tenant,
        flavor=catalog.gpu,
        command="python train.py",
        workers=workers,
    )


def finish_stops(run, backend, catalog) -> None:
    """The backend reports the evicted work gone; the next session starts what waited."""
    run(reconcile.reconcile, catalog.cluster)
    run(services.admit_queued, catalog.cluster)


def test_higher_priority_work_preempts_lower_priority_work_in_its_queue(
    world, catalog, backend, run, class_b_grant
) -> None:
    class_b_grant.priority_class = PriorityClass.objects.create(name="exam", value=1000)
    class_b_grant.save()
    low = gpu_job(run, world, catalog, world.bob, world.class_a, workers=2)
    assert low.state == State.STARTING

    high = gpu_job(run, world, catalog, world.charlie, world.class_b)
    low.refresh_from_db()
    assert low.state in (State.STOPPING, State.STOPPED) and "preempt" in low.reason
    assert high.state == State.QUEUED and high.reason == "waiting for preempted work to stop"

    finish_stops(run, backend, catalog)
    high.refresh_from_db()
    low.refresh_from_db()
    assert (low.state, high.state) == (State.STOPPED, State.STARTING)


def test_equal_priority_never_preempts(world, catalog, backend, run, class_b_grant) -> None:
    first = gpu_job(run, world, catalog, world.bob, world.class_a, workers=2)
    second = gpu_job(run, world, catalog, world.charlie, world.class_b)
    first.refresh_from_db()
    assert first.state == State.STARTING
    assert second.state == State.QUEUED and "no node has 1 free GPU" in second.reason


def test_a_queue_over_its_share_gives_gpus_back_to_a_queue_below_it(
    world, catalog, backend, run, class_b_grant
) -> None:
    teaching = Queue.objects.create(cluster=catalog.cluster, name="teaching", reclaimable=True)
    teaching.tenants.set([world.class_a])
    research = Queue.objects.create(cluster=catalog.cluster, name="research")
    research.tenants.set([world.class_b])
    hog = gpu_job(run, world, catalog, world.bob, world.class_a, workers=2)
    assert hog.state == State.STARTING  # nobody else asks: teaching may use both GPUs

    asking = gpu_job(run, world, catalog, world.charlie, world.class_b)
    hog.refresh_from_db()
    assert hog.state in (State.STOPPING, State.STOPPED) and "reclaim" in hog.reason
    finish_stops(run, backend, catalog)
    asking.refresh_from_db()
    assert asking.state == State.STARTING


def test_a_queue_that_is_not_reclaimable_keeps_what_it_holds(
    world, catalog, backend, run, class_b_grant
) -> None:
    teaching = Queue.objects.create(cluster=catalog.cluster, name="teaching", reclaimable=False)
    teaching.tenants.set([world.class_a])
    research = Queue.objects.create(cluster=catalog.cluster, name="research")
    research.tenants.set([world.class_b])
    hog = gpu_job(run, world, catalog, world.bob, world.class_a, workers=2)
    asking = gpu_job(run, world, catalog, world.charlie, world.class_b)
    hog.refresh_from_db()
    assert hog.state == State.STARTING and asking.state == State.QUEUED


def test_a_queue_capability_caps_what_its_tenants_start(world, catalog, backend, run) -> None:
    teaching = Queue.objects.create(
        cluster=catalog.cluster, name="teaching", capability={"gpus": 1}
    )
    teaching.tenants.set([world.class_a])
    job = gpu_job(run, world, catalog, world.bob, world.class_a, workers=2)
    assert job.state == State.QUEUED
    assert job.reason == "waiting: queue teaching: capability reached"


def test_a_closed_queue_holds_its_work(world, catalog, backend, run) -> None:
    teaching = Queue.objects.create(cluster=catalog.cluster, name="teaching", is_open=False)
    teaching.tenants.set([world.class_a])
    job = gpu_job(run, world, catalog, world.bob, world.class_a)
    assert (job.state, job.reason) == (State.QUEUED, "waiting: queue teaching is closed")
    teaching.is_open = True
    teaching.save()
    run(services.admit_queued, catalog.cluster)
    job.refresh_from_db()
    assert job.state == State.STARTING


def test_the_evicted_workload_is_really_stopped_on_the_backend(
    world, catalog, backend, run, class_b_grant
) -> None:
    class_b_grant.priority_class = PriorityClass.objects.create(name="exam", value=1000)
    class_b_grant.save()
    low = gpu_job(run, world, catalog, world.bob, world.class_a, workers=2)
    backend.set(low.pk, Phase.RUNNING)
    gpu_job(run, world, catalog, world.charlie, world.class_b)
    assert str(low.pk) in backend.stops


def test_only_admins_give_a_grant_a_priority(world, catalog, api) -> None:
    PriorityClass.objects.create(name="exam", value=1000)
    body = {
        "template": "jupyter",
        "tenant": "ml-101",
        "flavors": ["small"],
        "priority_class": "exam",
    }
    assert api(world.alice).post("/api/v1/grants/", body, format="json").status_code == 403
    created = api(world.dean).post("/api/v1/grants/", body, format="json")
    assert created.status_code == 201 and created.json()["priority_class"] == "exam"
    without = {k: v for k, v in body.items() if k != "priority_class"}
    assert api(world.alice).post("/api/v1/grants/", without, format="json").status_code == 201
