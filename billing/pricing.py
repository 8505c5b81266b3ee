"""Pricing: what a span of an interval costs under the plan versions in force over it.

Exact arithmetic (integers over one fixed denominator, ``Fraction`` at the edges): a span is
split at the plan versions' boundaries and at the off-peak window's, each piece costs (its
microseconds / one hour) × the hourly price of what the interval holds × the multipliers.
Nothing is rounded here except in ``round_ratio``, the one place money is rounded (to the
micro-unit, half to even).
"""

from __future__ import annotations

import bisect
import datetime as dt
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from django.utils import timezone

from billing.models import PricePlan

HOUR_MICROS = 3600 * 10**6
MICRO = Decimal("0.000001")


def round_amount(value: Fraction) -> Decimal:
    """Money as stored: an exact amount rounded to six places (half to even). The only
    rounding in billing."""
    return round_ratio(value.numerator, value.denominator)


def round_ratio(numerator: int, denominator: int) -> Decimal:
    """``numerator / denominator`` to six places, half to even, in integers (no Decimal
    context can round it twice)."""
    units, rest = divmod(numerator * 10**6, denominator)
    twice = 2 * rest
    if twice > denominator or (twice == denominator and units % 2):
        units += 1
    return Decimal(units).scaleb(-6)


class Held(Protocol):
    """What an interval holds (``UsageInterval`` or a test's stand-in)."""

    cpu_milli: int
    memory_mib: int
    gpus: int
    gpu_share_milli: int
    gpu_model: str
    priority_class: str
    queue: str


# Exact integer arithmetic with one fixed denominator (fast, and no rounding): prices and
# multipliers have four decimals (units of 1e-4), quantities are counted in 1/1,024,000 of a
# GPU, a core or a GiB (GPUs and cores in thousandths, memory in MiB), time in microseconds.
P4 = 10**4
QUANTITY = 1_024_000
DENOMINATOR = P4 * QUANTITY * P4**3 * 3_600_000_000  # price × quantity × 3 multipliers × µs/h


def _units(value: Any) -> int:
    """A price or multiplier (four decimals at most) in units of 1e-4."""
    return int(Decimal(str(value)).scaleb(4).to_integral_exact())


@dataclass(frozen=True)
class Version:
    """A plan version as exact prices (units of 1e-4), in force over [start, end) (end
    None: open)."""

    plan_id: int | None
    start: dt.datetime
    end: dt.datetime | None
    gpu_hour: int
    gpu_hour_by_model: dict[str, int] = field(default_factory=dict)
    cpu_core_hour: int = 0
    memory_gib_hour: int = 0
    priority_multipliers: dict[str, int] = field(default_factory=dict)
    queue_multipliers: dict[str, int] = field(default_factory=dict)
    offpeak: tuple[dt.time, dt.time] | None = None
    offpeak_multiplier: int = P4
    storage_gib_month: int = 0  # per GiB and calendar month (no multipliers apply)

    def hourly(self, held: Held) -> int:
        """One hour of what ``held`` holds, before multipliers, in 1e-4 / QUANTITY."""
        gpu = self.gpu_hour_by_model.get(held.gpu_model, self.gpu_hour)
        return (
            gpu * (held.gpus * 1000 + held.gpu_share_milli) * 1024
            + self.cpu_core_hour * held.cpu_milli * 1024
            + self.memory_gib_hour * held.memory_mib * 1000
        )

    def multiplier(self, held: Held, offpeak: bool) -> int:
        """The three multipliers' product, in units of 1e-12."""
        return (
            self.priority_multipliers.get(held.priority_class, P4)
            * self.queue_multipliers.get(held.queue, P4)
            * (self.offpeak_multiplier if offpeak else P4)
        )


@dataclass(frozen=True)
class Segment:
    start: dt.datetime
    end: dt.datetime
    version: Version
    offpeak: bool

    @property
    def micros(self) -> int:
        return (self.end - self.start) // dt.timedelta(microseconds=1)

    def numerator(self, held: Held) -> int:
        """The cost over DENOMINATOR."""
        return self.version.hourly(held) * self.version.multiplier(held, self.offpeak) * self.micros

    def unit_price(self, held: Held) -> Decimal:
        """Per hour, with the multipliers (to six places: for statements, not for sums)."""
        scaled = self.version.hourly(held) * self.version.multiplier(held, self.offpeak)
        return round_ratio(scaled, P4 * QUANTITY * P4**3)

    @property
    def hours(self) -> Decimal:
        """To six places: for statements, not for sums."""
        return round_ratio(self.micros, HOUR_MICROS)

    def cost(self, held: Held) -> Fraction:
        return Fraction(self.numerator(held), DENOMINATOR)


