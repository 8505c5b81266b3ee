"""Budgets, allowances and credits: what is left is derived from the ledger (free credit
first, expired lots count for nothing), thresholds notify once, and each policy does what it
says end to end (block: launch refused with the reason, queued work rejected; downgrade: GPU
sizes refused, CPU sizes launch; stop: a warning at 100 %, then after the grace the running
work stops with the reason). Only a tenant's admins set its budget or grant it credit."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from typing import Any

import pytest
from django.core import mail
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from billing import budgets
from billing import reasons as BR
from billing.choices import EntryKind
from billing.models import Budget, BudgetAlert, CreditLot, LedgerEntry
from billing.services import account_for_tenant, account_for_user
from core.models import AuditEvent, Notice
from tenants.choices import Role
from workloads import services as workload_services
from workloads.admission_checks import Ask, refusal_for
from workloads.choices import HOLDING, State
from workloads.models import Workload

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2025, 1, 15, 12, 0, tzinfo=dt.UTC)  # mid-month
H = dt.timedelta(hours=1)


@pytest.fixture(autouse=True)
def _utc(settings: Any) -> None:
    settings.TIME_ZONE = "UTC"


def charge(tenant: Any, amount: str, at: dt.datetime, *, account: Any = None) -> LedgerEntry:
    """A settled charge of ``amount`` for the hour from ``at`` (as settlement writes one)."""
    return LedgerEntry.objects.create(
        account=account or account_for_tenant(tenant),
        kind=EntryKind.CHARGE,
        amount=Decimal(amount),
        period_start=at,
        period_end=at + H,
        description="test charge",
    )


def budget(world: Any, tenant: Any = None, now: dt.datetime = T0, **given: Any) -> Budget:
    given.setdefault("allowance", "10")
    return budgets.create_budget(actor=world.dean, tenant=tenant or world.class_a, now=now, **given)


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def recently() -> dt.datetime:
    """A moment just before now, in this month (for the tests that launch in real time)."""
    now = timezone.now()
    return max(now - dt.timedelta(minutes=5), budgets.month_of(now).start)


# --- What is left ------------------------------------------------------------------------------


def test_status_says_what_was_spent_and_what_is_left(world) -> None:
    b = budget(world)
    charge(world.class_a, "8", T0 - 2 * H)
    found = budgets.status(b, T0)
    assert (found.allowance, found.spent, found.remaining) == (Decimal(10), Decimal(8), Decimal(2))
    assert (found.percent, found.state) == (80, budgets.WARNED)
    charge(world.class_a, "3", T0 - H)
    found = budgets.status(b, T0)
    assert (found.remaining, found.percent, found.state) == (Decimal(-1), 110, budgets.EXHAUSTED)


def test_spend_of_last_month_does_not_count_this_month(world) -> None:
    b = budget(world)
    charge(world.class_a, "9", T0.replace(day=1, hour=0) - H)  # December
    found = budgets.status(b, T0)
    assert (found.spent, found.remaining, found.state) == (Decimal(0), Decimal(10), budgets.OK)


def test_free_credit_is_consumed_before_the_allowance(world) -> None:
    b = budget(world, now=T0 - 3 * H)
    credit = budgets.grant_credit(
        actor=world.dean, tenant=world.class_a, amount="5", now=T0 - 3 * H
    )
    charge(world.class_a, "3", T0 - 2 * H)
    lots = budgets.lots_of([world.class_a], T0)
    allowance = CreditLot.objects.get(budget=b)
    assert lots[credit.pk].remaining == Decimal(2)
    assert lots[allowance.pk].remaining == Decimal(10)
    charge(world.class_a, "4", T0 - H)
    lots = budgets.lots_of([world.class_a], T0)
    assert (lots[credit.pk].remaining, lots[allowance.pk].remaining) == (0, Decimal(8))
    assert budgets.status(b, T0).remaining == Decimal(8)


def test_an_expired_lot_counts_for_nothing(world) -> None:
    b = budget(world, now=T0 - 5 * H)
    credit = budgets.grant_credit(
        actor=world.dean, tenant=world.class_a, amount="5", expires_at=T0 - H, now=T0 - 5 * H
    )
    charge(world.class_a, "1", T0 - 4 * H)  # from the credit (4 of it were never used)
    charge(world.class_a, "2", T0 - 30 * dt.timedelta(minutes=1))  # after it expired
    found = budgets.status(b, T0)
    assert found.credits == 0 and found.spent == Decimal(3)
    assert found.remaining == Decimal(8)  # the allowance less the 2 spent after the expiry
    lots = budgets.lots_of([world.class_a], T0)
    assert lots[credit.pk].consumed == Decimal(1) and lots[credit.pk].remaining == 0


def test_a_credit_granted_to_a_used_up_class_pays_what_was_not_covered_first(world) -> None:
    b = budget(world, now=T0 - 3 * H)
    charge(world.class_a, "12", T0 - 2 * H)
    assert budgets.status(b, T0).state == budgets.EXHAUSTED
    budgets.grant_credit(actor=world.dean, tenant=world.class_a, amount="5", now=T0 - H)
    found = budgets.status(b, T0)
    assert found.remaining == Decimal(3) and found.state != budgets.EXHAUSTED


def test_a_correction_gives_back_to_the_budget(world) -> None:
    b = budgets.create_budget(actor=world.dean, tenant=world.class_a, allowance="10")
    entry = charge(world.class_a, "10", recently())
    assert budgets.status(b).state == budgets.EXHAUSTED
    LedgerEntry.objects.create(
        account=entry.account,
        kind=EntryKind.CORRECTION,
        amount=Decimal("-4"),
        corrects=entry,
        description="refund",
    )  # counts at its created_at: now
    found = budgets.status(b)
    assert (found.spent, found.remaining, found.state) == (Decimal(6), Decimal(4), budgets.OK)


def test_a_department_budget_covers_its_whole_subtree(world) -> None:
    b = budget(world, world.dept, allowance="20")
    charge(world.class_a, "5", T0 - H)
    charge(world.class_b, "6", T0 - H)
    charge(world.other_dept, "50", T0 - H)  # another department: not covered
    charge(None, "50", T0 - H, account=account_for_user(world.bob))  # a person pays: not either
    assert budgets.status(b, T0).spent == Decimal(11)


def test_a_term_budget_runs_over_the_tenant_term(world) -> None:
    world.class_a.term_start, world.class_a.term_end = dt.date(2024, 9, 1), dt.date(2025, 1, 31)
    world.class_a.save()
    b = budget(world, period="term", allowance="100")
    charge(world.class_a, "30", dt.datetime(2024, 10, 1, tzinfo=dt.UTC))
    charge(world.class_a, "20", T0 - H)
    found = budgets.status(b, T0)
    assert found.spent == Decimal(50) and found.period.until == "2025-02-01"


# --- Who may, and bad input --------------------------------------------------------------------


def test_admins_create_and_change_budgets_and_every_change_is_audited(world, api) -> None:
    dean = api(world.dean)
    made = dean.post(
        "/api/v1/billing/budgets/",
        {"tenant": "ml-101", "allowance": "200", "policy": "downgrade", "thresholds": [50, 100]},
        format="json",
    )
    assert made.status_code == 201, made.content
    assert made.json()["status"]["remaining"] == "200.000000"
    assert made.json()["thresholds"] == [50, 100]
    pk = made.json()["id"]
    changed = dean.patch(f"/api/v1/billing/budgets/{pk}/", {"allowance": "300"}, format="json")
    assert changed.status_code == 200 and changed.json()["status"]["allowance"] == "300.000000"
    granted = dean.post(
        "/api/v1/billing/credits/", {"tenant": "ml-101", "amount": "25", "note": "extra"}
    )
    assert granted.status_code == 201, granted.content
    assert granted.json()["remaining"] == "25.000000"
    actions = list(AuditEvent.objects.values_list("action", flat=True))
    assert {"budget.create", "budget.update", "credit.grant"} <= set(actions)
    update = AuditEvent.objects.get(action="budget.update")
    assert update.data["allowance"]["to"] == "300.000000"
    assert update.tenant == world.class_a
    assert dean.delete(f"/api/v1/billing/budgets/{pk}/").status_code == 204
    assert not Budget.objects.get(pk=pk).is_active
    assert AuditEvent.objects.filter(action="budget.deactivate").exists()


def test_who_does_not_administer_the_tenant_is_told_so(world, api, make_user) -> None:
    erin = make_user("erin")
    world.add(world.other_dept, erin, Role.ADMIN)  # an admin, of another department
    for outsider in (erin, world.alice, world.bob, world.charlie):
        response = api(outsider).post(
            "/api/v1/billing/budgets/", {"tenant": "ml-101", "allowance": "10"}, format="json"
        )
        assert response.status_code == 403, (outsider, response.content)
        assert response.json()["detail"] == "you do not administer ML-101"
        response = api(outsider).post(
            "/api/v1/billing/credits/", {"tenant": "ml-101", "amount": "10"}
        )
        assert response.status_code == 403
    assert not Budget.objects.exists() and not CreditLot.objects.exists()


def test_students_and_outsiders_see_no_budgets(world, api, make_user) -> None:
    b = budget(world)
    budgets.grant_credit(actor=world.dean, tenant=world.class_a, amount="5")
    erin = make_user("erin")
    world.add(world.other_dept, erin, Role.ADMIN)
    for outsider in (world.bob, world.charlie, erin):
        assert api(outsider).get("/api/v1/billing/budgets/").json()["results"] == []
        assert api(outsider).get("/api/v1/billing/credits/").json()["results"] == []
        assert api(outsider).get(f"/api/v1/billing/budgets/{b.pk}/").status_code == 404
    # The teacher sees the class's budget (and cannot change it).
    seen = api(world.alice).get("/api/v1/billing/budgets/").json()["results"]
    assert [s["tenant"] for s in seen] == ["ml-101"]
    response = api(world.alice).patch(
        f"/api/v1/billing/budgets/{b.pk}/", {"allowance": "1000"}, format="json"
    )
    assert response.status_code == 403


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"allowance": "-5"}, "allowance"),
        ({"allowance": "lots"}, "allowance"),
        ({"allowance": "1.0000001"}, "allowance"),
        ({"allowance": "10", "thresholds": [0, 100]}, "thresholds"),
        ({"allowance": "10", "thresholds": [80, 101]}, "thresholds"),
        ({"allowance": "10", "thresholds": ["x"]}, "thresholds"),
        ({"allowance": "10", "period": "term"}, "period"),  # ML-101 has no term dates
        ({"allowance": "10", "period": "week"}, "period"),
        ({"allowance": "10", "policy": "explode"}, "policy"),
        ({"allowance": "10", "stop_grace_minutes": -1}, "stop_grace_minutes"),
        ({"allowance": "10", "tenant": "no-such-class"}, "tenant"),
        ({}, "allowance"),
    ],
)
def test_bad_budgets_are_400s_naming_the_field(world, api, body, field) -> None:
    response = api(world.dean).post(
        "/api/v1/billing/budgets/", {"tenant": "ml-101", **body}, format="json"
    )
    assert response.status_code == 400, response.content
    assert field in response.json()
    assert not Budget.objects.exists()


def test_a_second_budget_for_a_tenant_is_a_400(world, api) -> None:
    budget(world)
    response = api(world.dean).post(
        "/api/v1/billing/budgets/", {"tenant": "ml-101", "allowance": "5"}, format="json"
    )
    assert response.status_code == 400 and "already has a budget" in str(response.json())


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"amount": "-5"}, "amount"),
        ({"amount": "0"}, "amount"),
        ({"amount": "five"}, "amount"),
        ({"amount": "5", "expires_at": "2001-01-01T00:00Z"}, "expires_at"),
        ({"amount": "5", "expires_at": "soon"}, "expires_at"),
    ],
)
def test_bad_credit_is_a_400_naming_the_field(world, api, body, field) -> None:
    response = api(world.dean).post("/api/v1/billing/credits/", {"tenant": "ml-101", **body})
    assert response.status_code == 400, response.content
    assert field in response.json()


def test_budgets_and_credits_are_in_the_openapi_schema(world, api) -> None:
    schema = api(world.root).get("/api/schema/", {"format": "json"}).json()
    assert "/api/v1/billing/budgets/" in schema["paths"]
    assert "post" in schema["paths"]["/api/v1/billing/credits/"]


# --- Policies, end to end ----------------------------------------------------------------------


def used_up(world: Any, policy: str, **given: Any) -> Budget:
    """ML-101's budget for this month, all spent."""
    b = budgets.create_budget(
        actor=world.dean, tenant=world.class_a, allowance="1", policy=policy, **given
    )
    charge(world.class_a, "1.5", recently())
    return b


