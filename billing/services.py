"""Every write billing makes: price plan versions, accounts, settlement, corrections.

Settlement charges each unsettled usage interval from its watermark (``settled_until``) to
``min(end, now)``. Its charge is the interval's exact cost from its start to the new
watermark, rounded once (``pricing.round_amount``), minus what it was charged before; the
entry and the new watermark are written in one transaction, on rows locked
(``select_for_update``; the periodic tick skips rows another settlement holds), so a retried,
crashed or concurrent settlement never charges twice and never misses a span.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import queue
from collections import defaultdict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connections, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _

from billing import pricing
from billing.choices import EntryKind, InvoiceState
from billing.models import Account, Invoice, LedgerEntry, PricePlan, UsageInterval
from core.audit import record
from scheduling.models import Cluster
from tenants.models import Tenant
from tenants.permissions import Access

logger = logging.getLogger(__name__)

BATCH = 2000  # intervals settled per transaction
MAX_PRICE = Decimal("99999999.9999")
PRICE_FIELDS = ("gpu_hour", "cpu_core_hour", "memory_gib_hour", "storage_gib_month")
MAP_FIELDS = ("gpu_hour_by_model", "priority_multipliers", "queue_multipliers")


# --- Accounts -------------------------------------------------------------------------------


def account_for_tenant(tenant: Tenant) -> Account:
    return _account(tenant=tenant)


def account_for_user(user: Any) -> Account:
    return _account(user=user)


def _account(**who: Any) -> Account:
    account = Account.objects.filter(**who).first()
    if account is not None:
        return account
    try:
        with transaction.atomic():
            return Account.objects.create(**who)
    except IntegrityError:  # created meanwhile by another transaction
        return Account.objects.get(**who)


# --- Price plans ----------------------------------------------------------------------------


def _price(name: str, value: Any, *, places: int = 4) -> Decimal:
    """A price or multiplier as given (a number or a numeric string), or a 400 naming it."""
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        raise ValidationError({name: _("must be a number, e.g. 2.50")})
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation:
        raise ValidationError({name: _("must be a number, e.g. 2.50")}) from None
    if not number.is_finite():
        raise ValidationError({name: _("must be a number, e.g. 2.50")})
    if number < 0:
        raise ValidationError({name: _("cannot be negative")})
    if number > MAX_PRICE or number != number.quantize(Decimal(1).scaleb(-places)):
        raise ValidationError(
            {name: _("must be at most %(max)s with %(n)s decimals") % {"max": MAX_PRICE, "n": 4}}
        )
    return number.quantize(Decimal(1).scaleb(-places))


def _price_map(name: str, value: Any) -> dict[str, str]:
    if value in (None, ""):
        return {}
    if not isinstance(value, dict):
        raise ValidationError({name: _('must be an object, e.g. {"A100": "2.50"}')})
    out = {}
    for key, number in value.items():
        if not isinstance(key, str) or not key.strip() or len(key) > 64:
            raise ValidationError({name: _("names must be short non-empty strings")})
        out[key.strip()] = str(_price(f"{name}.{key}", number))
    return out


def _moment(name: str, value: Any) -> dt.datetime:
    if isinstance(value, str):
        parsed = parse_datetime(value.strip())
        if parsed is None:
            raise ValidationError({name: _("must be a date and time, e.g. 2025-09-01T00:00Z")})
        value = parsed
    if not isinstance(value, dt.datetime):
        raise ValidationError({name: _("must be a date and time, e.g. 2025-09-01T00:00Z")})
    if timezone.is_naive(value):
        value = timezone.make_aware(value)
    return value


@transaction.atomic
def create_plan(
    *,
    actor: Any,
    cluster: Cluster,
    effective_from: Any,
    now: dt.datetime | None = None,
    **prices: Any,
) -> PricePlan:
    """A new version of ``cluster``'s prices, in force from ``effective_from`` (not before
    now: a price change never rewrites what was used) until the next version. Superusers
    only; audited (``price_plan.create``)."""
    if not getattr(actor, "is_superuser", False):
        raise PermissionDenied(_("Only an operator sets prices."))
    now = now or timezone.now()
    unknown = set(prices) - {*PRICE_FIELDS, *MAP_FIELDS, "offpeak", "offpeak_multiplier", "note"}
    if unknown:
        raise ValidationError({name: _("is not a price plan field") for name in sorted(unknown)})
    start = _moment("effective_from", effective_from)
    if start < now:
        raise ValidationError(
            {"effective_from": _("a price change cannot take effect in the past")}
        )
    closed = Invoice.objects.filter(state=InvoiceState.CLOSED, period_end__gt=start)
    if closed.exists():  # invoices are closed up to there: their prices stay as they were
        raise ValidationError({"effective_from": _("that time lies in a closed invoice period")})
    settled = (
        UsageInterval.objects.filter(cluster=cluster, settled_until__gt=start)
        .order_by("-settled_until")
        .values_list("settled_until", flat=True)
        .first()
    )
    if settled is not None:  # charged already up to there (a clock behind the settlement's)
        raise ValidationError(
            {"effective_from": _("usage is already charged up to %(t)s") % {"t": settled}}
        )
    if PricePlan.objects.filter(cluster=cluster, effective_from=start).exists():
        raise ValidationError(
            {"effective_from": _("another version of these prices starts at that time")}
        )
    fields: dict[str, Any] = {name: _price(name, prices.get(name, 0)) for name in PRICE_FIELDS}
    for name in MAP_FIELDS:
        fields[name] = _price_map(name, prices.get(name))
    fields["offpeak_start"], fields["offpeak_end"] = _window(prices.get("offpeak"))
    fields["offpeak_multiplier"] = _price("offpeak_multiplier", prices.get("offpeak_multiplier", 1))
    note = prices.get("note") or ""
    if not isinstance(note, str) or len(note) > 200:
        raise ValidationError({"note": _("must be a text of at most 200 characters")})
    plan = PricePlan.objects.create(
        cluster=cluster, effective_from=start, note=note, created_by=actor, **fields
    )
    record(
        "price_plan.create",
        actor=actor,
        target=plan,
        cluster=cluster.slug,
        effective_from=start.isoformat(),
        **{k: v for k, v in fields.items() if v not in ({}, None)},
    )
    return plan


def _window(value: Any) -> tuple[dt.time | None, dt.time | None]:
    """``{"start": "00:00", "end": "07:00"}`` or nothing."""
    if value in (None, "", {}):
        return None, None
    if not isinstance(value, dict) or set(value) != {"start", "end"}:
        raise ValidationError({"offpeak": _('must be {"start": "HH:MM", "end": "HH:MM"}')})
    times = []
    for key in ("start", "end"):
        try:
            times.append(dt.time.fromisoformat(str(value[key])))
        except ValueError:
            raise ValidationError(
                {"offpeak": _('must be {"start": "HH:MM", "end": "HH:MM"}')}
            ) from None
    if times[0] == times[1]:
        raise ValidationError({"offpeak": _("the window must not be empty")})
    return times[0], times[1]


# --- Corrections ----------------------------------------------------------------------------


@transaction.atomic
def correct(*, entry: LedgerEntry, amount: Any, reason: str, actor: Any) -> LedgerEntry:
    """A new entry that corrects ``entry`` by ``amount`` (signed: negative gives back); the
    entry itself stays as it was. Superusers and the admins of the account's tenant;
    audited (``ledger.correct``)."""
    account = entry.account
    access = Access.of(actor)
    if not (access.is_superuser or (account.tenant and access.can_administer(account.tenant))):
        raise PermissionDenied(_("Only an admin of the account corrects its entries."))
    if isinstance(amount, bool) or not isinstance(amount, int | float | str | Decimal):
        raise ValidationError({"amount": _("must be a number, e.g. -2.50")})
    try:
        value = Decimal(str(amount).strip())
    except InvalidOperation:
        raise ValidationError({"amount": _("must be a number, e.g. -2.50")}) from None
    if not value.is_finite() or value == 0 or abs(value) > MAX_PRICE:
        raise ValidationError({"amount": _("must be a number other than 0, e.g. -2.50")})
    if value != value.quantize(pricing.MICRO):
        raise ValidationError({"amount": _("must have at most 6 decimals")})
    reason = (reason or "").strip() if isinstance(reason, str) else ""
    if not reason:
        raise ValidationError({"reason": _("say why the entry is corrected")})
    correction = LedgerEntry.objects.create(
        account=account,
        kind=EntryKind.CORRECTION,
        amount=value,
        interval=entry.interval,
        description=f"Correction of entry {entry.pk}: {reason}"[:300],
        details={"reason": reason},
        corrects=entry,
        actor=actor,
    )
    record(
        "ledger.correct",
        actor=actor,
        target=correction,
        tenant=account.tenant,
        entry=entry.pk,
        amount=str(value),
        reason=reason,
    )
    return correction


# --- Settlement -----------------------------------------------------------------------------


@dataclass
class Settled:
    intervals: int = 0
    entries: int = 0
    amount: Decimal = Decimal(0)


class _Plans:
    """The plan versions of the clusters settled, read once per settlement."""

    def __init__(self) -> None:
        self._by_cluster: dict[int, list[pricing.Version]] = {}
        self._complete = False

    def load(self, cluster_ids: Iterable[int]) -> None:
        missing = set(cluster_ids) - set(self._by_cluster)
        if not missing or self._complete:
            return
        rows: dict[int, list[PricePlan]] = defaultdict(list)
        for plan in PricePlan.objects.filter(cluster_id__in=missing):
            rows[plan.cluster_id].append(plan)
        for cluster_id in missing:
            self._by_cluster[cluster_id] = pricing.versions(rows[cluster_id])

    def __getitem__(self, cluster_id: int) -> list[pricing.Version]:
        return self._by_cluster[cluster_id]

    @classmethod
    def everything(cls) -> _Plans:
        """Every cluster's versions (a few rows), read before the batches: shared read-only
        by the threads of a settlement; a cluster without a plan has no versions."""
        plans = cls()
        rows: dict[int, list[PricePlan]] = defaultdict(list)
        for plan in PricePlan.objects.all():
            rows[plan.cluster_id].append(plan)
        plans._by_cluster = defaultdict(list, {c: pricing.versions(r) for c, r in rows.items()})
        plans._complete = True
        return plans


# What settlement reads of an interval: plain values, not model instances (100,000 a tick).
ROW_FIELDS = (
    "id",
    "account_id",
    "cluster_id",
    "started_at",
    "ended_at",
    "settled_until",
    "charged",
    "cpu_milli",
    "memory_mib",
    "gpus",
    "gpu_share_milli",
    "gpu_model",
    "storage_mib",
    "priority_class",
    "queue",
    "workload_name",
    "owner_name",
    "flavor_name",
)


class _Row:
    """One interval as settlement sees it (``pricing.Held`` and its watermark)."""

    __slots__ = (*ROW_FIELDS, "is_settled")

    id: int
    account_id: int
    cluster_id: int
    started_at: dt.datetime
    ended_at: dt.datetime | None
    settled_until: dt.datetime
    charged: Decimal
    cpu_milli: int
    memory_mib: int
    gpus: int
    gpu_share_milli: int
    gpu_model: str
    storage_mib: int
    priority_class: str
    queue: str
    workload_name: str
    owner_name: str
    flavor_name: str
    is_settled: bool

    def __init__(self, values: Sequence[Any]) -> None:
        (
            self.id,
            self.account_id,
            self.cluster_id,
            self.started_at,
            self.ended_at,
            self.settled_until,
            self.charged,
            self.cpu_milli,
            self.memory_mib,
            self.gpus,
            self.gpu_share_milli,
            self.gpu_model,
            self.storage_mib,
            self.priority_class,
            self.queue,
            self.workload_name,
            self.owner_name,
            self.flavor_name,
        ) = values  # in ROW_FIELDS' order (one unpacking: 100,000 rows a tick)
        self.is_settled = False

    @property
    def pk(self) -> int:
        return self.id


def _rows(queryset: Any) -> list[_Row]:
    return [_Row(values) for values in queryset.values_list(*ROW_FIELDS)]


def settle(
    now: dt.datetime | None = None, *, batch_size: int = BATCH, workers: int | None = None
) -> Settled:
    """Charge every unsettled interval up to ``now`` (the periodic tick). Batches of
    ``batch_size`` intervals, each in its own transaction; rows another settlement holds
    are skipped (it charges them).

    On PostgreSQL the batches run on ``workers`` connections at once (default
    ``settings.BILLING_SETTLE_WORKERS``): while one batch's rows are written and committed
    by the server, the next is priced in Python. Called inside a transaction (a caller's
    ``atomic``, a test), it runs on that one connection, which alone sees the caller's rows."""
    now = now or timezone.now()
    if workers is None:
        workers = settings.BILLING_SETTLE_WORKERS
    conn = connections[DEFAULT_DB_ALIAS]
    if workers <= 1 or conn.vendor != "postgresql" or conn.in_atomic_block:
        return _settle_after(0, None, now, batch_size, _Plans.everything())
    plans = _Plans.everything()
    bounds = _ranges(batch_size)
    if len(bounds) == 1:  # one batch or none: no other connection to gain from
        return _settle_after(0, None, now, batch_size, plans)
    ranges: queue.SimpleQueue[tuple[int, int | None]] = queue.SimpleQueue()
    for part_bounds in bounds:
        ranges.put(part_bounds)
    with ThreadPoolExecutor(workers, thread_name_prefix="settle") as pool:
        parts = [
            pool.submit(_settle_ranges, ranges, now, batch_size, plans) for _ in range(workers)
        ]
    done = Settled()
    for part in parts:
        got = part.result()  # a batch's error is the tick's (its own batch rolled back)
        done.intervals += got.intervals
        done.entries += got.entries
        done.amount += got.amount
    return done


