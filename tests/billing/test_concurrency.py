"""On PostgreSQL, two settlements at once (each its own connection, row locks skipped) never
charge an interval twice; a settlement of one workload waits for the tick that holds it."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import threading
from decimal import Decimal
from pathlib import Path

import pytest
from django.db import connection
from django.db.models import Sum

from billing import services
from billing.models import LedgerEntry, UsageInterval
from tests.billing.conftest import T0
from tests.marks import requires_postgres

pytestmark = [requires_postgres, pytest.mark.django_db(transaction=True)]


def hours_of_one_a100(world, catalog, n: int) -> None:
    """``n`` closed intervals of class A, each an hour of one A100 (3.00 at the lab's
    prices), none settled yet."""
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
        for i in range(n)
    )


def test_two_settlements_at_once_charge_each_interval_once(world, catalog, priced) -> None:
    hours_of_one_a100(world, catalog, 3000)
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
    hours_of_one_a100(world, catalog, 1000)
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


KILLED_MID_BATCH = """
import datetime as dt, os, signal, sys
import django
django.setup()
from billing import services
real, calls = services._write_watermarks, []
def dying(rows):
    calls.append(1)
    if len(calls) == 3:  # the third batch: its entries are written, its watermarks not yet
        os.kill(os.getpid(), signal.SIGKILL)
    return real(rows)
services._write_watermarks = dying
services.settle(dt.datetime.fromisoformat(sys.argv[1]), batch_size=100)
"""


def test_a_settlement_killed_with_sigkill_mid_batch_charges_nothing_twice_and_misses_nothing(
    world, catalog, priced, tmp_path
) -> None:
    """A real ``kill -9`` of the settling process between a batch's entries and its
    watermarks: its open transactions die with it; the next tick charges exactly the rest."""
    hours_of_one_a100(world, catalog, 1000)
    db = connection.settings_dict
    env = {
        **os.environ,
        "DEBUG": "true",
        "DATA_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
    }
    env.pop("REDIS_URL", None)
    at = (T0 + dt.timedelta(hours=2)).isoformat()
    done = subprocess.run(
        [sys.executable, "-c", KILLED_MID_BATCH, at],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    survived = LedgerEntry.objects.count()
    assert survived % 100 == 0 and survived < 1000  # whole batches only, the killed one none
    assert UsageInterval.objects.filter(is_settled=True).count() == survived
    services.settle(T0 + dt.timedelta(hours=2), batch_size=100)
    assert LedgerEntry.objects.count() == 1000
    assert LedgerEntry.objects.aggregate(t=Sum("amount"))["t"] == Decimal("3000.000000")
