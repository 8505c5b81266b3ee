"""The billing API: prices (read by those who may use the cluster, set by operators from now
on), accounts and entries by who manages what, usage of one's own workloads; bad input is a
400 naming the field, an outsider finds nothing."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from billing import services
from billing.models import LedgerEntry, PricePlan, UsageInterval
from core.models import AuditEvent
from scheduling.models import Cluster
from tests.billing.conftest import T0

pytestmark = pytest.mark.django_db

URL = "/api/v1/billing/"


def later(hours: int = 1) -> str:
    return (timezone.now() + dt.timedelta(hours=hours)).isoformat()


def charged_usage(world, catalog, priced, owner=None, tenant=None) -> UsageInterval:
    owner = owner or world.bob
    tenant = tenant or world.class_a
    row = UsageInterval.objects.create(
        account=services.account_for_tenant(tenant),
        cluster=catalog.cluster,
        owner=owner,
        tenant=tenant,
        started_at=T0,
        ended_at=T0 + dt.timedelta(hours=1),
        settled_until=T0,
        gpus=1,
        gpu_model="A100",
        workload_name="nb",
        owner_name=owner.username,
    )
    services.settle(T0 + dt.timedelta(hours=1))
    return row


def test_an_operator_sets_a_new_price_version_from_a_stated_time(world, catalog, api) -> None:
    body = {
        "cluster": "lab",
        "effective_from": later(),
        "gpu_hour": "2.5",
        "gpu_hour_by_model": {"A100": "3.25"},
        "cpu_core_hour": 0.1,
        "priority_multipliers": {"low": "0.5"},
        "offpeak": {"start": "00:00", "end": "07:00"},
        "offpeak_multiplier": "0",
    }
    response = api(world.root).post(URL + "price-plans/", body, format="json")
    assert response.status_code == 201, response.json()
    data = response.json()
    assert data["gpu_hour_by_model"] == {"A100": "3.2500"}
    assert data["offpeak"] == {"start": "00:00", "end": "07:00"}
    plan = PricePlan.objects.get()
    assert AuditEvent.objects.filter(
        action="price_plan.create", target_id=str(plan.pk), actor=world.root
    ).exists()


def test_students_read_the_prices_of_their_cluster_and_cannot_set_them(
    world, catalog, api, priced
) -> None:
    response = api(world.bob).get(URL + "price-plans/")
    assert [p["cluster"] for p in response.json()["results"]] == ["lab"]
    refused = api(world.alice).post(
        URL + "price-plans/", {"cluster": "lab", "effective_from": later()}, format="json"
    )
    assert refused.status_code == 403


def test_prices_of_a_cluster_you_cannot_use_are_not_shown(world, catalog, api) -> None:
    other = Cluster.objects.create(name="Other", slug="other", backend="local")
    PricePlan.objects.create(cluster=other, effective_from=T0)
    assert api(world.charlie).get(URL + "price-plans/").json()["results"] == []


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"gpu_hour": "-1"}, "gpu_hour", "greater than or equal to 0"),
        ({"gpu_hour": "cheap"}, "gpu_hour", "valid number"),
        ({"gpu_hour_by_model": {"A100": "-2"}}, "gpu_hour_by_model", "greater than or equal"),
        ({"effective_from": "2020-01-01T00:00Z"}, "effective_from", "in the past"),
        ({"offpeak": {"start": "07:00", "end": "07:00"}}, "offpeak", "must not be empty"),
        ({"cluster": "nowhere"}, "cluster", "does not exist"),
    ],
)
def test_bad_prices_are_refused_with_the_field_named(
    world, catalog, api, change, field, words
) -> None:
    body = {"cluster": "lab", "effective_from": later(), "gpu_hour": "1", **change}
    response = api(world.root).post(URL + "price-plans/", body, format="json")
    assert response.status_code == 400
    assert words in str(response.json()[field])
    assert not PricePlan.objects.exists()


def test_two_versions_cannot_start_at_the_same_time(world, catalog, api) -> None:
    body = {"cluster": "lab", "effective_from": later(), "gpu_hour": "1"}
    assert api(world.root).post(URL + "price-plans/", body, format="json").status_code == 201
    again = api(world.root).post(URL + "price-plans/", body, format="json")
    assert again.status_code == 400
    assert "another version" in again.json()["effective_from"][0]


def test_a_teacher_sees_the_class_account_and_its_total(world, catalog, api, priced) -> None:
    charged_usage(world, catalog, priced)
    accounts = api(world.alice).get(URL + "accounts/").json()["results"]
    assert [(a["tenant"], a["total"], a["entries"]) for a in accounts] == [("ml-101", "3.00", 1)]
    dean = api(world.dean).get(URL + "accounts/").json()["results"]
    assert [a["tenant"] for a in dean] == ["ml-101"]


def test_a_student_sees_the_cost_of_their_own_usage_and_no_one_elses(
    world, catalog, api, priced
) -> None:
    row = charged_usage(world, catalog, priced)
    bob = api(world.bob).get(URL + "ledger-entries/").json()["results"]
    assert [e["amount"] for e in bob] == ["3.000000"]
    assert api(world.bob).get(URL + "usage-intervals/").json()["count"] == 1

    charlie = api(world.charlie)
    assert charlie.get(URL + "accounts/").json()["results"] == []
    assert charlie.get(URL + "ledger-entries/").json()["results"] == []
    assert charlie.get(URL + "usage-intervals/").json()["results"] == []
    assert charlie.get(f"{URL}usage-intervals/{row.pk}/").status_code == 404
    entry = LedgerEntry.objects.get()
    assert charlie.get(f"{URL}ledger-entries/{entry.pk}/").status_code == 404


def test_an_admin_corrects_an_entry_with_a_new_one(world, catalog, api, priced) -> None:
    charged_usage(world, catalog, priced)
    entry = LedgerEntry.objects.get()
    url = f"{URL}ledger-entries/{entry.pk}/correct/"
    assert api(world.alice).post(url, {"amount": "-1", "reason": "x"}).status_code == 403
    bad = api(world.dean).post(url, {"amount": "lots", "reason": "outage"})
    assert bad.status_code == 400 and "number" in bad.json()["amount"][0]
    response = api(world.dean).post(url, {"amount": "-1.50", "reason": "outage"})
    assert response.status_code == 201
    assert response.json()["corrects"] == entry.pk
    total = api(world.alice).get(URL + "accounts/").json()["results"][0]["total"]
    assert Decimal(total) == Decimal("1.50")
    assert api(world.charlie).post(url, {"amount": "-1", "reason": "x"}).status_code == 404


def test_a_grant_may_bill_only_a_tenant_its_teacher_manages(world, catalog, api) -> None:
    grant = catalog.grant
    response = api(world.alice).patch(
        f"/api/v1/grants/{grant.pk}/",
        {"payer": "tenant", "payer_tenant": "dl-201"},
        format="json",
    )
    assert response.status_code == 400
    assert "do not manage" in response.json()["payer_tenant"][0]
    person = api(world.alice).patch(
        f"/api/v1/grants/{grant.pk}/", {"payer": "person"}, format="json"
    )
    assert person.status_code == 200 and person.json()["payer"] == "person"


@pytest.mark.parametrize("value", ["-1.7976931348623157e+308", "1e400", "abc", "0", "2.5"])
def test_a_filter_id_that_is_no_row_id_is_a_400(world, catalog, api, value) -> None:
    """Found by the schema fuzzer: a huge number overflowed the database's integer (500)."""
    for path in ("/api/v1/billing/usage-intervals/", "/api/v1/billing/ledger-entries/"):
        response = api(world.bob).get(path, {"account": value})
        assert response.status_code == 400, (path, value, response.content)
        assert b"account" in response.content