def _ranges(batch_size: int) -> list[tuple[int, int | None]]:
    """The unsettled intervals as id ranges (after, up to] of ``batch_size`` rows each, the
    last one open: intervals opened meanwhile are charged by the last range."""
    ids = list(
        UsageInterval.objects.filter(is_settled=False).order_by("pk").values_list("pk", flat=True)
    )
    cuts = ids[batch_size - 1 : -1 : batch_size]
    lows = [0, *cuts]
    return list(zip(lows, [*cuts, None], strict=True))


def _settle_ranges(
    ranges: queue.SimpleQueue[tuple[int, int | None]],
    now: dt.datetime,
    batch_size: int,
    plans: _Plans,
) -> Settled:
    """Ranges from ``ranges`` until none is left, on this thread's own connection (closed
    at the end)."""
    done = Settled()
    try:
        while True:
            try:
                after, upto = ranges.get_nowait()
            except queue.Empty:
                return done
            part = _settle_after(after, upto, now, batch_size, plans)
            done.intervals += part.intervals
            done.entries += part.entries
            done.amount += part.amount
    finally:
        connections.close_all()  # this thread's connections only


def _settle_after(
    after: int, upto: int | None, now: dt.datetime, batch_size: int, plans: _Plans
) -> Settled:
    """The unsettled intervals with ids in (after, upto], batch by batch."""
    done = Settled()
    while True:
        with transaction.atomic():
            rows = UsageInterval.objects.select_for_update(skip_locked=True).filter(
                is_settled=False, pk__gt=after
            )
            if upto is not None:
                rows = rows.filter(pk__lte=upto)
            batch = _rows(rows.order_by("pk")[:batch_size])
            if not batch:
                return done
            after = batch[-1].id
            _settle_rows(batch, now, plans, done)