def test_block_refuses_a_launch_with_the_reason_in_the_api_and_the_form(
    world, catalog, backend, api, run
) -> None:
    used_up(world, "block")
    response = api(world.bob).post(
        "/api/v1/workloads/launch/", {"template": "jupyter", "flavor": "small"}, format="json"
    )
    assert response.status_code == 400
    words = response.json()["budget"][0]
    assert words.startswith("ML-101's budget for this month is used up (until ")
    page = signed_in(world.bob).post(
        reverse("launch", args=["jupyter"]), {"flavor": catalog.small.pk}, follow=True
    )
    assert "ML-101&#x27;s budget for this month is used up" in page.content.decode()
    assert not Workload.objects.exists()


def test_block_rejects_queued_work_with_the_reason(world, catalog, backend, run) -> None:
    waiting = workload_services.launch_environment(
        actor=world.bob, template=catalog.jupyter, flavor=catalog.small
    )  # admitted after commit: not yet, here
    assert waiting.state == State.PENDING
    used_up(world, "block")
    run(workload_services.admit_queued)
    waiting.refresh_from_db()
    assert waiting.state == State.REJECTED
    assert waiting.reason_code == "budget_used_up"
    assert waiting.reason.startswith("ML-101's budget for this month is used up")


def test_downgrade_refuses_gpu_sizes_and_launches_cpu_sizes(
    world, catalog, backend, api, run
) -> None:
    used_up(world, "downgrade")
    client = api(world.bob)
    for size in ("gpu", "half"):
        response = client.post(
            "/api/v1/workloads/launch/", {"template": "jupyter", "flavor": size}, format="json"
        )
        assert response.status_code == 400
        assert re.match(
            r"ML-101's GPU budget for this month is used up: only CPU-only sizes until \d{4}-",
            response.json()["budget"][0],
        )
    w = run(
        workload_services.launch_environment,
        actor=world.bob,
        template=catalog.jupyter,
        flavor=catalog.small,
    )
    assert w.state in HOLDING
    # The App Center shows the GPU sizes refused with the reason, and does not offer them.
    page = signed_in(world.bob).get(reverse("app-center")).content.decode()
    row = re.search(r'<tr data-flavor="gpu" data-refused="true">(.*?)</tr>', page, re.S)
    assert row and "only CPU-only sizes until" in row.group(1)
    assert '<tr data-flavor="small">' in page
    options = re.findall(r'<option value="(\d+)"', page)
    assert str(catalog.gpu.pk) not in options and str(catalog.small.pk) in options


