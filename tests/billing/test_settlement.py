"""Settlement: exact charges for whole and fractional GPUs across price versions and off-peak
windows; idempotent, crash-safe; the ledger never changes, corrections are new entries."""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
import itertools
import random
import zoneinfo
from collections import defaultdict
from decimal import Decimal
from fractions import Fraction
from types import SimpleNamespace
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied
from django.db.models import Sum

from billing import pricing, services
from billing.models import LedgerEntry, UsageInterval
from core.models import AuditEvent
from tests.billing.conftest import T0, plan

pytestmark = pytest.mark.django_db

H = dt.timedelta(hours=1)
MINUTE = dt.timedelta(minutes=1)


@pytest.fixture(autouse=True)
def _utc(settings: Any) -> None:
    settings.TIME_ZONE = "UTC"


def interval(world: Any, cluster: Any, start: dt.datetime, end: dt.datetime | None, **held: Any):
    return UsageInterval.objects.create(
        account=services.account_for_tenant(world.class_a),
        cluster=cluster,
        started_at=start,
        ended_at=end,
        settled_until=start,
        workload_name="nb",
        owner_name="bob",
        **held,
    )


def total() -> Decimal:
    return LedgerEntry.objects.aggregate(t=Sum("amount"))["t"] or Decimal(0)


def test_a_half_share_is_billed_as_half_a_gpu_never_a_whole_one(world, catalog, priced) -> None:
    interval(world, catalog.cluster, T0, T0 + H, gpu_share_milli=500, gpu_model="A100")
    services.settle(T0 + 2 * H)
    assert total() == Decimal("1.500000")  # half of 3.00 for one hour


def test_a_price_change_mid_interval_prices_each_side_at_its_version(world, catalog) -> None:
    plan(catalog.cluster, T0 - H, gpu_hour=Decimal("3"))
    plan(catalog.cluster, T0 + H, gpu_hour=Decimal("3.5"))
    interval(world, catalog.cluster, T0, T0 + 2 * H, gpus=1, gpu_model="A100")
    services.settle(T0 + 3 * H)
    assert total() == Decimal("6.500000")
    entry = LedgerEntry.objects.get()
    assert [s["unit_price"] for s in entry.details["segments"]] == ["3.000000", "3.500000"]


def test_usage_in_a_free_off_peak_window_costs_nothing(world, catalog) -> None:
    plan(
        catalog.cluster,
        T0 - 48 * H,
        gpu_hour=Decimal("3"),
        offpeak_start=dt.time(0),
        offpeak_end=dt.time(7),
        offpeak_multiplier=Decimal(0),
    )
    morning = T0.replace(hour=6)
    interval(world, catalog.cluster, morning, morning + 2 * H, gpus=1)  # 06:00–08:00
    services.settle(T0)
    assert total() == Decimal("3.000000")


def test_multipliers_by_priority_class_and_queue(world, catalog) -> None:
    plan(
        catalog.cluster,
        T0 - H,
        gpu_hour=Decimal("4"),
        priority_multipliers={"low": "0.5"},
        queue_multipliers={"research": "1.25"},
    )
    interval(world, catalog.cluster, T0, T0 + H, gpus=1, priority_class="low", queue="research")
    services.settle(T0 + H)
    assert total() == Decimal("2.500000")


def test_usage_before_any_price_plan_is_not_charged(world, catalog) -> None:
    interval(world, catalog.cluster, T0, T0 + H, gpus=1, gpu_model="A100")
    services.settle(T0 + H)
    assert total() == 0 and UsageInterval.objects.get().is_settled


def test_settling_twice_charges_once(world, catalog, priced) -> None:
    interval(world, catalog.cluster, T0, T0 + 2 * H, gpus=1, gpu_model="A100")
    interval(world, catalog.cluster, T0, None, cpu_milli=2000)
    services.settle(T0 + H)
    services.settle(T0 + H)
    first = total()
    assert first == Decimal("3.200000") and LedgerEntry.objects.count() == 2
    services.settle(T0 + 3 * H)
    services.settle(T0 + 3 * H)
    assert total() == Decimal("6.600000")  # 2 h of a GPU, 3 h of two cores
    assert LedgerEntry.objects.count() == 4