def settle_workload(workload: Any, now: dt.datetime | None = None) -> Settled:
    """Charge one workload's intervals up to now (at its end). Waits for a settlement that
    holds them, then charges what it left."""
    now = now or timezone.now()
    done = Settled()
    with transaction.atomic():
        rows = _rows(
            UsageInterval.objects.select_for_update()
            .filter(workload=workload, is_settled=False)
            .order_by("pk")
        )
        if rows:
            _settle_rows(rows, now, _Plans(), done)
    return done


def _settle_rows(rows: Sequence[_Row], now: dt.datetime, plans: _Plans, done: Settled) -> None:
    """Price and charge ``rows`` up to ``now``: each interval's exact cost from its start to
    its new watermark (``pricing.Timeline``: a few integer lookups, whatever the span), rounded
    once, minus what it was charged. A span that crosses the start of a month (local time) is
    charged as one entry per month, each up to its own cut, so every entry belongs to one
    month's statement."""
    plans.load({row.cluster_id for row in rows})
    tz = timezone.get_default_timezone()
    written = timezone.now()
    timelines = _timelines(rows, now, plans, tz)
    writer = _EntryWriter(written)
    for row in rows:
        until = now if row.ended_at is None else min(row.ended_at, now)
        until = max(until, row.started_at)
        line = timelines[row.cluster_id]
        if until < row.settled_until:  # ended before the span already charged: give back
            total = _cost_to(row, line, until, plans, tz)
            if total != row.charged:
                writer.add(row, total - row.charged, line, until, until, adjustment=True)
                done.amount += total - row.charged
        else:
            at, charged = row.settled_until, row.charged
            for cut in [*pricing.month_starts(at, until, tz), until]:
                total = _cost_to(row, line, cut, plans, tz)
                if total != charged:
                    writer.add(row, total - charged, line, at, cut)
                    done.amount += total - charged
                at, charged = cut, total
        row.settled_until = until
        row.charged = total
        row.is_settled = row.ended_at is not None and until >= row.ended_at
    _insert_entries(writer.entries)
    _write_watermarks(rows)
    done.intervals += len(rows)
    done.entries += len(writer.entries)