def test_stop_warns_at_100_then_stops_running_work_after_the_grace(
    world, catalog, backend, run
) -> None:
    b = budgets.create_budget(
        actor=world.dean, tenant=world.class_a, allowance="1", policy="stop", stop_grace_minutes=15
    )
    w = run(
        workload_services.launch_environment,
        actor=world.bob,
        template=catalog.jupyter,
        flavor=catalog.small,
    )
    assert w.state in HOLDING
    charge(world.class_a, "1.5", recently())
    now = timezone.now()
    done = run(budgets.evaluate, now)
    w.refresh_from_db()
    assert w.state in HOLDING and not done.stopped  # warned, not stopped yet
    warned = Notice.objects.filter(reason_code="budget_exhausted_stop")
    assert {n.user for n in warned} == {world.alice, world.dean, world.bob}
    assert "running work is stopped in 15 minutes" in warned.first().text
    done = run(budgets.evaluate, now + dt.timedelta(minutes=14))
    assert not done.stopped
    done = run(budgets.evaluate, now + dt.timedelta(minutes=16))
    w.refresh_from_db()
    assert done.stopped == [str(w.pk)]
    assert w.state in (State.STOPPING, State.STOPPED)
    assert w.reason_code == "stopped_budget_used_up"
    assert w.reason == "stopped: ML-101's budget for this month is used up"
    assert BudgetAlert.objects.get(budget=b, threshold=100).stopped_at is not None
    assert warned.count() == 3  # one warning each, however many ticks


