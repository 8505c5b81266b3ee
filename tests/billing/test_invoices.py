"""Invoices and statements: a closed month's invoice adds up to its ledger entries exactly,
closes once, takes what came after a close into the next month, keeps the names as they were;
who sees what on the pages, in CSV and in the API (the outsider finds nothing); prices never
change inside a closed period."""

from __future__ import annotations

import csv
import datetime as dt
import io
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from billing import invoices, services, tasks
from billing.choices import EntryKind
from billing.models import Invoice, InvoicedEntry, InvoiceLine, LedgerEntry, UsageInterval
from core.models import AuditEvent
from portal.celery import app
from portal.embedded import EmbeddedBeat
from tenants.choices import Role
from tests.marks import requires_postgres

pytestmark = pytest.mark.django_db

UTC = dt.UTC
JAN = dt.date(2025, 1, 1)
FEB = dt.date(2025, 2, 1)
FEB_1 = dt.datetime(2025, 2, 1, tzinfo=UTC)
URL = "/api/v1/billing/"


def at(y: int, m: int, d: int, h: int = 0, mi: int = 0) -> dt.datetime:
    return dt.datetime(y, m, d, h, mi, tzinfo=UTC)


@contextmanager
def clock(moment: dt.datetime, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Rows written meanwhile get ``moment`` as their ``created_at``."""
    with monkeypatch.context() as patch:
        patch.setattr(timezone, "now", lambda: moment)
        yield


def interval(world: Any, catalog: Any, start: dt.datetime, end: dt.datetime | None, **held: Any):
    owner = held.pop("owner", world.bob)
    tenant = held.pop("tenant", world.class_a)
    return UsageInterval.objects.create(
        account=services.account_for_tenant(tenant),
        cluster=catalog.cluster,
        owner=owner,
        tenant=tenant,
        started_at=start,
        ended_at=end,
        settled_until=start,
        gpu_model="A100",
        workload_name=held.pop("name", "nb"),
        owner_name=owner.username,
        flavor_name=held.pop("size", "1 x A100"),
        **held,
    )


@pytest.fixture
def january(world, catalog, priced, monkeypatch) -> dict[str, Any]:
    """Class A's January: a whole A100 for 3.5 h, a 0.489 share for 1 h 17 min, a whole GPU
    from 22:00 on the 31st into February (ticks on both sides of midnight), a correction on
    the 25th; the month closed on 1 February at 02:00."""
    whole = interval(world, catalog, at(2025, 1, 10, 10), at(2025, 1, 10, 13, 30), gpus=1)
    share = interval(
        world,
        catalog,
        at(2025, 1, 20, 9),
        at(2025, 1, 20, 10, 17),
        gpu_share_milli=489,
        size="0.489 x A100",
    )
    across = interval(world, catalog, at(2025, 1, 31, 22), None, gpus=1, name="long")
    for tick in (at(2025, 1, 10, 12), at(2025, 1, 21), at(2025, 1, 31, 23), FEB_1):
        services.settle(tick)
    with clock(at(2025, 1, 25, 9), monkeypatch):
        first = LedgerEntry.objects.filter(interval=whole).earliest("pk")
        services.correct(entry=first, amount="-1.234567", reason="outage", actor=world.root)
    services.settle(at(2025, 2, 1, 1))  # February's first hour of the long one
    closed = invoices.close_month(JAN, now=at(2025, 2, 1, 2))
    return {"whole": whole, "share": share, "across": across, "closed": closed}


def ledger_sum(account: Any, start: dt.datetime, end: dt.datetime) -> Decimal:
    rows = LedgerEntry.objects.filter(account=account)
    charges = rows.filter(kind=EntryKind.CHARGE, period_start__gte=start, period_start__lt=end)
    others = rows.exclude(kind=EntryKind.CHARGE).filter(created_at__gte=start, created_at__lt=end)
    return sum((e.amount for e in [*charges, *others]), Decimal(0))


def test_a_closed_month_totals_its_ledger_entries_exactly(world, january) -> None:
    invoice = Invoice.objects.get()
    account = services.account_for_tenant(world.class_a)
    expected = ledger_sum(account, at(2025, 1, 1), FEB_1)
    assert invoice.total == expected != 0
    lines = list(invoice.lines.order_by("position"))
    assert sum(line.amount for line in lines) == expected
    assert [(line.kind, line.workload, line.hours) for line in lines] == [
        ("charge", "nb", Decimal("3.500000")),
        ("charge", "nb", Decimal("1.283333")),
        ("correction", "nb", Decimal(0)),
        ("charge", "long", Decimal("2.000000")),  # January's two hours only
    ]
    # A100 3.00/h: 3.5 h of a whole one is 10.50; 1 h 17 min of 0.489 of one is 1.88265.
    assert lines[0].amount == Decimal("10.500000") and lines[0].unit_price == Decimal("3")
    assert lines[1].amount == Decimal("1.882650")
    assert lines[2].amount == Decimal("-1.234567")
    assert invoices.cents(invoice.total) == Decimal("17.15")  # 10.5 + 1.88265 - 1.234567 + 6
    assert invoice.number == f"202501-{account.pk:06d}" and invoice.payer_name == "ML-101"
    assert AuditEvent.objects.filter(action="invoice.close", target_id=str(invoice.pk)).exists()


def test_closing_twice_writes_one_invoice(world, january) -> None:
    again = invoices.close_month(JAN, now=at(2025, 2, 3))
    assert again.invoices == 0 and Invoice.objects.count() == 1
    assert InvoicedEntry.objects.count() == january["closed"].entries
    assert AuditEvent.objects.filter(action="invoice.close").count() == 1


def test_a_month_closes_only_when_over(world, catalog, priced) -> None:
    with pytest.raises(Exception, match="not over"):
        invoices.close_month(JAN, now=at(2025, 1, 31, 23))


def test_closing_settles_what_the_month_still_lacks(world, catalog, priced) -> None:
    open_one = interval(world, catalog, at(2025, 1, 30), None, gpus=1)
    invoices.close_month(JAN, now=at(2025, 2, 1, 6))
    open_one.refresh_from_db()
    assert open_one.settled_until == at(2025, 2, 1, 6)
    invoice = Invoice.objects.get()
    # Settled to 1 Feb 06:00, charged as two entries cut at the month's start: January's
    # invoice has 30 Jan 00:00 → 1 Feb 00:00, February keeps the rest.
    assert invoice.lines.get().hours == Decimal("48.000000")
    assert LedgerEntry.objects.filter(period_start=at(2025, 2, 1)).get().period_end == at(
        2025, 2, 1, 6
    )


def test_what_comes_after_a_close_goes_into_the_next_month(world, january, monkeypatch) -> None:
    jan = Invoice.objects.get()
    before = (jan.total, list(jan.lines.values_list("amount", flat=True)))
    entry = LedgerEntry.objects.filter(interval=january["share"]).earliest("pk")
    with clock(at(2025, 2, 10), monkeypatch):
        services.correct(entry=entry, amount="0.5", reason="re-rated", actor=world.root)
    with clock(at(2025, 1, 31, 23, 59), monkeypatch):  # written late, dated January
        services.correct(entry=entry, amount="0.25", reason="late", actor=world.root)
    services.settle(at(2025, 2, 1, 3))
    UsageInterval.objects.filter(pk=january["across"].pk).update(ended_at=at(2025, 2, 1, 3))
    services.settle(at(2025, 2, 1, 4))
    feb = invoices.close_month(FEB, now=at(2025, 3, 1, 1))
    assert feb.invoices == 1
    jan.refresh_from_db()
    assert (jan.total, list(jan.lines.values_list("amount", flat=True))) == before
    february = Invoice.objects.get(period_start=FEB_1)
    kinds = sorted(february.lines.values_list("kind", "amount"))
    assert ("correction", Decimal("0.250000")) in kinds
    assert ("correction", Decimal("0.500000")) in kinds
    assert ("charge", Decimal("9.000000")) in kinds  # the long one's February: 3 h
    every = LedgerEntry.objects.filter(account=jan.account)
    assert jan.total + february.total == sum(e.amount for e in every)


def test_csv_keeps_the_names_as_they_were(world, january, client) -> None:
    world.bob.username = "robert"
    world.bob.save()
    world.class_a.name = "ML-102"
    world.class_a.save()
    UsageInterval.objects.update(workload_name="renamed", owner_name="robert")
    invoice = Invoice.objects.get()
    client.force_login(world.alice)
    for url in (
        f"/billing/invoices/{invoice.pk}/csv/",
        f"/billing/invoices/{invoice.pk}/?format=csv",
    ):
        response = client.get(url)
        assert response.status_code == 200
        assert response["Content-Disposition"].startswith("attachment;")
        rows = list(csv.DictReader(io.StringIO(response.content.decode())))
        assert {row["payer"] for row in rows} == {"ML-101"}
        assert {row["person"] for row in rows[:-1]} == {"bob"}
        assert {row["workload"] for row in rows[:-1]} == {"nb", "long"}
        assert rows[-1]["kind"] == "total" and Decimal(rows[-1]["amount"]) == invoice.total
        assert sum(Decimal(row["amount"]) for row in rows[:-1]) == invoice.total


@pytest.mark.parametrize(
    ("who", "sees"),
    [("root", True), ("dean", True), ("alice", True), ("bob", False), ("charlie", False)],
)
def test_who_sees_a_class_invoice(world, january, client, api, who, sees) -> None:
    invoice = Invoice.objects.get()
    user = getattr(world, who)
    client.force_login(user)
    code = 200 if sees else 404
    for url in ("", "csv/", "print/"):
        assert client.get(f"/billing/invoices/{invoice.pk}/{url}").status_code == code
    listed = client.get("/billing/").content.decode()
    assert (invoice.number in listed) is sees
    assert api(user).get(f"{URL}invoices/{invoice.pk}/").status_code == code
    assert api(user).get(f"{URL}invoices/{invoice.pk}/csv/").status_code == code
    rows = api(user).get(URL + "invoices/").json()["results"]
    assert ([r["number"] for r in rows] == [invoice.number]) is sees


def test_the_printable_invoice_has_no_navigation(world, january, client) -> None:
    client.force_login(world.alice)
    page = client.get(f"/billing/invoices/{Invoice.objects.get().pk}/print/").content.decode()
    assert "@media print" in page and 'aria-label="Main"' not in page and "ML-101" in page


def test_a_student_sees_only_their_own_lines(world, catalog, priced, make_user, client, api):
    dora = make_user("dora")
    world.add(world.class_a, dora, Role.STUDENT)
    interval(world, catalog, at(2025, 1, 5), at(2025, 1, 5, 2), gpus=1, name="bobs")
    interval(world, catalog, at(2025, 1, 6), at(2025, 1, 6, 1), gpus=1, name="doras", owner=dora)
    services.settle(at(2025, 1, 7))
    invoices.close_month(JAN, now=at(2025, 2, 2))
    mine = api(world.bob).get(URL + "statements/mine/", {"month": "2025-01"}).json()
    assert [line["workload"] for line in mine["lines"]] == ["bobs"]
    assert mine["total"] == "6.00"
    client.force_login(world.bob)
    page = client.get("/billing/mine/", {"month": "2025-01"}).content.decode()
    assert "bobs" in page and "doras" not in page
    assert "doras" not in client.get("/billing/mine/csv/", {"month": "2025-01"}).content.decode()
    # The open month, live: her February lines are hers only.
    interval(world, catalog, at(2025, 2, 3), at(2025, 2, 3, 1), gpus=1, name="doras2", owner=dora)
    services.settle(at(2025, 2, 4))
    february = api(dora).get(URL + "statements/mine/", {"month": "2025-02"}).json()
    assert [line["workload"] for line in february["lines"]] == ["doras2"]
    assert api(world.bob).get(URL + "statements/mine/", {"month": "2025-02"}).json()["lines"] == []


def test_a_person_account_invoice_is_its_owners(world, catalog, priced, api) -> None:
    row = interval(world, catalog, at(2025, 1, 5), at(2025, 1, 5, 1), gpus=1)
    UsageInterval.objects.filter(pk=row.pk).update(account=services.account_for_user(world.bob))
    services.settle(at(2025, 1, 6))
    invoices.close_month(JAN, now=at(2025, 2, 2))
    invoice = Invoice.objects.get()
    assert invoice.payer_name == "bob"
    assert api(world.bob).get(f"{URL}invoices/{invoice.pk}/").json()["total"] == "3.00"
    assert api(world.alice).get(f"{URL}invoices/{invoice.pk}/").status_code == 404
    assert api(world.charlie).get(f"{URL}invoices/{invoice.pk}/").status_code == 404


def test_an_open_month_is_computed_live(world, catalog, priced, api, client) -> None:
    interval(world, catalog, at(2025, 1, 5), at(2025, 1, 5, 1), gpus=1)
    services.settle(at(2025, 1, 6))
    account = services.account_for_tenant(world.class_a)
    data = (
        api(world.alice)
        .get(URL + "statements/account/", {"account": account.pk, "month": "2025-01"})
        .json()
    )
    assert data["state"] == "open" and data["number"] == "" and data["total"] == "3.00"
    assert not Invoice.objects.exists()
    outsider = api(world.charlie).get(
        URL + "statements/account/", {"account": account.pk, "month": "2025-01"}
    )
    assert outsider.status_code == 400 and "account" in outsider.json()
    client.force_login(world.charlie)
    assert client.get(f"/billing/accounts/{account.pk}/2025-01/").status_code == 404
    client.force_login(world.alice)
    assert "3.00" in client.get(f"/billing/accounts/{account.pk}/2025-01/").content.decode()


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"month": "2025-13"}, "month"),
        ({"month": "january"}, "month"),
        ({"account": "999999"}, "account"),
        ({"account": "99999999999999999999999"}, "account"),
    ],
)
def test_bad_filters_are_a_400_naming_them(world, api, client, query, field) -> None:
    response = api(world.alice).get(URL + "invoices/", query)
    assert response.status_code == 400 and field in response.json()
    client.force_login(world.alice)
    assert client.get("/billing/", query).status_code == 400


def test_bad_statement_input_is_a_400(world, api, client) -> None:
    assert api(world.bob).get(URL + "statements/mine/", {"month": "2025-13"}).status_code == 400
    response = api(world.alice).get(URL + "statements/term/", {"tenant": world.class_b.pk})
    assert response.status_code == 400 and "tenant" in response.json()
    assert api(world.alice).get(f"{URL}invoices/99999999999999999999999/").status_code == 404
    client.force_login(world.alice)
    for page in ("invoices/99999999999999999999999/", "terms/99999999999999999999999/"):
        assert client.get("/billing/" + page).status_code == 404
    assert client.get("/billing/accounts/99999999999999999999999/2025-01/").status_code == 404


def test_a_term_statement_covers_the_term(world, january, client, api) -> None:
    world.class_a.term_start = dt.date(2025, 1, 1)
    world.class_a.term_end = dt.date(2025, 1, 31)
    world.class_a.save()
    data = api(world.alice).get(URL + "statements/term/", {"tenant": world.class_a.pk}).json()
    assert Decimal(data["total_exact"]) == Invoice.objects.get().total
    assert (
        api(world.charlie).get(URL + "statements/term/", {"tenant": world.class_a.pk}).status_code
        == 400
    )
    client.force_login(world.alice)
    assert "ML-101" in client.get(f"/billing/terms/{world.class_a.pk}/").content.decode()
    rows = list(
        csv.reader(
            io.StringIO(client.get(f"/billing/terms/{world.class_a.pk}/csv/").content.decode())
        )
    )
    assert rows[0][0] == "invoice" and rows[-1][5] == "total"
    client.force_login(world.charlie)
    assert client.get(f"/billing/terms/{world.class_a.pk}/").status_code == 404
    assert client.get(f"/billing/terms/{world.class_a.pk}/csv/").status_code == 404


def test_a_price_change_cannot_reach_into_a_closed_period(world, catalog, api) -> None:
    now = timezone.now()
    month = invoices.month_of(now)
    account = services.account_for_tenant(world.class_a)
    LedgerEntry.objects.create(
        account=account, kind=EntryKind.CORRECTION, amount="1", description="x"
    )
    invoices.close_month(month, now=invoices.month_bounds(month)[1] + dt.timedelta(hours=1))
    body = {
        "cluster": catalog.cluster.slug,
        "effective_from": (now + dt.timedelta(minutes=5)).isoformat(),
        "gpu_hour": "9",
    }
    response = api(world.root).post(URL + "price-plans/", body, format="json")
    assert response.status_code == 400
    assert "closed invoice period" in response.json()["effective_from"][0]


def test_the_beat_closes_the_months_that_are_over(world, catalog, priced) -> None:
    assert app.conf.beat_schedule["close-invoices"]["task"] == "quanta.billing.close_invoices"
    assert "quanta.billing.close_invoices" in EmbeddedBeat().schedule  # manage.py serve's beat
    interval(world, catalog, at(2025, 1, 5), at(2025, 1, 5, 1), gpus=1)
    interval(world, catalog, at(2025, 2, 5), at(2025, 2, 5, 1), gpus=1)
    services.settle(at(2025, 2, 6))
    done = invoices.close_due(now=at(2025, 3, 1, 0, 30))
    assert [(d.month, d.invoices) for d in done] == [("2025-01", 1), ("2025-02", 1)]
    assert invoices.close_due(now=at(2025, 3, 1, 1)) == []  # nothing left to close
    assert InvoiceLine.objects.count() == 2


def test_local_midnight_decides_the_month(world, catalog, priced, settings) -> None:
    settings.TIME_ZONE = "Asia/Shanghai"
    start, end = invoices.month_bounds(JAN)
    assert start == at(2024, 12, 31, 16) and end == at(2025, 1, 31, 16)


def _payers(world: Any, catalog: Any, make_user: Any, n: int, first: int = 0) -> None:
    for i in range(first, first + n):
        person = make_user(f"payer{i}")
        row = interval(world, catalog, at(2025, 1, 5), at(2025, 1, 5, 1), gpus=1, owner=person)
        UsageInterval.objects.filter(pk=row.pk).update(account=services.account_for_user(person))


def test_closing_costs_the_same_queries_for_3_or_30_payers(
    world, catalog, priced, make_user
) -> None:
    _payers(world, catalog, make_user, 3)
    services.settle(at(2025, 1, 6))
    with CaptureQueriesContext(connection) as few:
        assert invoices.close_month(JAN, now=at(2025, 2, 2)).invoices == 3
    _payers(world, catalog, make_user, 30, first=3)
    services.settle(at(2025, 1, 7))
    with CaptureQueriesContext(connection) as many:
        # The 30 new payers' January (the 3 are closed already).
        assert invoices.close_month(JAN, now=at(2025, 2, 3)).invoices == 30
    assert len(many.captured_queries) == len(few.captured_queries)


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_two_closes_at_once_write_each_invoice_once(world, catalog, priced, make_user) -> None:
    _payers(world, catalog, make_user, 20)
    services.settle(at(2025, 1, 6))
    start = threading.Barrier(2)
    errors: list[BaseException] = []
    results: list[invoices.Closed] = []

    def close() -> None:
        try:
            start.wait()
            results.append(invoices.close_month(JAN, now=at(2025, 2, 2)))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=close) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert sorted(r.invoices for r in results) == [0, 20]
    assert Invoice.objects.count() == 20 and InvoicedEntry.objects.count() == 20
    assert AuditEvent.objects.filter(action="invoice.close").count() == 20


def test_the_invoice_pages_in_chinese(world, january, client) -> None:
    world.alice.language = "zh-hans"
    world.alice.save(update_fields=["language"])
    client.force_login(world.alice)
    page = client.get(f"/billing/invoices/{Invoice.objects.get().pk}/").content.decode()
    assert "账单" in page and "平均每小时单价" in page and "17.15" in page
    mine = client.get("/billing/mine/", {"month": "2025-13"})
    assert mine.status_code == 400 and "YYYY-MM" in mine.content.decode()


def test_the_beat_task_closes_and_reports(world, catalog, priced) -> None:
    interval(world, catalog, at(2025, 1, 5), at(2025, 1, 5, 1), gpus=1)
    services.settle(at(2025, 1, 6))
    report = tasks.close_invoices.apply().get()
    assert report[0] == {
        "month": "2025-01",
        "invoices": 1,
        "lines": 1,
        "entries": 1,
        "total": "3.000000",
        "not_settled": 0,
    }
    assert tasks.close_invoices.apply().get() == []