def _cost_to(
    row: _Row, line: pricing.Timeline, cut: dt.datetime, plans: _Plans, tz: Any
) -> Decimal:
    """The interval's exact cost from its start to ``cut``, rounded once: what it holds per
    hour (the timeline's integers) and, for stored data, per GiB-month (exact fractions)."""
    numerator = line.numerator(row, pricing.micros(row.started_at), pricing.micros(cut))
    if not row.storage_mib:
        return pricing.round_ratio(numerator, pricing.DENOMINATOR)
    stored = pricing.storage_cost(plans[row.cluster_id], row.storage_mib, row.started_at, cut, tz)
    return pricing.round_amount(Fraction(numerator, pricing.DENOMINATOR) + stored)


def _timelines(
    rows: Sequence[_Row], now: dt.datetime, plans: _Plans, tz: Any
) -> dict[int, pricing.Timeline]:
    """One price timeline per cluster, over the batch's earliest start to ``now``."""
    first: dict[int, dt.datetime] = {}
    for row in rows:
        if row.cluster_id not in first or row.started_at < first[row.cluster_id]:
            first[row.cluster_id] = row.started_at
    return {
        cluster_id: pricing.Timeline(plans[cluster_id], start, max(now, start), tz)
        for cluster_id, start in first.items()
    }


