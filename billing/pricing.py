"""Pricing: what a span of an interval costs under the plan versions in force over it.

Exact arithmetic (integers over one fixed denominator, ``Fraction`` at the edges): a span is
split at the plan versions' boundaries and at the off-peak window's, each piece costs (its
microseconds / one hour) × the hourly price of what the interval holds × the multipliers.
Nothing is rounded here except in ``round_ratio``, the one place money is rounded (to the
micro-unit, half to even).
"""

from __future__ import annotations

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
