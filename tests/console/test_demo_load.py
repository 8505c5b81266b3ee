"""The living demo's background load on the simulated farm: drawn from the openb mix,
submitted through the launch services, bounded, and off unless DEMO_LOAD is on."""

from __future__ import annotations

import datetime as dt
import random
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from console import demo_load
from console.tasks import run_demo_load
from scheduling.backends import registry
from scheduling.models import Allocation, Cluster
from tenants.models import Tenant
from workloads import reconcile
from workloads.choices import ACTIVE, State
from workloads.models import Grant, Workload

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    settings.DEMO_PASSWORD = "demo"
    registry.forget()
    call_command("seed_demo", stdout=StringIO())
    yield Cluster.objects.get(slug="sim")
    registry.forget()


def ticks(n: int, capture, *, seed: int = 1) -> None:
    rng = random.Random(seed)
    for _ in range(n):
        with capture(execute=True):
            demo_load.tick(rng=rng)


def test_the_openb_mix_maps_to_the_loads_sizes() -> None:
    assert demo_load.flavor_for(1, 200) == "sim-share-25"
    assert demo_load.flavor_for(1, 500) == "sim-share-50"
    assert demo_load.flavor_for(1, 1000) == "sim-gpu-1"
    assert demo_load.flavor_for(3, 1000) == "sim-gpu-4"
    sizes = {demo_load.draw(random.Random(s)).flavor for s in range(200)}
    assert {"sim-share-25", "sim-share-50", "sim-gpu-1"} <= sizes  # the mix, not one size
    low, high = demo_load.LIFETIME_S
    assert all(low <= demo_load.draw(random.Random(s)).lifetime_s <= high for s in range(50))


def test_seeding_gives_each_class_a_simulated_gpu_grant_and_the_load_its_tenant(demo) -> None:
    for slug in ("ml-101", "dl-201", "sp-210"):
        grant = Grant.objects.get(tenant__slug=slug, template__slug="jupyter-sim")
        assert grant.cluster == demo and "simulated" in grant.template.name
    load = Tenant.objects.get(slug="sim-openb")
    assert "simulated" in load.name
    assert Tenant.objects.get(slug="sim-load").quota.gpus == demo_load.QUOTA_GPUS


def test_the_load_runs_simulated_work_on_the_farm_and_stays_bounded(
    demo, django_capture_on_commit_callbacks
) -> None:
    ticks(3, django_capture_on_commit_callbacks)
    load = Workload.objects.filter(tenant__slug="sim-openb")
    assert load.count() == 3 * demo_load.SUBMITS_PER_TICK
    assert set(load.values_list("cluster__slug", flat=True)) == {"sim"}
    reconcile.reconcile(demo)
    assert load.filter(state=State.RUNNING).exists()
    assert Allocation.objects.filter(workload__in=load).exists()
    ticks(40, django_capture_on_commit_callbacks, seed=2)
    assert load.filter(state__in=ACTIVE).count() <= demo_load.MAX_ACTIVE
    held = sum(
        (w.flavor.gpus or w.flavor.gpu_milli / 1000) * w.workers
        for w in load.filter(state__in=("Starting", "Running")).select_related("flavor")
    )
    assert 0 < held <= demo_load.QUOTA_GPUS  # its quota: the farm's 128 GPUs never fill


def test_sessions_are_stopped_when_their_time_is_up_and_old_work_is_pruned(
    demo, django_capture_on_commit_callbacks
) -> None:
    ticks(6, django_capture_on_commit_callbacks, seed=3)
    reconcile.reconcile(demo)
    load = Workload.objects.filter(tenant__slug="sim-openb")
    later = timezone.now() + dt.timedelta(seconds=demo_load.LIFETIME_S[1] + 1)
    # The load's sessions and the demo students' (nothing else runs in this demo).
    running_sessions = Workload.objects.filter(kind="notebook", state=State.RUNNING).count()
    with django_capture_on_commit_callbacks(execute=True):
        done = demo_load.tick(now=later, rng=random.Random(4))
    assert done["stopped"] == running_sessions
    load.filter(state__in=ACTIVE).update(state=State.STOPPED, finished_at=timezone.now())
    old = timezone.now() + demo_load.KEEP_FINISHED + dt.timedelta(minutes=1)
    with django_capture_on_commit_callbacks(execute=True):
        done = demo_load.tick(now=old, rng=random.Random(5))
    assert done["pruned"] > 0
    assert not load.filter(finished_at__lt=timezone.now()).exists()


def test_the_task_does_nothing_unless_demo_load_is_on(demo, settings) -> None:
    settings.DEMO_LOAD = False
    assert run_demo_load.apply().get() is None
    assert not Workload.objects.exists()
    settings.DEMO_LOAD = True
    assert run_demo_load.apply().get()["submitted"] == demo_load.SUBMITS_PER_TICK


def test_some_demo_students_run_simulated_gpu_sessions_for_the_teachers_to_see(
    demo, django_capture_on_commit_callbacks
) -> None:
    ticks(demo_load.CLASS_SESSIONS + 2, django_capture_on_commit_callbacks, seed=6)
    sessions = Workload.objects.filter(template__slug="jupyter-sim")
    assert sessions.count() == demo_load.CLASS_SESSIONS  # a few at once, no more
    owners = set(sessions.values_list("owner__username", flat=True))
    assert owners <= set(demo_load.CLASS_USERS)
    assert not owners & {f"student{n}" for n in range(1, 7)}  # those the docs sign in as
    classes = set(sessions.values_list("tenant__slug", flat=True))
    assert classes == {"ml-101", "dl-201", "sp-210"}
    assert set(sessions.values_list("cluster__slug", flat=True)) == {"sim"}
    reconcile.reconcile(demo)
    assert sessions.filter(state=State.RUNNING).count() == demo_load.CLASS_SESSIONS
    later = timezone.now() + dt.timedelta(seconds=demo_load.LIFETIME_S[1] + 1)
    with django_capture_on_commit_callbacks(execute=True):
        demo_load.tick(now=later, rng=random.Random(7))
    assert not sessions.filter(state=State.RUNNING).exists()  # stopped when their time is up
