"""Invoices and statements: a payer's ledger entries per month (and per term), grouped into
lines with the names as they were.

An entry belongs to the month of its ``period_start`` (a charge; charges never straddle a
month) or of its ``created_at`` (a correction, a credit). Closing a month
(``close_month``, the beat task ``quanta.billing.close_invoices``) writes, per account with
entries not invoiced yet up to the month's end, one ``Invoice`` with its lines and the
assignment of each entry (``InvoicedEntry``, one invoice per entry). So an invoice's total is
exactly the sum of the entries assigned to it, a closed invoice is never changed, and an
entry written after its month closed (a correction, a late adjustment) goes into the next
month that closes. The month still open is computed live (``statement``), never stored.

Amounts are kept with six places; pages show them to the cent with ``cents`` (half to even),
each line and the total rounded on their own (docs/billing.md, "Invoices and statements").
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F, Min, Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _

from billing import services
from billing.choices import EntryKind, InvoiceState, LineKind
from billing.models import Account, Invoice, InvoicedEntry, InvoiceLine, LedgerEntry, UsageInterval
from core.audit import _jsonable
from core.models import AuditEvent
from tenants.choices import MANAGING_ROLES
from tenants.models import Tenant
from tenants.permissions import Access
from workloads.models import Workload

logger = logging.getLogger(__name__)

CENT = Decimal("0.01")
MICRO = Decimal("0.000001")
HOUR_MICROSECONDS = Decimal(3_600_000_000)
MONTH = re.compile(r"^(\d{4})-(\d{2})$")
BATCH = 1000  # rows per bulk INSERT


def cents(value: Decimal) -> Decimal:
    """The one display rounding: to the cent, half to even (as settlement rounds)."""
    return value.quantize(CENT, rounding=ROUND_HALF_EVEN)


# --- Months -------------------------------------------------------------------------------


def parse_month(value: Any, name: str = "month") -> dt.date:
    """``"2025-01"`` as the month's first day, or a 400 naming ``name``."""
    match = MONTH.match(value.strip()) if isinstance(value, str) else None
    if match is None or not 1 <= int(match[2]) <= 12 or int(match[1]) < 1:
        raise ValidationError({name: _("must be a month as YYYY-MM, e.g. 2025-01")})
    return dt.date(int(match[1]), int(match[2]), 1)


def month_bounds(month: dt.date) -> tuple[dt.datetime, dt.datetime]:
    """Local midnight (``TIME_ZONE``) of the month's first day and of the next month's."""
    tz = timezone.get_default_timezone()
    first = month.replace(day=1)
    following = (first + dt.timedelta(days=32)).replace(day=1)
    return (
        timezone.make_aware(dt.datetime.combine(first, dt.time()), tz),
        timezone.make_aware(dt.datetime.combine(following, dt.time()), tz),
    )


def month_of(moment: dt.datetime) -> dt.date:
    return timezone.localtime(moment, timezone.get_default_timezone()).date().replace(day=1)


def next_month(month: dt.date) -> dt.date:
    return (month.replace(day=1) + dt.timedelta(days=32)).replace(day=1)


def _dated(start: dt.datetime | None = None, end: dt.datetime | None = None) -> Q:
    """Entries whose month-deciding time (``period_start`` for a charge, ``created_at``
    otherwise) lies in [start, end)."""
    charge, other = Q(kind=EntryKind.CHARGE), ~Q(kind=EntryKind.CHARGE)
    if start is not None:
        charge &= Q(period_start__gte=start)
        other &= Q(created_at__gte=start)
    if end is not None:
        charge &= Q(period_start__lt=end)
        other &= Q(created_at__lt=end)
    return charge | other


# --- Lines --------------------------------------------------------------------------------


@dataclass
class Line:
    kind: str
    amount: Decimal
    hours: Decimal = Decimal(0)
    interval_id: int | None = None
    entry_id: int | None = None
    owner_id: int | None = None
    person: str = ""
    workload: str = ""
    size: str = ""
    description: str = ""
    position: int = 0

    @property
    def unit_price(self) -> Decimal | None:
        """The average price per hour over the line (amount / hours)."""
        if not self.hours:
            return None
        return (self.amount / self.hours).quantize(MICRO, rounding=ROUND_HALF_EVEN)

    @property
    def kind_label(self) -> str:
        return str(LineKind(self.kind).label)

    @property
    def amount_shown(self) -> Decimal:
        return cents(self.amount)