def test_a_crash_between_entries_charges_nothing_and_the_rerun_charges_once(
    world, catalog, priced, monkeypatch
) -> None:
    for _ in range(3):
        interval(world, catalog.cluster, T0, T0 + H, gpus=1, gpu_model="A100")

    def crash(rows: Any) -> None:
        raise RuntimeError("worker killed")

    real = services._write_watermarks
    monkeypatch.setattr(services, "_write_watermarks", crash)
    with pytest.raises(RuntimeError):
        services.settle(T0 + H)
    assert LedgerEntry.objects.count() == 0
    assert set(UsageInterval.objects.values_list("settled_until", flat=True)) == {T0}

    monkeypatch.setattr(services, "_write_watermarks", real)
    services.settle(T0 + H)
    services.settle(T0 + 2 * H)
    assert total() == Decimal("9.000000") and LedgerEntry.objects.count() == 3


def test_an_interval_closed_behind_its_watermark_gets_the_difference_back(
    world, catalog, priced
) -> None:
    row = interval(world, catalog.cluster, T0, None, gpus=1, gpu_model="A100")
    services.settle(T0 + 2 * H)
    UsageInterval.objects.filter(pk=row.pk).update(ended_at=T0 + H)  # the end, told late
    services.settle(T0 + 3 * H)
    assert total() == Decimal("3.000000")
    assert sorted(LedgerEntry.objects.values_list("amount", flat=True)) == [
        Decimal("-3.000000"),
        Decimal("6.000000"),
    ]


def test_a_span_across_the_start_of_a_month_is_charged_once_per_month(
    world, catalog, settings
) -> None:
    """Each month's statement gets its own part: no entry straddles the local midnight that
    starts a month, and the parts add up to the whole, rounded once."""
    settings.TIME_ZONE = "Asia/Shanghai"  # the month starts at 16:00 UTC the day before
    plan(catalog.cluster, T0 - 60 * 24 * H, gpu_hour=Decimal("3.3333"))
    midnight = dt.datetime(2025, 2, 1, tzinfo=zoneinfo.ZoneInfo("Asia/Shanghai"))
    start = midnight - dt.timedelta(minutes=100)
    row = interval(world, catalog.cluster, start, None, gpus=1, gpu_share_milli=489)
    services.settle(midnight + dt.timedelta(minutes=50))
    january, february = LedgerEntry.objects.order_by("period_start")
    assert (january.period_start, january.period_end) == (start, midnight)
    assert (february.period_start, february.period_end) == (midnight, midnight + 50 * MINUTE)
    whole = Fraction("3.3333") * Fraction(1489, 1000) * Fraction(150, 60)
    assert january.amount + february.amount == pricing.round_amount(whole)
    assert january.amount == pricing.round_amount(whole * Fraction(100, 150))
    row.refresh_from_db()
    assert row.charged == january.amount + february.amount