class _EntryWriter:
    """The entries of one batch as plain column values, with what many entries share (a
    tick's ``until``, a piece's times, a unit price) formatted once."""

    def __init__(self, written: dt.datetime) -> None:
        self.written = written
        self.entries: list[dict[str, Any]] = []
        self._iso: dict[dt.datetime, str] = {}
        self._hours: dict[int, tuple[str, str]] = {}
        self._prices: dict[tuple[Any, ...], str] = {}

    def iso(self, moment: dt.datetime) -> str:
        text = self._iso.get(moment)
        if text is None:
            text = self._iso[moment] = moment.isoformat()
        return text

    def hours(self, span: int) -> tuple[str, str]:
        """``span`` microseconds in hours to six places, as stored and as shown."""
        texts = self._hours.get(span)
        if texts is None:
            hours = pricing.round_ratio(span, pricing.HOUR_MICROS)
            texts = self._hours[span] = (str(hours), f"{hours.normalize():f}")
        return texts

    def unit_price(self, row: _Row, piece: pricing.Segment) -> str:
        key = (
            id(piece.version),
            piece.offpeak,
            row.gpus,
            row.gpu_share_milli,
            row.gpu_model,
            row.cpu_milli,
            row.memory_mib,
            row.priority_class,
            row.queue,
        )
        text = self._prices.get(key)
        if text is None:
            text = self._prices[key] = str(piece.unit_price(row))
        return text

    def add(
        self,
        row: _Row,
        amount: Decimal,
        line: pricing.Timeline,
        start: dt.datetime,
        end: dt.datetime,
        *,
        adjustment: bool = False,
    ) -> None:
        """The entry for [start, end) with its priced segments (hours and unit prices); an
        adjustment (the interval ended before the span already charged) has none."""
        charged = [] if adjustment else line.clip(start, end)
        span = 0
        for part in charged:
            span += part[2]
        hours, shown = self.hours(span)
        size = row.flavor_name or "-"
        if adjustment:
            description = (
                f"{row.workload_name} ({row.owner_name}): ended at {end:%Y-%m-%d %H:%M:%S}"
            )
        else:
            description = f"{row.workload_name} ({row.owner_name}), {size}, {shown} h"
        self.entries.append(
            {
                "account_id": row.account_id,
                "kind": EntryKind.CHARGE,
                "amount": amount,
                "interval_id": row.id,
                "period_start": start,
                "period_end": end,
                "description": description[:300],
                "details": {
                    "workload": row.workload_name,
                    "person": row.owner_name,
                    "size": size,
                    "gpus": row.gpus,
                    "gpu_share_milli": row.gpu_share_milli,
                    "gpu_model": row.gpu_model,
                    "cpu_milli": row.cpu_milli,
                    "memory_mib": row.memory_mib,
                    "hours": hours,
                    "segments": [
                        {
                            "from": self.iso(lo),
                            "to": self.iso(hi),
                            "hours": self.hours(part_span)[0],
                            "unit_price": self.unit_price(row, piece),
                            "offpeak": piece.offpeak,
                            "plan": piece.version.plan_id,
                        }
                        for lo, hi, part_span, piece in charged
                    ],
                },
                "created_at": self.written,
            }
        )
        if row.storage_mib:  # stored data: priced per GiB-month, the segments say at what
            details = self.entries[-1]["details"]
            details["storage_mib"] = row.storage_mib
            for segment, (_lo, _hi, _span, piece) in zip(details["segments"], charged, strict=True):
                gib_month = Decimal(piece.version.storage_gib_month).scaleb(-4)
                segment["unit_price_gib_month"] = str(gib_month)