@dataclass
class Statement:
    """An invoice (closed, stored) or a statement computed from the ledger (open month, a
    term, one person's usage)."""

    title: str
    period_start: dt.datetime
    period_end: dt.datetime
    lines: list[Line] = field(default_factory=list)
    account: Account | None = None
    payer_name: str = ""
    invoice: Invoice | None = None
    state: str = InvoiceState.OPEN

    @property
    def total(self) -> Decimal:
        if self.invoice is not None:
            return self.invoice.total
        return sum((line.amount for line in self.lines), Decimal(0))

    @property
    def total_shown(self) -> Decimal:
        return cents(self.total)

    @property
    def number(self) -> str:
        return self.invoice.number if self.invoice is not None else ""

    @property
    def month(self) -> str:
        return f"{timezone.localtime(self.period_start):%Y-%m}"


ENTRY_FIELDS = (
    "id",
    "account_id",
    "kind",
    "amount",
    "interval_id",
    "period_start",
    "period_end",
    "description",
    "details",
    "created_at",
    "interval__owner_id",
    "interval__workload_name",
    "interval__owner_name",
    "interval__flavor_name",
)


def _entry_rows(entries: QuerySet[LedgerEntry]) -> list[tuple[Any, ...]]:
    return list(entries.order_by("account_id", "created_at", "pk").values_list(*ENTRY_FIELDS))


def build_lines(rows: Iterable[Sequence[Any]]) -> list[Line]:
    """One line per usage interval for its charges (hours and amounts summed), one per other
    entry; in the order of their first entry. ``rows`` are ``ENTRY_FIELDS`` of one account."""
    lines: list[Line] = []
    by_interval: dict[int | None, Line] = {}
    micros: dict[int, int] = {}
    # In the order of their dates (a charge's period, another entry's writing), then ids.
    for row in sorted(rows, key=lambda row: (row[5] or row[9], row[0])):
        (pk, _account, kind, amount, interval_id, start, end, description, details, _created) = row[
            :10
        ]
        owner_id, workload_name, owner_name, flavor_name = row[10:]
        details = details if isinstance(details, dict) else {}
        person = str(details.get("person") or owner_name or "")
        workload = str(details.get("workload") or workload_name or "")
        size = str(details.get("size") or flavor_name or "")
        if kind == EntryKind.CHARGE:
            line = by_interval.get(interval_id)
            if line is None:
                line = Line(
                    kind=LineKind.CHARGE,
                    amount=Decimal(0),
                    interval_id=interval_id,
                    owner_id=owner_id,
                    person=person,
                    workload=workload,
                    size=size,
                )
                by_interval[interval_id] = line
                lines.append(line)
            else:  # the latest snapshot of the names
                line.person = person or line.person
                line.workload = workload or line.workload
                line.size = size or line.size
            line.amount += amount
            if start is not None and end is not None and end > start:
                micros[id(line)] = micros.get(id(line), 0) + (end - start) // dt.timedelta(
                    microseconds=1
                )
        else:
            lines.append(
                Line(
                    kind=LineKind.CORRECTION if kind == EntryKind.CORRECTION else LineKind.CREDIT,
                    amount=amount,
                    interval_id=interval_id,
                    entry_id=pk,
                    owner_id=owner_id,
                    description=description,
                    person=person,
                    workload=workload,
                    size=size,
                )
            )
    for position, line in enumerate(lines, start=1):
        line.position = position
        line.hours = (Decimal(micros.get(id(line), 0)) / HOUR_MICROSECONDS).quantize(
            MICRO, rounding=ROUND_HALF_EVEN
        )
        if line.kind == LineKind.CHARGE:
            line.description = f"{line.workload} ({line.person}), {line.size}"
    return lines


def _stored_lines(lines: Iterable[InvoiceLine]) -> list[Line]:
    return [
        Line(
            kind=row.kind,
            amount=row.amount,
            hours=row.hours,
            interval_id=row.interval_id,
            entry_id=row.entry_id,
            person=row.person,
            workload=row.workload,
            size=row.size,
            description=row.description,
            position=row.position,
        )
        for row in lines
    ]


def payer_name(account: Account) -> str:
    return account.name[:200]


# --- Closing a month ----------------------------------------------------------------------


@dataclass
class Closed:
    month: str
    invoices: int = 0
    lines: int = 0
    entries: int = 0
    total: Decimal = Decimal(0)
    not_settled: int = 0  # intervals still behind the month's end: nothing closed


