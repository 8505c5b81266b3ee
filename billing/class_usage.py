"""A class's usage per person for a date range, for its teachers: what each student's
workloads held (hours, GPU-hours) and what was charged for them, as CSV rows. From the
metering intervals and the ledger's charges (``billing.metering``, ``billing.invoices``), so
it agrees with the class's statements."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db.models import Q, Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from billing.choices import EntryKind
from billing.invoices import _safe as safe_cell
from billing.models import LedgerEntry, UsageInterval
from tenants.models import Tenant

COLUMNS = ("class", "person", "from", "until", "workloads", "hours", "gpu_hours", "amount")
HOUR = Decimal(3600)
MAX_DAYS = 400


@dataclass
class PersonUsage:
    person: str
    workloads: set[object] = field(default_factory=set)  # workload ids
    hours: Decimal = Decimal(0)
    gpu_hours: Decimal = Decimal(0)
    amount: Decimal = Decimal(0)


def parse_range(start_text: str, end_text: str, tenant: Tenant) -> tuple[dt.date, dt.date]:
    """``from`` and ``until`` (inclusive, YYYY-MM-DD); by default the class's term, or the
    month so far. A ValidationError names the field that cannot be read."""
    today = timezone.localdate()
    try:
        start = dt.date.fromisoformat(start_text) if start_text else None
    except ValueError:
        raise ValidationError({"from": _("Not a date (YYYY-MM-DD).")}) from None
    try:
        end = dt.date.fromisoformat(end_text) if end_text else None
    except ValueError:
        raise ValidationError({"until": _("Not a date (YYYY-MM-DD).")}) from None
    start = start or tenant.term_start or today.replace(day=1)
    end = end or tenant.term_end or today
    if end < start:
        raise ValidationError({"until": _("The end comes before the start.")})
    if (end - start).days > MAX_DAYS:
        raise ValidationError({"until": _("At most %(n)d days at once.") % {"n": MAX_DAYS}})
    return start, end


def by_person(
    tenant: Tenant, start: dt.date, end: dt.date, now: dt.datetime | None = None
) -> list[PersonUsage]:
    """Each person who held resources in ``tenant`` between the two days (inclusive, local
    time), the intervals clipped to the range; charges dated in the range."""
    now = now or timezone.now()
    tz = timezone.get_current_timezone()
    since = timezone.make_aware(dt.datetime.combine(start, dt.time()), tz)
    until = timezone.make_aware(dt.datetime.combine(end + dt.timedelta(days=1), dt.time()), tz)
    people: dict[object, PersonUsage] = {}
    intervals = (
        UsageInterval.objects.filter(tenant=tenant, started_at__lt=until)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=since))
        .values_list(
            "owner_id", "owner_name", "workload_id", "started_at", "ended_at", "gpus",
            "gpu_share_milli",
        )
    )  # fmt: skip
    for owner_id, name, workload_id, began, ended, gpus, share in intervals:
        held = min(ended or now, until, now) - max(began, since)
        hours = Decimal(max(0, int(held.total_seconds()))) / HOUR
        row = people.setdefault(owner_id, PersonUsage(person=name))
        if workload_id is not None:
            row.workloads.add(workload_id)
        row.hours += hours
        row.gpu_hours += hours * (Decimal(gpus) + Decimal(share) / 1000)
    charges = (
        LedgerEntry.objects.filter(
            kind=EntryKind.CHARGE,
            interval__tenant=tenant,
            period_start__gte=since,
            period_start__lt=until,
        )
        .values_list("interval__owner_id", "interval__owner_name")
        .annotate(total=Sum("amount"))
    )
    for owner_id, name, total in charges:
        people.setdefault(owner_id, PersonUsage(person=name)).amount += total or Decimal(0)
    return sorted(people.values(), key=lambda row: row.person)


def csv_rows(tenant: Tenant, start: dt.date, end: dt.date) -> list[list[str]]:
    rows = [list(COLUMNS)]
    for row in by_person(tenant, start, end):
        rows.append(
            [
                safe_cell(tenant.name),
                safe_cell(row.person),
                start.isoformat(),
                end.isoformat(),
                str(len(row.workloads)),
                f"{row.hours:.3f}",
                f"{row.gpu_hours:.3f}",
                f"{row.amount:.6f}",
            ]
        )
    return rows