ENTRY_COLUMNS = (
    "account_id",
    "kind",
    "amount",
    "interval_id",
    "period_start",
    "period_end",
    "description",
    "details",
    "created_at",
)


def _adapter(field: Any, conn: Any) -> Any:
    """How one column's values go to the driver, resolved once per column (not a
    ``Field.get_db_prep_save`` call per value): datetimes as the backend wants them (naive
    UTC text on SQLite, cached: a tick's rows share most of their times), JSON encoded,
    the rest (integers, text, ``Decimal``) as they are."""
    internal = field.get_internal_type()
    if internal == "DateTimeField":
        cache: dict[Any, Any] = {}

        def moment(value: Any) -> Any:
            out = cache.get(value)
            if out is None and value is not None:
                out = cache[value] = conn.ops.adapt_datetimefield_value(value)
            return out

        return moment
    if internal == "JSONField":
        return lambda value: conn.ops.adapt_json_value(value, field.encoder)
    if internal == "BooleanField":
        return bool
    return None


def _insert_entries(entries: Sequence[dict[str, Any]]) -> None:
    """The entries in as few statements as the database allows. PostgreSQL: one ``COPY``
    per batch (a multi-row VALUES of 9,000 placeholders spent most of its time in the
    driver's query parsing, and arrays of text in its escaping). SQLite: multi-row INSERTs,
    as many rows as its 999 parameters allow. Not Django's ``bulk_create``, which compiles
    every value of every row."""
    if not entries:
        return
    conn = connections[DEFAULT_DB_ALIAS]
    meta = LedgerEntry._meta
    fields: list[Any] = [meta.get_field(c.removesuffix("_id")) for c in ENTRY_COLUMNS]
    columns = ", ".join(f'"{f.column}"' for f in fields)
    with conn.cursor() as cursor:
        if conn.vendor == "postgresql":
            # COPY: the rows stream in the driver's C encoder, not as a parsed statement.
            with cursor.copy(f'COPY "{meta.db_table}" ({columns}) FROM STDIN') as copy:
                for entry in entries:
                    copy.write_row(
                        [
                            json.dumps(entry[c]) if c == "details" else entry[c]
                            for c in ENTRY_COLUMNS
                        ]
                    )
            return
        adapters = [_adapter(f, conn) for f in fields]
        row_sql = "(" + ", ".join(["%s"] * len(fields)) + ")"
        limit = conn.features.max_query_params or 65535
        chunk = max(1, min(1000, limit // len(fields)))
        for start in range(0, len(entries), chunk):
            part = entries[start : start + chunk]
            params = [
                entry[column] if adapt is None else adapt(entry[column])
                for entry in part
                for adapt, column in zip(adapters, ENTRY_COLUMNS, strict=True)
            ]
            cursor.execute(
                f'INSERT INTO "{meta.db_table}" ({columns}) '
                f"VALUES {', '.join([row_sql] * len(part))}",
                params,
            )


def _write_watermarks(rows: Sequence[_Row]) -> None:
    """The new watermarks, in the transaction of the entries they account for.
    PostgreSQL: one ``UPDATE … FROM unnest(…)`` with four arrays; SQLite (3.33 and later):
    ``UPDATE … FROM (VALUES …)`` per chunk. Not Django's ``bulk_update``, whose CASE per row
    grows with the square of the chunk."""
    conn = connections[DEFAULT_DB_ALIAS]
    table = UsageInterval._meta.db_table
    with conn.cursor() as cursor:
        if conn.vendor == "postgresql":
            cursor.execute(
                f'UPDATE "{table}" SET settled_until = v.s, charged = v.c, is_settled = v.d '
                "FROM unnest(%s::bigint[], %s::timestamptz[], %s::numeric[], %s::boolean[]) "
                f'AS v(id, s, c, d) WHERE "{table}".id = v.id',
                [
                    [row.id for row in rows],
                    [row.settled_until for row in rows],
                    [row.charged for row in rows],
                    [row.is_settled for row in rows],
                ],
            )
            return
        moment = _adapter(UsageInterval._meta.get_field("settled_until"), conn)
        limit = conn.features.max_query_params or 999
        chunk = max(1, min(1000, limit // 4))
        for start in range(0, len(rows), chunk):
            part = rows[start : start + chunk]
            params: list[Any] = []
            for row in part:
                params += (row.id, moment(row.settled_until), row.charged, row.is_settled)
            values = ", ".join(["(%s, %s, %s, %s)"] * len(part))
            cursor.execute(
                f"WITH v(id, s, c, d) AS (VALUES {values}) "
                f'UPDATE "{table}" SET settled_until = v.s, charged = v.c, is_settled = v.d '
                f'FROM v WHERE "{table}".id = v.id',
                params,
            )