def _behind(end: dt.datetime) -> QuerySet[UsageInterval]:
    """Intervals held during the month whose watermark is short of the month's end (or of
    their own end, if earlier)."""
    return UsageInterval.objects.filter(
        is_settled=False, started_at__lt=end, settled_until__lt=end
    ).filter(Q(ended_at__isnull=True) | Q(ended_at__gt=F("settled_until")))


def _settle_through(end: dt.datetime, now: dt.datetime) -> int:
    """Settle (as the beat does, up to ``now``) whatever the month still lacks; how many
    intervals remain behind (held by a settlement that has not committed)."""
    if not _behind(end).exists():
        return 0
    services.settle(now=now)
    for workload_id in (
        _behind(end).filter(workload__isnull=False).values_list("workload_id", flat=True)
    ):
        workload = Workload.objects.filter(pk=workload_id).first()
        if workload is not None:
            services.settle_workload(workload, now=now)
    return _behind(end).count()


def close_month(month: dt.date, *, now: dt.datetime | None = None, actor: Any = None) -> Closed:
    """Close ``month`` for every account with entries not invoiced yet up to the month's end:
    once the month is over and every interval held in it is settled past its end. Idempotent
    (one invoice per account and month, whoever runs it and how often); audited
    (``invoice.close``, one row per invoice)."""
    now = now or timezone.now()
    start, end = month_bounds(month)
    done = Closed(month=f"{month:%Y-%m}")
    if now < end:
        raise ValidationError({"month": _("the month is not over yet")})
    done.not_settled = _settle_through(end, now)
    if done.not_settled:
        logger.warning("%s not closed: %s intervals not settled yet", done.month, done.not_settled)
        return done
    try:
        with transaction.atomic():
            _close(start, end, done, actor)
    except IntegrityError:  # closed meanwhile by another run (SQLite has no row locks)
        logger.info("%s closed by another run", done.month)
        return Closed(month=done.month)
    return done


def _close(start: dt.datetime, end: dt.datetime, done: Closed, actor: Any) -> None:
    pending = LedgerEntry.objects.filter(_dated(end=end), invoiced__isnull=True)
    closed = Invoice.objects.filter(period_start=start).values("account_id")
    # Lock the payers (another close waits here, then finds their invoices written).
    accounts = list(
        Account.objects.select_for_update(of=("self",))
        .filter(pk__in=pending.values("account_id"))
        .exclude(pk__in=closed)
        .order_by("pk")
        .values_list("pk", "tenant__name", "user__username")
    )
    if not accounts:
        return
    taken = set(Invoice.objects.filter(period_start=start).values_list("account_id", flat=True))
    names = {pk: (tenant or user or "")[:200] for pk, tenant, user in accounts if pk not in taken}
    rows_by_account: dict[int, list[tuple[Any, ...]]] = {}
    for row in _entry_rows(pending):
        if row[1] in names:
            rows_by_account.setdefault(row[1], []).append(row)
    closed_at = timezone.now()
    invoices = [
        Invoice(
            account_id=account_id,
            period_start=start,
            period_end=end,
            number=f"{timezone.localtime(start):%Y%m}-{account_id:06d}",
            state=InvoiceState.CLOSED,
            total=sum((row[3] for row in rows), Decimal(0)),
            payer_name=names[account_id],
            closed_at=closed_at,
        )
        for account_id, rows in rows_by_account.items()
    ]
    Invoice.objects.bulk_create(invoices, batch_size=BATCH)
    ids = dict(Invoice.objects.filter(period_start=start).values_list("account_id", "pk"))
    lines: list[InvoiceLine] = []
    assigned: list[InvoicedEntry] = []
    for account_id, rows in rows_by_account.items():
        invoice_id = ids[account_id]
        for line in build_lines(rows):
            lines.append(
                InvoiceLine(
                    invoice_id=invoice_id,
                    position=line.position,
                    kind=line.kind,
                    interval_id=line.interval_id,
                    entry_id=line.entry_id,
                    person=line.person[:150],
                    workload=line.workload[:100],
                    size=line.size[:100],
                    description=line.description[:300],
                    hours=line.hours,
                    unit_price=line.unit_price,
                    amount=line.amount,
                )
            )
        assigned.extend(InvoicedEntry(entry_id=row[0], invoice_id=invoice_id) for row in rows)
    InvoiceLine.objects.bulk_create(lines, batch_size=BATCH)
    InvoicedEntry.objects.bulk_create(assigned, batch_size=BATCH)
    # One audit row per invoice, as core.audit.record writes it, in one INSERT per batch.
    AuditEvent.objects.bulk_create(
        [
            AuditEvent(
                actor=actor if getattr(actor, "pk", None) else None,
                action="invoice.close",
                target_type=Invoice._meta.label_lower,
                target_id=str(ids[invoice.account_id]),
                target_repr=f"{invoice.number} {invoice.payer_name}"[:255],
                data=_jsonable(
                    {
                        "number": invoice.number,
                        "month": f"{timezone.localtime(start):%Y-%m}",
                        "total": str(invoice.total),
                    }
                ),
            )
            for invoice in invoices
        ],
        batch_size=BATCH,
    )
    done.invoices += len(invoices)
    done.lines += len(lines)
    done.entries += len(assigned)
    done.total += sum((invoice.total for invoice in invoices), Decimal(0))