def versions(plans: Iterable[PricePlan]) -> list[Version]:
    """One cluster's plan rows, in order of ``effective_from``, as versions with their ends."""
    rows = sorted(plans, key=lambda p: p.effective_from)
    out = []
    for i, plan in enumerate(rows):
        end = rows[i + 1].effective_from if i + 1 < len(rows) else None
        window = None
        if plan.offpeak_start is not None and plan.offpeak_end is not None:
            window = (plan.offpeak_start, plan.offpeak_end)
        out.append(
            Version(
                plan_id=plan.pk,
                start=plan.effective_from,
                end=end,
                gpu_hour=_units(plan.gpu_hour),
                gpu_hour_by_model={k: _units(v) for k, v in plan.gpu_hour_by_model.items()},
                cpu_core_hour=_units(plan.cpu_core_hour),
                memory_gib_hour=_units(plan.memory_gib_hour),
                priority_multipliers={k: _units(v) for k, v in plan.priority_multipliers.items()},
                queue_multipliers={k: _units(v) for k, v in plan.queue_multipliers.items()},
                offpeak=window,
                offpeak_multiplier=_units(plan.offpeak_multiplier) if window else P4,
                storage_gib_month=_units(plan.storage_gib_month),
            )
        )
    return out


def offpeak_spans(
    window: tuple[dt.time, dt.time], start: dt.datetime, end: dt.datetime, tz: ZoneInfo | Any
) -> list[tuple[dt.datetime, dt.datetime]]:
    """The pieces of [start, end) inside the daily window (local times in ``tz``; a window
    whose start is after its end runs across midnight)."""
    begin, finish = window
    if begin == finish:
        return []
    spans = []
    day = start.astimezone(tz).date() - dt.timedelta(days=1)
    last = end.astimezone(tz).date()
    while day <= last:
        on, off = _window_on(day, begin, finish, tz)
        lo, hi = max(on, start), min(off, end)
        if lo < hi:
            spans.append((lo, hi))
        day += dt.timedelta(days=1)
    return spans


@functools.lru_cache(maxsize=4096)
def _window_on(
    day: dt.date, begin: dt.time, finish: dt.time, tz: Any
) -> tuple[dt.datetime, dt.datetime]:
    """The window that opens on local ``day`` (its end on the next day across midnight)."""
    on = dt.datetime.combine(day, begin, tzinfo=tz)
    off_day = day if finish > begin else day + dt.timedelta(days=1)
    return on, dt.datetime.combine(off_day, finish, tzinfo=tz)


def clip(pieces: Iterable[Segment], start: dt.datetime, end: dt.datetime) -> list[Segment]:
    """The parts of ``pieces`` within [start, end)."""
    out = []
    for p in pieces:
        lo, hi = max(p.start, start), min(p.end, end)
        if lo < hi:
            out.append(p if (lo, hi) == (p.start, p.end) else Segment(lo, hi, p.version, p.offpeak))
    return out


def segments(
    plan_versions: Sequence[Version], start: dt.datetime, end: dt.datetime, tz: Any = None
) -> list[Segment]:
    """[start, end) cut at the versions' boundaries and the off-peak windows; what lies
    before the first version is not priced (no segment)."""
    tz = tz or timezone.get_default_timezone()
    out: list[Segment] = []
    for version in plan_versions:
        lo = max(start, version.start)
        hi = end if version.end is None else min(end, version.end)
        if lo >= hi:
            continue
        cuts = offpeak_spans(version.offpeak, lo, hi, tz) if version.offpeak else []
        at = lo
        for on, off in cuts:
            if at < on:
                out.append(Segment(at, on, version, False))
            out.append(Segment(on, off, version, True))
            at = off
        if at < hi:
            out.append(Segment(at, hi, version, False))
    return out


def cost(held: Held, pieces: Iterable[Segment]) -> Fraction:
    return Fraction(cost_numerator(held, pieces), DENOMINATOR)


def cost_numerator(held: Held, pieces: Iterable[Segment]) -> int:
    """The exact cost over ``DENOMINATOR``."""
    return sum(s.numerator(held) for s in pieces)


EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
ONE_MICRO = dt.timedelta(microseconds=1)


def micros(moment: dt.datetime) -> int:
    """Microseconds since the epoch (exact: no float)."""
    return (moment - EPOCH) // ONE_MICRO


