"""On PostgreSQL, two settlements at once (each its own connection, row locks skipped) never
charge an interval twice; a settlement of one workload waits for the tick that holds it."""

from __future__ import annotations

import datetime as dt
import threading
from decimal import Decimal

import pytest
from django.db import connection
from django.db.models import Sum

from billing import services
from billing.models import LedgerEntry, UsageInterval
from tests.billing.conftest import T0
from tests.marks import requires_postgres

pytestmark = [requires_postgres, pytest.mark.django_db(transaction=True)]


def test_two_settlements_at_once_charge_each_interval_once(world, catalog, priced) -> None:
    account = services.account_for_tenant(world.class_a)
    UsageInterval.objects.bulk_create(
        UsageInterval(
            account=account,
            cluster=catalog.cluster,
            started_at=T0,
            ended_at=T0 + dt.timedelta(hours=1),
            settled_until=T0,
            gpus=1,
            gpu_model="A100",
            workload_name=f"w{i}",
            owner_name="bob",
        )
        for i in range(3000)
    )
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def settle() -> None:
        try:
            start.wait()
            services.settle(T0 + dt.timedelta(hours=2), batch_size=100)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=settle) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert errors == []
    assert LedgerEntry.objects.count() == 3000
    assert LedgerEntry.objects.aggregate(t=Sum("amount"))["t"] == Decimal("9000.000000")
    assert not UsageInterval.objects.filter(is_settled=False).exists()


def test_a_batch_that_fails_on_one_connection_loses_nothing_and_the_rerun_charges_once(
    world, catalog, priced, monkeypatch, settings
) -> None:
    """A tick's batches run on two connections at once; one batch fails between its entries
    and its watermarks: it rolls back alone, the tick reports the error, and the next tick
    charges exactly what is left."""
    settings.BILLING_SETTLE_WORKERS = 2
    account = services.account_for_tenant(world.class_a)
    UsageInterval.objects.bulk_create(
        UsageInterval(
            account=account,
            cluster=catalog.cluster,
            started_at=T0,
            ended_at=T0 + dt.timedelta(hours=1),
            settled_until=T0,
            gpus=1,
            gpu_model="A100",
            workload_name=f"w{i}",
            owner_name="bob",
        )
        for i in range(1000)
    )
    real = services._write_watermarks
    calls = []
    lock = threading.Lock()

    def flaky(rows):
        with lock:
            calls.append(threading.current_thread().name)
            third = len(calls) == 3
        if third:
            raise RuntimeError("worker killed between the entries and the watermarks")
        return real(rows)

    monkeypatch.setattr(services, "_write_watermarks", flaky)
    with pytest.raises(RuntimeError):
        services.settle(T0 + dt.timedelta(hours=2), batch_size=100)
    assert all(name.startswith("settle") for name in calls)  # on the tick's own connections
    charged = LedgerEntry.objects.count()
    assert charged == 100 * (len(calls) - 1)  # every batch but the failed one
    monkeypatch.setattr(services, "_write_watermarks", real)
    services.settle(T0 + dt.timedelta(hours=2), batch_size=100)
    assert LedgerEntry.objects.count() == 1000
    assert LedgerEntry.objects.aggregate(t=Sum("amount"))["t"] == Decimal("3000.000000")