def close_due(now: dt.datetime | None = None) -> list[Closed]:
    """Close every month that is over and still has entries not invoiced, oldest first (the
    beat task)."""
    now = now or timezone.now()
    pending = LedgerEntry.objects.filter(invoiced__isnull=True)
    firsts = [
        pending.filter(kind=EntryKind.CHARGE).aggregate(t=Min("period_start"))["t"],
        pending.exclude(kind=EntryKind.CHARGE).aggregate(t=Min("created_at"))["t"],
    ]
    known = [t for t in firsts if t is not None]
    if not known:
        return []
    month = month_of(min(known))
    done = []
    while month_bounds(month)[1] <= now:
        result = close_month(month, now=now)
        done.append(result)
        if result.not_settled:
            break  # the later months wait for this one
        month = next_month(month)
    return done


# --- Who sees what ------------------------------------------------------------------------


def accounts_seen_by(user: Any) -> QuerySet[Account]:
    """Superusers: all; managers (admins, teachers, TAs): the accounts of the tenants in
    their subtrees; everyone: their own person account."""
    access = Access.of(user)
    if access.user_id is None:
        return Account.objects.none()
    seen = access.tenant_filter(MANAGING_ROLES, prefix="tenant__") | Q(user_id=access.user_id)
    return Account.objects.filter(seen)


def invoices_seen_by(user: Any) -> QuerySet[Invoice]:
    return Invoice.objects.filter(account__in=accounts_seen_by(user)).select_related("account")


def account_seen_by(user: Any, account_id: Any) -> Account:
    """The account of that id if ``user`` sees it, else a 400 (unknown and unseen alike)."""
    try:
        pk = int(str(account_id).strip())
    except ValueError:
        pk = 0
    account = (
        accounts_seen_by(user).select_related("tenant", "user").filter(pk=pk).first()
        if 0 < pk < 2**63
        else None
    )
    if account is None:
        raise ValidationError({"account": _("no account with that id that you can see")})
    return account


def term_tenant_seen_by(user: Any, tenant_id: Any) -> Tenant:
    """A tenant with a term that ``user`` manages, else a 400."""
    try:
        pk = int(str(tenant_id).strip())
    except ValueError:
        pk = 0
    tenant = Tenant.objects.filter(pk=pk).first() if 0 < pk < 2**63 else None
    if tenant is None or not Access.of(user).can_manage(tenant):
        raise ValidationError({"tenant": _("no class or project with that id that you manage")})
    if tenant.term_start is None or tenant.term_end is None:
        raise ValidationError({"tenant": _("this class has no term dates")})
    return tenant


# --- Statements ---------------------------------------------------------------------------


def invoice_statement(invoice: Invoice) -> Statement:
    return Statement(
        title=invoice.number,
        period_start=invoice.period_start,
        period_end=invoice.period_end,
        lines=_stored_lines(invoice.lines.order_by("position", "pk")),
        account=invoice.account,
        payer_name=invoice.payer_name,
        invoice=invoice,
        state=invoice.state,
    )


def _live_entries(start: dt.datetime, end: dt.datetime, now: dt.datetime) -> Q:
    """Entries not invoiced yet that the open month would take: its own, and (the month
    holding ``now``) those left over from months closed before they were written."""
    if start <= now < end:
        return _dated(end=end) & Q(invoiced__isnull=True)
    return _dated(start, end) & Q(invoiced__isnull=True)