def test_credit_granted_in_the_grace_saves_the_work_and_a_new_exhaustion_warns_again(
    world, catalog, backend, run
) -> None:
    budgets.create_budget(
        actor=world.dean, tenant=world.class_a, allowance="1", policy="stop", stop_grace_minutes=15
    )
    w = run(
        workload_services.launch_environment,
        actor=world.bob,
        template=catalog.jupyter,
        flavor=catalog.small,
    )
    charge(world.class_a, "1.5", recently())
    now = timezone.now()
    run(budgets.evaluate, now)  # warned
    budgets.grant_credit(actor=world.dean, tenant=world.class_a, amount="1", now=now)
    assert not run(budgets.evaluate, now + dt.timedelta(minutes=20)).stopped
    w.refresh_from_db()
    assert w.state in HOLDING
    # Used up again: a new warning, and a new grace from then.
    charge(world.class_a, "1", recently())
    later = now + dt.timedelta(minutes=30)
    assert not run(budgets.evaluate, later).stopped
    assert Notice.objects.filter(user=world.bob, reason_code="budget_exhausted_stop").count() == 2
    assert not run(budgets.evaluate, later + dt.timedelta(minutes=14)).stopped
    assert run(budgets.evaluate, later + dt.timedelta(minutes=16)).stopped == [str(w.pk)]


