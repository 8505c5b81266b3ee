"""A student's usage: GPU-hours and CPU-hours per period, from what their workloads held."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from workloads.choices import State
from workloads.models import Workload
from workloads.usage import usage

pytestmark = pytest.mark.django_db


def held(world, catalog, flavor, start, end, workers=1) -> Workload:
    return Workload.objects.create(
        kind="job",
        name="train",
        owner=world.bob,
        tenant=world.class_a,
        cluster=catalog.cluster,
        flavor=flavor,
        workers=workers,
        state=State.SUCCEEDED,
        started_at=start,
        finished_at=end,
    )


def test_hours_are_split_across_the_weeks_they_fall_in(world, catalog, settings) -> None:
    settings.TIME_ZONE = "UTC"
    now = dt.datetime(2026, 11, 25, 12, 0, tzinfo=dt.UTC)  # a Wednesday
    monday = dt.datetime(2026, 11, 23, tzinfo=dt.UTC)
    # 2 GPUs (two workers of one GPU), from Sunday 22:00 to Monday 02:00: 2 h in each week.
    held(
        world,
        catalog,
        catalog.gpu,
        monday - dt.timedelta(hours=2),
        monday + dt.timedelta(hours=2),
        workers=2,
    )
    rows = usage(world.bob, "week", 2, now=now)
    assert [r.start for r in rows] == [monday - dt.timedelta(weeks=1), monday]
    assert [r.gpu_hours for r in rows] == [Decimal(4), Decimal(4)]
    assert [r.cpu_hours for r in rows] == [Decimal(8), Decimal(8)]  # 2 cores × 2 workers × 2 h
    assert [r.count for r in rows] == [1, 1]


def test_a_running_workload_counts_up_to_now_and_a_half_gpu_counts_half(
    world, catalog, settings
) -> None:
    settings.TIME_ZONE = "UTC"
    now = timezone.now()
    held(world, catalog, catalog.half, now - dt.timedelta(hours=3), None)
    rows = usage(world.bob, "month", 1, now=now)
    assert rows[0].gpu_hours.quantize(Decimal("0.01")) == Decimal("1.50")


def test_the_usage_page_shows_only_your_own(world, catalog, client) -> None:
    now = timezone.now()
    held(world, catalog, catalog.gpu, now - dt.timedelta(hours=2), now)
    client.force_login(world.charlie)
    assert "2.00" not in client.get("/usage/").content.decode()
    client.force_login(world.bob)
    page = client.get("/usage/?by=month").content.decode()
    assert "2.00" in page and "GPU-hours" in page