def statement(account: Account, month: dt.date, now: dt.datetime | None = None) -> Statement:
    """The account's invoice for ``month`` if closed, else its statement computed live."""
    now = now or timezone.now()
    start, end = month_bounds(month)
    invoice = Invoice.objects.filter(account=account, period_start=start).first()
    if invoice is not None:
        return invoice_statement(invoice)
    rows = _entry_rows(LedgerEntry.objects.filter(_live_entries(start, end, now), account=account))
    return Statement(
        title=f"{month:%Y-%m}",
        period_start=start,
        period_end=end,
        lines=build_lines(rows),
        account=account,
        payer_name=payer_name(account),
    )


def term_statement(tenant: Tenant) -> Statement:
    """A class's term, from the ledger: its account's entries dated in the term (invoiced or
    not), in the same lines."""
    assert tenant.term_start is not None and tenant.term_end is not None
    tz = timezone.get_default_timezone()
    start = timezone.make_aware(dt.datetime.combine(tenant.term_start, dt.time()), tz)
    end = timezone.make_aware(
        dt.datetime.combine(tenant.term_end + dt.timedelta(days=1), dt.time()), tz
    )
    account = Account.objects.filter(tenant=tenant).first()
    rows = (
        _entry_rows(LedgerEntry.objects.filter(_dated(start, end), account=account))
        if account is not None
        else []
    )
    return Statement(
        title=f"{tenant.name} {tenant.term_start:%Y-%m-%d} – {tenant.term_end:%Y-%m-%d}",
        period_start=start,
        period_end=end,
        lines=build_lines(rows),
        account=account,
        payer_name=tenant.name,
    )


def my_usage(user: Any, month: dt.date, now: dt.datetime | None = None) -> Statement:
    """``user``'s own lines in ``month``, whoever pays: from the closed invoices, and live for
    the accounts whose month is still open. Never anyone else's lines."""
    now = now or timezone.now()
    start, end = month_bounds(month)
    closed = Invoice.objects.filter(period_start=start)
    stored = _stored_lines(
        InvoiceLine.objects.filter(invoice__in=closed, interval__owner_id=user.pk).order_by(
            "invoice__account_id", "position"
        )
    )
    live_rows = _entry_rows(
        LedgerEntry.objects.filter(
            _live_entries(start, end, now), interval__owner_id=user.pk
        ).exclude(account__in=closed.values("account_id"))
    )
    lines = stored
    by_account: dict[int, list[tuple[Any, ...]]] = {}
    for row in live_rows:
        by_account.setdefault(row[1], []).append(row)
    for rows in by_account.values():
        lines.extend(build_lines(rows))
    for position, line in enumerate(lines, start=1):
        line.position = position
    return Statement(
        title=f"{month:%Y-%m}",
        period_start=start,
        period_end=end,
        lines=lines,
        payer_name=str(user),
    )


# --- CSV ----------------------------------------------------------------------------------

CSV_COLUMNS = (
    "invoice",
    "payer",
    "period_start",
    "period_end",
    "line",
    "kind",
    "person",
    "workload",
    "size",
    "hours",
    "unit_price_per_hour",
    "amount",
    "description",
)


def csv_rows(item: Statement) -> list[list[str]]:
    """The header, a row per line (exact values: six places) and a total row."""
    tz = timezone.get_default_timezone()
    head = [
        item.number or item.title,
        item.payer_name,
        f"{timezone.localtime(item.period_start, tz):%Y-%m-%d}",
        f"{timezone.localtime(item.period_end, tz) - dt.timedelta(days=1):%Y-%m-%d}",
    ]
    rows = [list(CSV_COLUMNS)]
    for line in item.lines:
        price = line.unit_price
        rows.append(
            [
                *head,
                str(line.position),
                line.kind,
                _safe(line.person),
                _safe(line.workload),
                _safe(line.size),
                f"{line.hours:.6f}",
                "" if price is None else f"{price:.6f}",
                f"{line.amount:.6f}",
                _safe(line.description),
            ]
        )
    rows.append([*head, "", "total", "", "", "", "", "", f"{item.total:.6f}", ""])
    return rows


def _safe(text: str) -> str:
    """A cell a spreadsheet shows as text, never runs as a formula."""
    risky = text[:1] in ("=", "+", "@", "\t", "\r") or (text[:1] == "-" and len(text) > 1)
    return "'" + text if risky else text
