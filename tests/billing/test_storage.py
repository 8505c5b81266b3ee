"""Storage metering: a dataset's GiB are charged per calendar month, pro rata by that month's
own length, to the tenant it is shared with or to its owner, and end when it is deleted."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.models import Sum
from django.test.utils import CaptureQueriesContext

from billing import invoices, metering, pricing, services, storage
from billing.models import LedgerEntry, UsageInterval
from tests.billing.conftest import plan
from workloads import datasets
from workloads.choices import Visibility

pytestmark = pytest.mark.django_db

GIB = 1024**3


def at(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=dt.UTC)


@pytest.fixture(autouse=True)
def _utc(settings: Any) -> None:
    settings.TIME_ZONE = "UTC"


@pytest.fixture
def folder(settings: Any, tmp_path: Path) -> Path:
    """A dataset folder holding one and a half GiB (a sparse file: nothing written)."""
    settings.DATASETS_DIR = tmp_path
    (tmp_path / "mnist").mkdir()
    with open(tmp_path / "mnist" / "images.bin", "wb") as file:
        file.truncate(GIB + GIB // 2)
    return tmp_path


@pytest.fixture
def stored(world: Any, catalog: Any, folder: Path) -> Any:
    plan(catalog.cluster, at(2024, 12, 1), storage_gib_month=Decimal("3.1000"))
    return datasets.register_folder(
        actor=world.dean,
        path="mnist",
        name="MNIST",
        visibility=Visibility.TENANT,
        tenant=world.class_a,
    )


def total() -> Decimal:
    return LedgerEntry.objects.aggregate(t=Sum("amount"))["t"] or Decimal(0)


def test_storage_is_charged_by_each_months_own_length_to_the_tenant_it_is_shared_with(
    world: Any, stored: Any
) -> None:
    storage.sync_storage(at(2025, 1, 10))
    services.settle(at(2025, 2, 10))
    january, february = LedgerEntry.objects.order_by("period_start")
    share = Fraction(3, 2) * Fraction("3.1")  # 1.5 GiB at 3.10 a GiB-month
    jan_part = share * Fraction(22, 31)  # 22 of January's 31 days
    feb_part = share * Fraction(9, 28)  # 9 of February's 28
    assert january.amount == pricing.round_amount(jan_part)
    assert january.amount + february.amount == pricing.round_amount(jan_part + feb_part)
    assert january.account == services.account_for_tenant(world.class_a)
    assert january.details["storage_mib"] == 1536
    assert january.details["segments"][0]["unit_price_gib_month"] == "3.1000"
    assert "MNIST (dean), storage 1.50 GiB" in january.description


def test_a_private_dataset_is_charged_to_its_owner_and_a_deleted_one_stops(
    world: Any, catalog: Any, folder: Path
) -> None:
    plan(catalog.cluster, at(2024, 12, 1), storage_gib_month=Decimal("2"))
    mine = datasets.register_folder(actor=world.dean, path="mnist", name="Mine")
    storage.sync_storage(at(2025, 3, 1))
    services.settle(at(2025, 3, 2))
    entry = LedgerEntry.objects.get()
    assert entry.account == services.account_for_user(world.dean)
    assert entry.amount == pricing.round_amount(Fraction(3, 2) * 2 * Fraction(1, 31))
    datasets.delete(actor=world.dean, dataset=mine)
    storage.sync_storage(at(2025, 3, 3))
    services.settle(at(2025, 3, 10))
    interval = UsageInterval.objects.get()
    assert (interval.ended_at, interval.is_settled) == (at(2025, 3, 3), True)
    assert total() == pricing.round_amount(Fraction(3, 2) * 2 * Fraction(2, 31))


def test_syncing_again_changes_nothing_and_work_intervals_leave_storage_alone(
    world: Any, stored: Any
) -> None:
    first = storage.sync_storage(at(2025, 1, 10))
    again = storage.sync_storage(at(2025, 1, 11))
    assert (first["storage_opened"], again["storage_opened"], again["storage_closed"]) == (1, 0, 0)
    metering.sync_intervals(at(2025, 1, 11))  # not work: the repair must not close it
    assert UsageInterval.objects.get().ended_at is None


def test_the_months_invoice_has_a_storage_line(world: Any, stored: Any) -> None:
    storage.sync_storage(at(2025, 1, 1))
    services.settle(at(2025, 2, 1, 0, 30))
    invoices.close_month(dt.date(2025, 1, 1), now=at(2025, 2, 1, 1))
    (line,) = invoices.Invoice.objects.get().lines.all()
    assert (line.workload, line.size) == ("MNIST", "storage 1.50 GiB")
    assert line.amount == pricing.round_amount(Fraction(3, 2) * Fraction("3.1"))  # all January


@pytest.mark.parametrize(
    ("value", "expected"),
    [("", "60.0"), ("300", "300.0"), ("abc", "must be a number of seconds, not 'abc'"),
     ("5", "must be at least 10 seconds, not 5")],
)  # fmt: skip
def test_the_settlement_tick_period_comes_from_the_environment(value: str, expected: str) -> None:
    """BILLING_SETTLE_SECONDS sets the beat's period (read when the schedule is built); a
    wrong value stops the start with the variable's name."""
    script = (
        "import portal.celery as c; print(c.app.conf.beat_schedule['settle-usage']['schedule'])"
    )
    env = {**os.environ, "BILLING_SETTLE_SECONDS": value, "DEBUG": "true"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert expected in done.stdout + done.stderr


def test_a_tick_over_more_datasets_costs_no_more_queries(world: Any, stored: Any) -> None:
    """The storage sync runs every minute: its queries must not grow with the datasets."""

    def queries_of_a_second_sync() -> int:
        storage.sync_storage(at(2025, 1, 10))
        with CaptureQueriesContext(connection) as seen:
            storage.sync_storage(at(2025, 1, 11))
        return len(seen.captured_queries)

    few = queries_of_a_second_sync()
    for i in range(5):
        datasets.register_folder(actor=world.dean, path="mnist", name=f"Copy {i}")
    assert queries_of_a_second_sync() == few
