"""Settlement at scale: one settlement tick (``billing.services.settle``) over 100,000 open
usage intervals.

The intervals: 1,000 workloads' worth of mixes in 10 classes — whole GPUs (1, 2, 4) and
shares (250, 489, 500 thousandths) of A100 and V100, CPU and memory — each opened an hour to
two days before the tick, with two price versions and a nightly off-peak window in their
past (so spans are cut at version and window boundaries). Three ticks are measured:

- **first**: every interval is charged from its start (100,000 entries written);
- **next**: one minute later, every interval again (what the beat does each minute);
- **idle**: every interval closed and settled: nothing to do.

Reports seconds and SQL queries per tick (``django.test.utils.CaptureQueriesContext``).

    .venv/bin/python bench/billing.py [--intervals 100000] [--batch 2000] [--out FILE]

With ``--invoices N`` it measures closing a month instead (``billing.invoices.close_month``):
N person accounts, each with 5 usage intervals in January 2026 charged in 4 entries each and
one correction (21 entries a payer), closed on 1 February.

Uses a throw-away SQLite database unless DATABASE_URL is set; with DATABASE_URL the billing
tables of that database are emptied first (use a database of its own).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import nullcontext
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def setup_django() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DEBUG", "true")
    os.environ.setdefault("DATA_DIR", tempfile.mkdtemp(prefix="quanta-bench-"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.pop("REDIS_URL", None)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from django.conf import settings

    # As in production: DEBUG's cursor formats and keeps every statement, which is the
    # benchmark's cost, not settlement's (DEBUG=true above only lets settings load here).
    settings.DEBUG = False


def empty_billing_tables() -> None:
    """What an earlier run of either benchmark left, in the order the foreign keys allow
    (the ledger and the invoices refuse ``delete()``: raw deletes)."""
    from billing.models import (
        Account,
        Invoice,
        InvoicedEntry,
        InvoiceLine,
        LedgerEntry,
        UsageInterval,
    )

    InvoiceLine.objects.all().delete()
    InvoicedEntry.objects.all()._raw_delete(InvoicedEntry.objects.db)
    Invoice.objects.all()._raw_delete(Invoice.objects.db)
    LedgerEntry.objects.all()._raw_delete(LedgerEntry.objects.db)
    UsageInterval.objects.all().delete()
    Account.objects.all().delete()


def build(n: int, now: dt.datetime) -> None:
    from billing.models import Account, PricePlan, UsageInterval
    from scheduling.models import Cluster
    from tenants.choices import TenantKind
    from tenants.models import Tenant

    empty_billing_tables()
    PricePlan.objects.all().delete()
    cluster, _ = Cluster.objects.get_or_create(
        slug="bench", defaults={"name": "Bench", "backend": "simulated"}
    )
    school, _ = Tenant.objects.get_or_create(
        slug="bench-uni", defaults={"name": "Uni", "kind": TenantKind.ORGANISATION}
    )
    classes = []
    for i in range(10):
        tenant = Tenant.objects.filter(slug=f"bench-c{i}").first()
        if tenant is None:
            tenant = Tenant(slug=f"bench-c{i}", name=f"C{i}", kind=TenantKind.CLASS, parent=school)
            tenant.save()
        classes.append(Account.objects.create(tenant=tenant))
    for start, a100, window in (
        (now - dt.timedelta(days=30), "3.0000", (dt.time(0), dt.time(7))),
        (now - dt.timedelta(hours=20), "3.5000", (dt.time(22), dt.time(6))),
    ):
        PricePlan.objects.create(
            cluster=cluster,
            effective_from=start,
            gpu_hour=Decimal("2.0000"),
            gpu_hour_by_model={"A100": a100},
            cpu_core_hour=Decimal("0.1000"),
            memory_gib_hour=Decimal("0.0100"),
            priority_multipliers={"low": "0.5000"},
            offpeak_start=window[0],
            offpeak_end=window[1],
            offpeak_multiplier=Decimal("0.5000"),
        )
    rng = random.Random(7)
    rows = []
    for i in range(n):
        start = now - dt.timedelta(seconds=rng.randrange(3600, 48 * 3600))
        whole = rng.random() < 0.5
        rows.append(
            UsageInterval(
                account=classes[i % 10],
                cluster=cluster,
                started_at=start,
                settled_until=start,
                gpus=rng.choice([1, 2, 4]) if whole else 0,
                gpu_share_milli=0 if whole else rng.choice([250, 489, 500]),
                gpu_model=rng.choice(["A100", "V100"]),
                cpu_milli=rng.choice([1000, 4000]),
                memory_mib=rng.choice([4096, 16384]),
                priority_class=rng.choice(["", "low"]),
                workload_name=f"w{i}",
                owner_name=f"s{i % 1000}",
                flavor_name="1 GPU" if whole else "half GPU",
            )
        )
    UsageInterval.objects.bulk_create(rows, batch_size=2000)


@contextlib.contextmanager
def copies_counted(counts: list[int]) -> Iterator[None]:
    """Append the number of COPY statements run inside (they do not pass Django's execute
    wrappers) to ``counts``."""
    import psycopg

    seen = 0
    real = psycopg.ClientCursor.copy

    def copy(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal seen
        seen += 1
        return real(self, *args, **kwargs)

    psycopg.ClientCursor.copy = copy  # type: ignore[method-assign]
    try:
        yield
    finally:
        psycopg.ClientCursor.copy = real  # type: ignore[method-assign]
        counts.append(seen)


@contextlib.contextmanager
def phases_timed(totals: dict[str, float]) -> Iterator[None]:
    """Add up, in ``totals``, the seconds settlement spends reading rows, in the rest of a
    batch's Python (pricing, building the entries), writing entries, writing watermarks and
    committing; summed over its connections (with two, the sum exceeds the wall time)."""
    from django.db import transaction

    from billing import services

    lock = threading.Lock()
    names = {
        "_rows": "read rows",
        "_settle_rows": "batch",
        "_insert_entries": "write entries",
        "_write_watermarks": "write watermarks",
    }
    saved = {name: getattr(services, name) for name in names}
    exit_atomic = transaction.Atomic.__exit__

    def timed(key: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                with lock:
                    totals[key] = totals.get(key, 0.0) + time.perf_counter() - began

        return call

    for name, key in names.items():
        setattr(services, name, timed(key, saved[name]))
    transaction.Atomic.__exit__ = timed("commit", exit_atomic)  # type: ignore[method-assign]
    try:
        yield
    finally:
        for name, real in saved.items():
            setattr(services, name, real)
        transaction.Atomic.__exit__ = exit_atomic  # type: ignore[method-assign]
        batch = totals.pop("batch", 0.0)
        written = totals.get("write entries", 0.0) + totals.get("write watermarks", 0.0)
        if batch:
            totals["price and build"] = batch - written


def measure(label: str, now: dt.datetime, batch: int, phases: bool = False) -> dict[str, Any]:
    """One tick's seconds and statements, on every connection it uses (a settlement on
    PostgreSQL runs its batches on BILLING_SETTLE_WORKERS threads, each with its own).
    Statements are counted by an execute wrapper (``CaptureQueriesContext`` formats every
    statement with its parameters, which on SQLite cost as much as a quarter of the tick it
    measured), COPY statements by wrapping the driver's method."""
    from django.db import connection
    from django.db.backends.signals import connection_created

    from billing import services

    lock = threading.Lock()
    count = 0

    def counted(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal count
        with lock:
            count += 1
        return execute(sql, params, many, context)

    def wrap(sender: Any, connection: Any, **kwargs: Any) -> None:
        connection.execute_wrappers.append(counted)

    copies: list[int] = []
    totals: dict[str, float] = {}
    postgres = connection.vendor == "postgresql"
    connection_created.connect(wrap)
    try:
        with (
            connection.execute_wrapper(counted),
            copies_counted(copies) if postgres else nullcontext(),
            phases_timed(totals) if phases else nullcontext(),
        ):
            began = time.perf_counter()
            done = services.settle(now, batch_size=batch)
            seconds = time.perf_counter() - began
    finally:
        connection_created.disconnect(wrap)
    count += sum(copies)
    return {
        "tick": label,
        "seconds": round(seconds, 2),
        "queries": count,
        "intervals": done.intervals,
        "entries": done.entries,
        "phases": ", ".join(f"{k} {v:.2f} s" for k, v in sorted(totals.items())),
    }


def build_invoices(n: int) -> dt.date:
    from django.contrib.auth import get_user_model
    from django.db import models

    from billing.choices import EntryKind
    from billing.models import (
        Account,
        LedgerEntry,
        UsageInterval,
    )
    from scheduling.models import Cluster

    empty_billing_tables()
    user_model = get_user_model()
    user_model.objects.filter(username__startswith="bench-payer-").delete()
    cluster, _ = Cluster.objects.get_or_create(
        slug="bench", defaults={"name": "Bench", "backend": "simulated"}
    )
    users = user_model.objects.bulk_create(
        [user_model(username=f"bench-payer-{i}") for i in range(n)], batch_size=2000
    )
    accounts = Account.objects.bulk_create([Account(user=user) for user in users], batch_size=2000)
    month_start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    rng = random.Random(11)
    intervals = []
    for account in accounts:
        for k in range(5):
            start = month_start + dt.timedelta(days=rng.randrange(0, 30), hours=rng.randrange(20))
            intervals.append(
                UsageInterval(
                    account=account,
                    cluster=cluster,
                    started_at=start,
                    ended_at=start + dt.timedelta(hours=4),
                    settled_until=start + dt.timedelta(hours=4),
                    is_settled=True,
                    gpus=1 if k % 2 else 0,
                    gpu_share_milli=0 if k % 2 else 489,
                    gpu_model="A100",
                    workload_name=f"w{k}",
                    owner_name=f"payer-{account.pk}",
                    flavor_name="1 GPU" if k % 2 else "0.489 GPU",
                )
            )
    intervals = UsageInterval.objects.bulk_create(intervals, batch_size=2000)
    entries = []
    for row in intervals:
        for h in range(4):
            entries.append(
                LedgerEntry(
                    account_id=row.account_id,
                    kind=EntryKind.CHARGE,
                    amount=Decimal(rng.randrange(1, 4_000_000)) / 1_000_000,
                    interval=row,
                    period_start=row.started_at + dt.timedelta(hours=h),
                    period_end=row.started_at + dt.timedelta(hours=h + 1),
                    description=f"{row.workload_name}, 1 h",
                    details={"workload": row.workload_name, "person": row.owner_name},
                )
            )
    for account in accounts:
        entries.append(
            LedgerEntry(
                account=account,
                kind=EntryKind.CORRECTION,
                amount=Decimal("-0.500000"),
                description="Correction",
            )
        )
    LedgerEntry.objects.bulk_create(entries, batch_size=2000)
    # The corrections were written in January (the ledger's own update() refuses: bypass it).
    models.QuerySet.update(
        LedgerEntry.objects.filter(kind=EntryKind.CORRECTION),
        created_at=month_start + dt.timedelta(days=20),
    )
    return month_start.date()


def measure_invoices(n: int) -> str:
    from django.db import connection
    from django.db.models import Sum
    from django.test.utils import CaptureQueriesContext

    from billing import invoices
    from billing.models import Invoice, LedgerEntry

    month = build_invoices(n)
    runs = []
    for label in ("close", "again (nothing to do)"):
        with CaptureQueriesContext(connection) as queries:
            began = time.perf_counter()
            done = invoices.close_month(month, now=dt.datetime(2026, 2, 1, 1, tzinfo=dt.UTC))
            seconds = time.perf_counter() - began
        runs.append((label, seconds, len(queries.captured_queries), done))
    ledger = LedgerEntry.objects.aggregate(t=Sum("amount"))["t"]
    invoiced = Invoice.objects.aggregate(t=Sum("total"))["t"]
    return "\n".join(
        [
            f"database: {connection.vendor}, {n} payers, 21 entries each",
            "| run | seconds | queries | invoices | lines | entries |",
            "|---|---:|---:|---:|---:|---:|",
            *(
                f"| {label} | {seconds:.2f} | {count} | {d.invoices} | {d.lines} | {d.entries} |"
                for label, seconds, count, d in runs
            ),
            f"ledger total: {ledger}, invoiced total: {invoiced}",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--intervals", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--invoices", type=int, default=0, help="close a month of N payers")
    parser.add_argument("--out")
    parser.add_argument(
        "--phases", action="store_true", help="also time settlement's phases (slower)"
    )
    args = parser.parse_args()
    setup_django()
    if args.invoices:
        text = measure_invoices(args.invoices)
        print(text)
        if args.out:
            Path(args.out).write_text(text + "\n")
        return
    from django.db import connection

    from billing.models import LedgerEntry, UsageInterval

    now = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
    build(args.intervals, now)
    minute = dt.timedelta(minutes=1)
    results = [measure("first", now, args.batch, args.phases)]
    results.append(measure("next (1 min later)", now + minute, args.batch, args.phases))
    UsageInterval.objects.update(ended_at=now + minute)
    results.append(measure("closing", now + 2 * minute, args.batch, args.phases))
    results.append(measure("idle", now + 3 * minute, args.batch, args.phases))
    # Summed here: SQLite sums its decimal column in floating point.
    total = sum(LedgerEntry.objects.values_list("amount", flat=True), Decimal(0))
    lines = [
        f"database: {connection.vendor}, {args.intervals} intervals, batch {args.batch}",
        "| tick | seconds | queries | intervals | entries |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {r['tick']} | {r['seconds']} | {r['queries']} | {r['intervals']} | {r['entries']} |"
            for r in results
        ),
        *(f"phases of {r['tick']}: {r['phases']}" for r in results if r["phases"]),
        f"ledger total: {total}",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