class Timeline:
    """One cluster's prices over [start, end) as prefix sums, so that the exact cost of any
    span in it is a few lookups (settlement prices 100,000 intervals a tick with it).

    The span is cut into ``segments`` once; for each kind of holding (GPU model, priority
    class, queue: what selects a price and the multipliers) three running integrals are kept,
    of the GPU, core and GiB prices times the multipliers over microseconds. The cost of
    [a, b) is then each quantity times the difference of its integral at b and at a: the same
    integers as summing ``Segment.numerator`` over the span's pieces, not an approximation.
    """

    def __init__(
        self, plan_versions: Sequence[Version], start: dt.datetime, end: dt.datetime, tz: Any
    ) -> None:
        self.start, self.end = start, end
        self.pieces = segments(plan_versions, start, end, tz)
        self.starts = [micros(p.start) for p in self.pieces]
        self.ends = [micros(p.end) for p in self.pieces]
        self._rates: dict[tuple[str, str, str], tuple[list[int], ...]] = {}

    def _integrals(self, held: Held) -> tuple[list[int], ...]:
        key = (held.gpu_model, held.priority_class, held.queue)
        found = self._rates.get(key)
        if found is not None:
            return found
        gpu_rate, cpu_rate, mem_rate = [], [], []
        gpu_sum, cpu_sum, mem_sum = [0], [0], [0]
        for piece, lo, hi in zip(self.pieces, self.starts, self.ends, strict=True):
            version = piece.version
            mult = version.multiplier(held, piece.offpeak)
            gpu = version.gpu_hour_by_model.get(held.gpu_model, version.gpu_hour) * mult
            cpu, mem = version.cpu_core_hour * mult, version.memory_gib_hour * mult
            gpu_rate.append(gpu)
            cpu_rate.append(cpu)
            mem_rate.append(mem)
            span = hi - lo
            gpu_sum.append(gpu_sum[-1] + gpu * span)
            cpu_sum.append(cpu_sum[-1] + cpu * span)
            mem_sum.append(mem_sum[-1] + mem * span)
        found = (gpu_rate, cpu_rate, mem_rate, gpu_sum, cpu_sum, mem_sum)
        self._rates[key] = found
        return found

    def numerator(self, held: Held, start: int, end: int) -> int:
        """The exact cost over ``DENOMINATOR`` of what ``held`` holds over [start, end)
        (microseconds since the epoch, within the timeline)."""
        if end <= start:
            return 0
        rates = self._integrals(held)
        g1, c1, m1 = self._at(rates, end)
        g0, c0, m0 = self._at(rates, start)
        return (
            (held.gpus * 1000 + held.gpu_share_milli) * 1024 * (g1 - g0)
            + held.cpu_milli * 1024 * (c1 - c0)
            + held.memory_mib * 1000 * (m1 - m0)
        )

    def _at(self, rates: tuple[list[int], ...], t: int) -> tuple[int, int, int]:
        """The three integrals from the timeline's start up to ``t``."""
        i = bisect.bisect_right(self.starts, t) - 1
        if i < 0:
            return 0, 0, 0
        gpu_rate, cpu_rate, mem_rate, gpu_sum, cpu_sum, mem_sum = rates
        into = min(t, self.ends[i]) - self.starts[i]
        return (
            gpu_sum[i] + gpu_rate[i] * into,
            cpu_sum[i] + cpu_rate[i] * into,
            mem_sum[i] + mem_rate[i] * into,
        )

    def clip(
        self, start: dt.datetime, end: dt.datetime
    ) -> list[tuple[dt.datetime, dt.datetime, int, Segment]]:
        """The pieces within [start, end) (for an entry's details): each part's start and
        end, its length in microseconds and the piece it is cut from."""
        lo_us, hi_us = micros(start), micros(end)
        i = max(0, bisect.bisect_right(self.starts, lo_us) - 1)
        out = []
        for j in range(i, len(self.pieces)):
            p_lo, p_hi = self.starts[j], self.ends[j]
            if p_lo >= hi_us:
                break
            if p_hi <= lo_us:
                continue
            piece = self.pieces[j]
            a, a_us = (piece.start, p_lo) if p_lo >= lo_us else (start, lo_us)
            b, b_us = (piece.end, p_hi) if p_hi <= hi_us else (end, hi_us)
            out.append((a, b, b_us - a_us, piece))
        return out


def month_starts(start: dt.datetime, end: dt.datetime, tz: Any) -> list[dt.datetime]:
    """The local midnights that begin a calendar month within (start, end), in ``tz``:
    where a charge is cut so that no entry straddles two months' statements."""
    out: list[dt.datetime] = []
    local = start.astimezone(tz)
    year, month = local.year, local.month
    while True:
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
        first = dt.datetime(year, month, 1, tzinfo=tz)
        if first >= end:
            return out
        out.append(first)


def month_bounds(moment: dt.datetime, tz: Any) -> tuple[dt.datetime, dt.datetime]:
    """The local calendar month around ``moment``: its first midnight and the next's."""
    local = moment.astimezone(tz)
    first = dt.datetime(local.year, local.month, 1, tzinfo=tz)
    year, month = (local.year + 1, 1) if local.month == 12 else (local.year, local.month + 1)
    return first, dt.datetime(year, month, 1, tzinfo=tz)


def storage_cost(
    plan_versions: Sequence[Version], mib: int, start: dt.datetime, end: dt.datetime, tz: Any
) -> Fraction:
    """What holding ``mib`` MiB over [start, end) costs, exactly: in each calendar month
    (local time) the month's price per GiB × GiB × the share of the month held, whatever the
    month's length (a day of February is 1/28 of February's price, a day of March 1/31 of
    March's). Under each plan version its own price; before the first, nothing."""
    if mib <= 0 or end <= start:
        return Fraction(0)
    total = Fraction(0)
    for version in plan_versions:
        lo = max(start, version.start)
        hi = end if version.end is None else min(end, version.end)
        if lo >= hi or not version.storage_gib_month:
            continue
        at = lo
        while at < hi:
            first, after = month_bounds(at, tz)
            cut = min(hi, after)
            held = version.storage_gib_month * mib * (micros(cut) - micros(at))
            total += Fraction(held, P4 * 1024 * (micros(after) - micros(first)))
            at = cut
    return total