def test_thresholds_notify_once_each_per_period_and_send_mail(world, catalog, backend, run) -> None:
    budgets.create_budget(actor=world.dean, tenant=world.class_a, allowance="10")
    run(
        workload_services.launch_environment,
        actor=world.bob,
        template=catalog.jupyter,
        flavor=catalog.small,
    )  # bob launched on the class this month: he hears of it too
    charge(world.class_a, "8.5", recently())
    run(budgets.evaluate)
    run(budgets.evaluate)
    at_80 = Notice.objects.filter(reason_code="budget_threshold")
    assert sorted(n.user.username for n in at_80) == ["alice", "bob", "dean"]
    assert at_80.first().text == (
        "ML-101 has used 80% of its budget for this month (8.50 of 10.00)"
    )
    assert len(mail.outbox) == 3 and "ML-101 has used 80%" in mail.outbox[0].subject
    assert world.charlie.pk not in {n.user_id for n in Notice.objects.all()}
    charge(world.class_a, "2", recently())
    run(budgets.evaluate)
    run(budgets.evaluate)
    assert Notice.objects.filter(reason_code="budget_threshold").count() == 3
    assert Notice.objects.filter(reason_code="budget_exhausted_block").count() == 3
    assert len(mail.outbox) == 6


def test_the_settle_task_evaluates_budgets(world, catalog) -> None:
    from billing.tasks import settle

    budgets.create_budget(actor=world.dean, tenant=world.class_a, allowance="1")
    charge(world.class_a, "2", recently())
    result = settle()
    assert result["budgets"] == 1 and result["budget_notices"] >= 1


