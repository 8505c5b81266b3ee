"""昼推夜训: the beat task that gives each scheduled model server on a Kubernetes cluster the
replicas its windows ask now (through the registry workloads fills), and the pure function
behind it."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import zoneinfo
from collections.abc import Iterator

import pytest
from django.utils import timezone

from scheduling import serving, tasks
from scheduling.backends import registry
from scheduling.backends.base import Handle, ReplicaWindow, ServingSpec
from scheduling.models import Cluster
from scheduling.serving import (
    ServingTarget,
    register_serving_specs,
    scheduled_replicas,
    unregister_serving_specs,
)
from tests.scheduling.kubernetes.conftest import NAMESPACE, spec
from tests.scheduling.kubernetes.emulator import ApiServer

DAY = ReplicaWindow(days=(0, 1, 2, 3, 4), start=dt.time(8), end=dt.time(22), min_replicas=2)
SERVING = ServingSpec(
    "iris", "sklearn", storage_uri="pvc://models/iris/3", min_replicas=0, max_replicas=3,
    schedule=(DAY,),
)  # fmt: skip
ISVCS = "inferenceservices"


def monday(hour: int, minute: int = 0) -> dt.datetime:
    """30 Nov 2026, a Monday, in the portal's time zone."""
    return dt.datetime(2026, 11, 30, hour, minute, tzinfo=timezone.get_default_timezone())


def test_the_minimum_to_apply_is_the_windows_and_never_above_the_maximum() -> None:
    tz = zoneinfo.ZoneInfo("Asia/Shanghai")
    morning = dt.datetime(2026, 11, 30, 8, 0, tzinfo=tz)
    assert scheduled_replicas(SERVING, morning, tz) == (2, 3)
    assert scheduled_replicas(SERVING, morning.replace(hour=22), tz) == (0, 3)
    assert scheduled_replicas(SERVING, morning + dt.timedelta(days=5), tz) == (0, 3)  # Saturday
    small = dataclasses.replace(SERVING, max_replicas=1)
    assert scheduled_replicas(small, morning, tz) == (1, 1)
    # 08:00 in Shanghai is midnight in UTC: the windows are in the portal's local time.
    assert scheduled_replicas(SERVING, morning.astimezone(dt.UTC), tz) == (2, 3)


@pytest.fixture
def cluster(api: ApiServer) -> Iterator[Cluster]:
    cluster = Cluster.objects.create(
        name="Campus",
        slug="campus",
        backend="kubernetes",
        config={"host": api.url, "serving": "kserve", "retries": 1, "backoff_seconds": 0.01},
    )
    yield cluster
    registry.forget()


@pytest.fixture
def targets() -> Iterator[list[ServingTarget]]:
    """What workloads would register: the serving workloads alive on clusters."""
    found: list[ServingTarget] = []

    def source() -> list[ServingTarget]:
        return list(found)

    register_serving_specs(source)
    yield found
    unregister_serving_specs(source)


def submit(cluster: Cluster, model: ServingSpec = SERVING) -> ServingTarget:
    workload = spec("serving", serving=model, command=())
    handle = tasks.kubernetes_backend(cluster).submit(workload)
    return ServingTarget(cluster.pk, handle, model)


def min_replicas(api: ApiServer, target: ServingTarget) -> int:
    isvc = api.get(ISVCS, NAMESPACE, target.handle.state["name"])
    assert isvc is not None
    return int(isvc["spec"]["predictor"]["minReplicas"])


def patches(api: ApiServer) -> int:
    return sum(1 for method, path in api.requests if method == "PATCH" and ISVCS in path)


@pytest.mark.django_db
def test_when_the_window_opens_the_minimum_goes_to_2_and_when_it_closes_to_0(
    api: ApiServer, cluster: Cluster, targets: list[ServingTarget]
) -> None:
    target = submit(cluster)
    targets.append(target)
    assert min_replicas(api, target) == 0
    assert tasks.apply_schedules(monday(8)) == {target.handle.workload_id: 2}
    assert min_replicas(api, target) == 2
    assert tasks.apply_schedules(monday(22)) == {target.handle.workload_id: 0}
    assert min_replicas(api, target) == 0


@pytest.mark.django_db
def test_inside_the_same_window_nothing_is_patched(
    api: ApiServer, cluster: Cluster, targets: list[ServingTarget]
) -> None:
    target = submit(cluster)
    targets.append(target)
    tasks.apply_schedules(monday(9))
    before = patches(api)
    assert tasks.apply_schedules(monday(9, 1)) == {target.handle.workload_id: "unchanged"}
    assert tasks.apply_schedules(monday(21, 59)) == {target.handle.workload_id: "unchanged"}
    assert patches(api) == before


@pytest.mark.django_db
def test_servers_without_a_schedule_and_other_clusters_are_left_alone(
    api: ApiServer, cluster: Cluster, targets: list[ServingTarget]
) -> None:
    unscheduled = submit(cluster, dataclasses.replace(SERVING, schedule=()))
    local = Cluster.objects.create(name="Lab", slug="lab", backend="local")
    elsewhere = ServingTarget(local.pk, Handle("d3b07384-d9a7-4e2b-8f6a-000000000001"), SERVING)
    targets += [unscheduled, elsewhere]
    assert tasks.apply_schedules(monday(9)) == {}
    assert min_replicas(api, unscheduled) == 0
    assert patches(api) == 0


@pytest.mark.django_db
def test_a_cluster_that_is_down_is_reported_and_the_next_minute_tries_again(
    api: ApiServer, cluster: Cluster, targets: list[ServingTarget]
) -> None:
    target = submit(cluster)
    targets.append(target)
    api.fail(method="GET", path=ISVCS, status=503, times=10)
    done = tasks.apply_schedules(monday(9))
    assert str(done[target.handle.workload_id]).startswith("failed: ")
    api.faults.clear()
    assert tasks.apply_schedules(monday(9, 1)) == {target.handle.workload_id: 2}


@pytest.mark.django_db
def test_the_beat_task_is_a_no_op_with_a_log_line_when_nothing_is_registered(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(serving, "_sources", [])  # as before workloads hooks in
    with caplog.at_level(logging.INFO, logger="scheduling.tasks"):
        assert tasks.apply_serving_schedules() == {}
    assert "no source of serving workloads is registered" in caplog.text


def test_the_task_runs_every_minute_on_the_cluster_queue() -> None:
    from portal.celery import app

    entry = app.conf.beat_schedule["serving-schedules"]
    assert entry == {"task": "quanta.cluster.apply_serving_schedules", "schedule": 60.0}
    assert tasks.apply_serving_schedules.name == "quanta.cluster.apply_serving_schedules"
