"""An endpoint's schedule: more replicas inside its windows, the base outside, windows that
run across midnight, and when the answer next changes."""

from __future__ import annotations

import datetime as dt
import zoneinfo

from scheduling.backends.base import ReplicaWindow
from scheduling.serving import min_replicas_at, next_change

TZ = zoneinfo.ZoneInfo("Asia/Shanghai")
WEEKDAYS = (0, 1, 2, 3, 4)
DAY = ReplicaWindow(days=WEEKDAYS, start=dt.time(8), end=dt.time(22), min_replicas=2)
NIGHT = ReplicaWindow(days=(4,), start=dt.time(23), end=dt.time(2), min_replicas=1)


def at(day: int, hour: int, minute: int = 0) -> dt.datetime:
    monday = dt.datetime(2026, 11, 30, hour, minute, tzinfo=TZ)  # 30 Nov 2026: a Monday
    return monday + dt.timedelta(days=day)


def test_inside_a_window_the_minimum_is_raised_and_outside_it_is_the_base() -> None:
    assert min_replicas_at(0, [DAY], at(0, 8), TZ) == 2
    assert min_replicas_at(0, [DAY], at(0, 21, 59), TZ) == 2
    assert min_replicas_at(0, [DAY], at(0, 22), TZ) == 0  # the end is outside
    assert min_replicas_at(0, [DAY], at(0, 7, 59), TZ) == 0
    assert min_replicas_at(1, [DAY], at(5, 12), TZ) == 1  # Saturday: the base
    assert min_replicas_at(3, [DAY], at(0, 12), TZ) == 3  # never below the base


def test_a_window_across_midnight_belongs_to_the_day_it_starts() -> None:
    friday_late, saturday_early = at(4, 23, 30), at(5, 1, 30)
    assert min_replicas_at(0, [NIGHT], friday_late, TZ) == 1
    assert min_replicas_at(0, [NIGHT], saturday_early, TZ) == 1
    assert min_replicas_at(0, [NIGHT], at(0, 1, 30), TZ) == 0  # Monday early: Sunday did not
    # The answer is the same moment seen from another zone.
    assert min_replicas_at(0, [DAY], at(0, 9).astimezone(dt.UTC), TZ) == 2


def test_the_next_change_is_the_next_window_edge() -> None:
    assert next_change([DAY], at(0, 12), TZ) == at(0, 22)
    assert next_change([DAY], at(0, 22), TZ) == at(1, 8)
    assert next_change([], at(0, 12), TZ) is None