def test_without_budgets_nothing_is_refused(world, catalog) -> None:
    ask = Ask(world.class_a.pk, None, catalog.gpu, world.bob.pk)
    assert refusal_for(ask) is None
    b = used_up(world, "block")
    assert refusal_for(ask) == BR.BUDGET_USED_UP(
        tenant="ML-101", period="month", date=budgets.status(b).period.until
    )
    assert refusal_for(Ask(None, world.bob.pk, catalog.gpu, world.bob.pk)) is None  # he pays
    budgets.deactivate_budget(actor=world.dean, budget=b)
    assert refusal_for(ask) is None


# --- Pages -------------------------------------------------------------------------------------


def test_the_teacher_sees_the_class_budget_on_the_dashboard(world, catalog) -> None:
    budgets.create_budget(actor=world.dean, tenant=world.class_a, allowance="10", policy="stop")
    charge(world.class_a, "4", recently())
    page = signed_in(world.alice).get(reverse("teaching-class", args=["ml-101"])).content.decode()
    assert 'data-role="budget"' in page
    assert "4.00 of 10.00 spent (40 %)" in page and "6.00 left" in page
    assert "When used up: Stop running work after a warning" in page


def test_the_app_center_shows_what_is_left_of_the_class_budget(world, catalog) -> None:
    budgets.create_budget(actor=world.dean, tenant=world.class_a, allowance="10")
    charge(world.class_a, "2.5", recently())
    page = signed_in(world.bob).get(reverse("app-center")).content.decode()
    assert 'Budget of ML-101: <span data-role="budget-remaining">7.50</span> of 10.00 left' in page


def test_admins_manage_budgets_and_credit_in_the_console(world, catalog) -> None:
    dean = signed_in(world.dean)
    url = reverse("console-budgets")
    bad = dean.post(
        url,
        {
            "form": "budget",
            "tenant": world.class_a.pk,
            "period": "term",
            "allowance": "-1",
            "thresholds": "80, 100",
            "policy": "block",
            "stop_grace_minutes": "15",
        },
    )
    assert bad.status_code == 200 and 'data-field="period"' in bad.content.decode()
    made = dean.post(
        url,
        {
            "form": "budget",
            "tenant": world.class_a.pk,
            "period": "month",
            "allowance": "50",
            "thresholds": "75, 100",
            "policy": "downgrade",
            "stop_grace_minutes": "15",
        },
    )
    assert made.status_code == 302
    b = Budget.objects.get()
    assert (b.allowance, b.thresholds, b.policy) == (Decimal(50), [75, 100], "downgrade")
    bad = dean.post(url, {"form": "credit", "tenant": world.class_a.pk, "amount": "-3"})
    assert 'data-field="amount"' in bad.content.decode()
    assert (
        dean.post(url, {"form": "credit", "tenant": world.class_a.pk, "amount": "3"}).status_code
        == 302
    )
    page = dean.get(url).content.decode()
    assert 'data-budget="ml-101"' in page and 'data-role="lot-remaining">3.00<' in page
    edit = reverse("console-budget-edit", args=[b.pk])
    changed = dean.post(
        edit,
        {
            "period": "month",
            "allowance": "60",
            "thresholds": "90",
            "policy": "block",
            "stop_grace_minutes": "0",
        },
    )
    assert changed.status_code == 302
    b.refresh_from_db()
    assert (b.allowance, b.thresholds) == (Decimal(60), [90])
    # Teachers and students are not let in; an admin of another department cannot pick ML-101.
    for outsider in (world.alice, world.charlie):
        assert signed_in(outsider).get(url).status_code == 403
        assert signed_in(outsider).get(edit).status_code == 403


