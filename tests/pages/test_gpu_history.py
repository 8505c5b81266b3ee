"""GPUs allocated over time: the function behind the console's chart, on hand-made cases."""

from __future__ import annotations

import datetime as dt

import pytest

from console.cluster_views import Interval, allocation_history, gpus_allocated_over_time
from scheduling.models import Cluster
from workloads.choices import State, WorkloadKind
from workloads.models import Workload

UTC = dt.UTC
HOUR = dt.timedelta(hours=1)


def at(hour: int, minute: int = 0) -> dt.datetime:
    return dt.datetime(2026, 3, 2, hour, minute, tzinfo=UTC)


def test_each_hour_holds_the_time_weighted_average_of_gpus_allocated() -> None:
    intervals = [
        Interval(at(10, 30), at(12), 1),  # half of 10:00, all of 11:00
        Interval(at(11), at(11, 15), 0.5),  # a quarter of 11:00
        Interval(at(9), None, 2),  # began before the window, still held
        Interval(at(8), at(9, 30), 4),  # ended before the window
        Interval(at(10), at(11), 0),  # held no GPU
    ]
    series = gpus_allocated_over_time(intervals, start=at(10), end=at(13), step=HOUR)
    assert series == [(at(10), 2.5), (at(11), 3.125), (at(12), 2.0)]


def test_the_last_step_may_be_shorter_and_is_averaged_over_its_own_length() -> None:
    intervals = [Interval(at(9), None, 2), Interval(at(12), at(12, 15), 1)]
    series = gpus_allocated_over_time(intervals, start=at(11), end=at(12, 30), step=HOUR)
    assert series == [(at(11), 2.0), (at(12), 2.5)]


def test_an_empty_or_backwards_window_has_no_steps() -> None:
    assert gpus_allocated_over_time([], start=at(12), end=at(12), step=HOUR) == []
    assert gpus_allocated_over_time([], start=at(10), end=at(12), step=HOUR) == [
        (at(10), 0.0),
        (at(11), 0.0),
    ]


@pytest.mark.django_db
def test_the_history_of_a_cluster_comes_from_its_workloads_and_their_flavors(
    world, catalog, settings
) -> None:
    settings.TIME_ZONE = "UTC"

    def workload(flavor, started, finished=None, workers=1, cluster=catalog.cluster):
        return Workload.objects.create(
            kind=WorkloadKind.JOB,
            name="train",
            owner=world.bob,
            tenant=world.class_a,
            cluster=cluster,
            flavor=flavor,
            workers=workers,
            state=State.SUCCEEDED if finished else State.RUNNING,
            started_at=started,
            finished_at=finished,
        )

    workload(catalog.gpu, at(10), at(11, 30), workers=2)  # 2 GPUs for 1.5 hours
    workload(catalog.half, at(12))  # half a GPU since noon
    Workload.objects.create(  # never started: held nothing
        kind=WorkloadKind.JOB,
        name="queued",
        owner=world.bob,
        tenant=world.class_a,
        cluster=catalog.cluster,
        flavor=catalog.gpu,
        state=State.QUEUED,
    )
    other = Cluster.objects.create(name="Other", slug="other", backend="local")
    workload(catalog.gpu, at(10), workers=8, cluster=other)

    history = allocation_history([catalog.cluster], now=at(12, 30))
    series = history[catalog.cluster.pk]
    assert len(series) == 7 * 24
    assert series[-3:] == [(at(10), 2.0), (at(11), 1.0), (at(12), 0.5)]
    assert sum(v for _t, v in series[:-3]) == 0
