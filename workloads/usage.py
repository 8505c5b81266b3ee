"""How much a person used: GPU-hours and CPU-hours per week or month, from the intervals
their workloads held resources (started → finished, or now for what still runs)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db.models import Q
from django.utils import timezone

from workloads.models import Workload


@dataclass
class Period:
    start: dt.datetime
    end: dt.datetime
    gpu_hours: Decimal = Decimal(0)
    cpu_hours: Decimal = Decimal(0)
    workloads: set[str] = field(default_factory=set)

    @property
    def count(self) -> int:
        return len(self.workloads)


def periods(kind: str, count: int, now: dt.datetime) -> list[Period]:
    """The last ``count`` weeks (Monday 00:00) or months, oldest first, in local time."""
    local = timezone.localtime(now)
    if kind == "month":
        starts = []
        year, month = local.year, local.month
        for _ in range(count):
            starts.append(
                local.replace(
                    year=year, month=month, day=1, hour=0, minute=0, second=0, microsecond=0
                )
            )
            year, month = (year, month - 1) if month > 1 else (year - 1, 12)
        starts.reverse()
        ends = [*starts[1:], _next_month(starts[-1])]
    else:
        monday = (local - dt.timedelta(days=local.weekday())).replace(
            hour=0, minute=0, second=0, microsecond=0
        )
        starts = [monday - dt.timedelta(weeks=count - 1 - i) for i in range(count)]
        ends = [s + dt.timedelta(weeks=1) for s in starts]
    return [Period(s, e) for s, e in zip(starts, ends, strict=True)]


def _next_month(start: dt.datetime) -> dt.datetime:
    year, month = (start.year, start.month + 1) if start.month < 12 else (start.year + 1, 1)
    return start.replace(year=year, month=month)


def usage(
    user: Any, kind: str = "week", count: int = 8, now: dt.datetime | None = None
) -> list[Period]:
    now = now or timezone.now()
    rows = periods(kind, count, now)
    begin = rows[0].start
    held = (
        Workload.objects.filter(owner=user, started_at__isnull=False)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=begin))
        .select_related("flavor")
    )
    for workload in held:
        start, end = workload.started_at, workload.finished_at or now
        assert start is not None  # the query above takes started work only
        gpus = workload.flavor.gpu_equivalents * workload.workers
        cores = Decimal(workload.flavor.cpu_milli) / 1000 * workload.workers
        for period in rows:
            overlap = (min(end, period.end) - max(start, period.start)).total_seconds()
            if overlap > 0:
                hours = Decimal(overlap) / 3600
                period.gpu_hours += gpus * hours
                period.cpu_hours += cores * hours
                period.workloads.add(str(workload.pk))
    return rows