@pytest.mark.parametrize("seed", range(5))
def test_the_price_timeline_costs_any_span_as_its_pieces_do(seed: int) -> None:
    """``pricing.Timeline`` (settlement's prefix sums) gives exactly the integers of summing
    the span's pieces one by one, for random plans, windows, holdings and spans."""
    rng = random.Random(seed)
    tz = zoneinfo.ZoneInfo(rng.choice(["UTC", "Asia/Shanghai", "America/New_York"]))
    versions = []
    at = T0 - 10 * 24 * H
    for i in range(rng.randrange(1, 5)):
        at += dt.timedelta(seconds=rng.randrange(3600, 4 * 24 * 3600))
        window = rng.choice([None, (dt.time(0), dt.time(7)), (dt.time(22, 30), dt.time(6))])
        versions.append(
            pricing.Version(
                plan_id=i,
                start=at,
                end=None,
                gpu_hour=rng.randrange(0, 50_000),
                gpu_hour_by_model={"A100": rng.randrange(0, 90_000)},
                cpu_core_hour=rng.randrange(0, 5_000),
                memory_gib_hour=rng.randrange(0, 500),
                priority_multipliers={"low": 5_000},
                queue_multipliers={"research": 12_500},
                offpeak=window,
                offpeak_multiplier=rng.choice([0, 2_500, 5_000]) if window else pricing.P4,
            )
        )
    versions = [
        dataclasses.replace(v, end=versions[i + 1].start if i + 1 < len(versions) else None)
        for i, v in enumerate(versions)
    ]
    begin, finish = T0 - 12 * 24 * H, T0 + 6 * 24 * H
    line = pricing.Timeline(versions, begin, finish, tz)
    for _ in range(200):
        a = begin + dt.timedelta(microseconds=rng.randrange(0, 18 * 24 * 3600 * 10**6))
        b = min(finish, a + dt.timedelta(seconds=rng.randrange(0, 5 * 24 * 3600)))
        held = SimpleNamespace(
            gpus=rng.choice([0, 1, 4]),
            gpu_share_milli=rng.choice([0, 250, 489]),
            gpu_model=rng.choice(["A100", "V100"]),
            cpu_milli=rng.choice([0, 500, 4000]),
            memory_mib=rng.choice([0, 1536, 16384]),
            priority_class=rng.choice(["", "low"]),
            queue=rng.choice(["", "research"]),
        )
        pieces = pricing.segments(versions, a, b, tz)
        assert line.numerator(held, pricing.micros(a), pricing.micros(b)) == (
            pricing.cost_numerator(held, pieces)
        )
        assert [(lo, hi) for lo, hi, _, _ in line.clip(a, b)] == [(p.start, p.end) for p in pieces]


def test_ledger_entries_are_never_changed_and_corrections_are_new_entries(
    world, catalog, priced
) -> None:
    interval(world, catalog.cluster, T0, T0 + H, gpus=1, gpu_model="A100")
    services.settle(T0 + H)
    entry = LedgerEntry.objects.get()
    entry.amount = Decimal(0)
    with pytest.raises(PermissionDenied):
        entry.save()
    with pytest.raises(PermissionDenied):
        entry.delete()
    with pytest.raises(PermissionDenied):
        LedgerEntry.objects.update(amount=0)
    with pytest.raises(PermissionDenied):
        services.correct(entry=entry, amount="-1", reason="outage", actor=world.alice)

    services.correct(entry=entry, amount="-1.25", reason="outage", actor=world.dean)
    assert total() == Decimal("1.750000")
    assert AuditEvent.objects.filter(action="ledger.correct", actor=world.dean).count() == 1


# --- Reconciliation -------------------------------------------------------------------------

VERSIONS: list[dict[str, Any]] = [
    # start offset (hours from T0), prices; off-peak (start h, end h, multiplier) or None
    {"at": -720, "default": "2", "A100": "3", "cpu": "0.1", "mem": "0.01", "off": (0, 7, "0")},
    {
        "at": 30.5,
        "default": "2.2",
        "A100": "3.5",
        "cpu": "0.12",
        "mem": "0.01",
        "off": (22, 6, "0.5"),
    },
    {"at": 63, "default": "2.25", "A100": "4", "cpu": "0.0999", "mem": "0.0125", "off": None},
]
N = int(__import__("os").environ.get("BILL_N", "10000"))
LOW, RESEARCH = Fraction("0.5"), Fraction("1.25")


PRICES = [
    {k: Fraction(v[k]) for k in ("default", "A100", "cpu", "mem")}
    | {"off": (v["off"][0], v["off"][1], Fraction(v["off"][2])) if v["off"] else None}
    for v in VERSIONS
]
STARTS = [int(v["at"] * 3600) for v in VERSIONS]