def test_notices_show_on_the_home_page_and_are_marked_read(world) -> None:
    from core import notices

    notices.notify(
        [world.bob],
        BR.BUDGET_THRESHOLD(
            tenant="ML-101", percent=80, period="month", spent="8.00", total="10.00"
        ),
        dedupe_key="k",
    )
    mine = Notice.objects.get(user=world.bob)
    other = notices.notify(
        [world.charlie], BR.BUDGET_USED_UP(tenant="DL-201", period="month", date="2025-02-01")
    )[0]
    bob = signed_in(world.bob)
    page = bob.get(reverse("home")).content.decode()
    assert "ML-101 has used 80% of its budget for this month" in page
    assert 'data-role="notice-count"' in page
    bob.post(reverse("notices-read"), {"notice": other.pk})  # not his: nothing changes
    other.refresh_from_db()
    assert other.read_at is None
    bob.post(reverse("notices-read"), {"notice": mine.pk})
    mine.refresh_from_db()
    assert mine.read_at is not None
    assert 'data-role="notice-count"' not in bob.get(reverse("home")).content.decode()
    # In Chinese for a reader who chose it.
    world.bob.language = "zh-hans"
    world.bob.save()
    page = bob.get(reverse("home"), HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "ML-101 has used 80%" not in page


def test_a_term_budget_before_its_term_has_its_whole_allowance_and_after_it_nothing(world) -> None:
    world.class_a.term_start, world.class_a.term_end = dt.date(2025, 2, 1), dt.date(2025, 6, 30)
    world.class_a.save()
    b = budget(world, period="term", allowance="100")
    before = budgets.status(b, T0)
    assert (before.remaining, before.state) == (Decimal(100), budgets.OK)
    after = budgets.status(b, dt.datetime(2025, 7, 2, tzinfo=dt.UTC))
    assert after.state == budgets.EXHAUSTED  # the class's term is over: nothing more to spend


def test_the_notices_api_shows_ones_own_and_marks_them_read(world, api) -> None:
    from core import notices

    reason = BR.BUDGET_USED_UP(tenant="ML-101", period="month", date="2025-02-01")
    mine = notices.notify([world.bob], reason)[0]
    theirs = notices.notify([world.charlie], reason)[0]
    bob = api(world.bob)
    listed = bob.get("/api/v1/notices/").json()["results"]
    assert [n["id"] for n in listed] == [mine.pk]
    assert listed[0]["reason_code"] == "budget_used_up"
    assert listed[0]["text"] == "ML-101's budget for this month is used up (until 2025-02-01)"
    assert bob.post(f"/api/v1/notices/{theirs.pk}/read/").status_code == 404
    assert bob.post(f"/api/v1/notices/{mine.pk}/read/").json() == {"read": 1}
    assert bob.get("/api/v1/notices/?unread=true").json()["results"] == []
    assert api(world.charlie).post("/api/v1/notices/read/").json() == {"read": 1}
    assert api(None).get("/api/v1/notices/").status_code in (401, 403)


def test_the_admission_check_costs_one_query_without_budgets_and_once_per_payer_with(
    world, catalog, django_assert_num_queries
) -> None:
    ask = Ask(world.class_a.pk, None, catalog.gpu, world.bob.pk)
    with django_assert_num_queries(1):
        assert refusal_for(ask, {}) is None
    used_up(world, "downgrade")
    memo: dict[str, Any] = {}
    assert refusal_for(ask, memo) is not None
    with django_assert_num_queries(0):  # a long line of one payer asks the database once
        for _ in range(50):
            assert refusal_for(ask, memo) is not None
            assert refusal_for(Ask(world.class_a.pk, None, catalog.small, None), memo) is None