def expected_cost(start: int, end: int, held: dict[str, Any]) -> Fraction:
    """An independent price: seconds since T0 cut at every version start and every hour (the
    windows start and end on the hour); the seconds of each (version, off-peak or not)
    summed, then priced in Fractions."""
    cuts = sorted(
        {start, end, *(s for s in STARTS if start < s < end)}
        | set(range((start // 3600 + 1) * 3600, end, 3600))
    )
    seconds: dict[tuple[int, bool], int] = defaultdict(int)
    for lo, hi in itertools.pairwise(cuts):
        i = bisect.bisect_right(STARTS, lo) - 1
        if i < 0:
            continue
        off = PRICES[i]["off"]
        hour = (lo // 3600 + 12) % 24  # T0 is noon
        inside = bool(off) and (
            off[0] <= hour < off[1] if off[0] < off[1] else hour >= off[0] or hour < off[1]
        )
        seconds[(i, inside)] += hi - lo
    cost = Fraction(0)
    for (i, inside), n in seconds.items():
        v = PRICES[i]
        gpu = v["A100"] if held["gpu_model"] == "A100" else v["default"]
        rate = (
            gpu * Fraction(held["gpus"] * 1000 + held["gpu_share_milli"], 1000)
            + v["cpu"] * Fraction(held["cpu_milli"], 1000)
            + v["mem"] * Fraction(held["memory_mib"], 1024)
        )
        if held["priority_class"] == "low":
            rate *= LOW
        if held["queue"] == "research":
            rate *= RESEARCH
        if inside:
            rate *= v["off"][2]
        cost += rate * Fraction(n, 3600)
    return cost


def test_ten_thousand_intervals_reconcile_to_the_cent(world, catalog) -> None:
    for v in VERSIONS:
        off = v["off"]
        plan(
            catalog.cluster,
            T0 + dt.timedelta(hours=v["at"]),
            gpu_hour=Decimal(v["default"]),
            gpu_hour_by_model={"A100": v["A100"]},
            cpu_core_hour=Decimal(v["cpu"]),
            memory_gib_hour=Decimal(v["mem"]),
            priority_multipliers={"low": "0.5"},
            queue_multipliers={"research": "1.25"},
            offpeak_start=dt.time(off[0]) if off else None,
            offpeak_end=dt.time(off[1]) if off else None,
            offpeak_multiplier=Decimal(off[2]) if off else Decimal(1),
        )
    rng = random.Random(12)
    account = services.account_for_tenant(world.class_a)
    final = 100 * 3600  # the last settlement, seconds after T0
    rows, expected = [], Fraction(0)
    for _ in range(N):
        start = rng.randrange(0, 90 * 3600)
        kind = rng.random()
        if kind < 0.1:  # still running at the last settlement
            end = None
        elif kind < 0.3:  # culled or preempted: stopped early
            end = start + rng.randrange(1, 600)
        else:
            end = min(start + rng.randrange(60, 30 * 3600), final)
        whole = rng.random() < 0.4
        held = {
            "gpus": rng.choice([1, 2, 4]) if whole else 0,
            "gpu_share_milli": 0 if whole else rng.choice([0, 125, 250, 489, 500, 733]),
            "gpu_model": rng.choice(["A100", "V100"]),
            "cpu_milli": rng.choice([500, 1000, 2000, 8000]),
            "memory_mib": rng.choice([512, 2048, 8192, 30000]),
            "priority_class": rng.choice(["", "", "low"]),
            "queue": rng.choice(["", "", "research"]),
        }
        expected += expected_cost(start, end if end is not None else final, held)
        at = T0 + dt.timedelta(seconds=start)
        rows.append(
            UsageInterval(
                account=account,
                cluster=catalog.cluster,
                started_at=at,
                ended_at=None if end is None else T0 + dt.timedelta(seconds=end),
                settled_until=at,
                workload_name="w",
                owner_name="bob",
                **held,
            )
        )
    UsageInterval.objects.bulk_create(rows, batch_size=1000)

    for hours in (20, 31, 55, 64.25, 100, 100):  # ticks across versions and windows, one repeated
        services.settle(T0 + dt.timedelta(hours=hours))

    charged = total()
    exact = Decimal(expected.numerator) / Decimal(expected.denominator)
    assert abs(charged - exact) < Decimal("0.005")
    assert charged.quantize(Decimal("0.01")) == exact.quantize(Decimal("0.01"))
    assert not UsageInterval.objects.filter(is_settled=False, ended_at__isnull=False).exists()
