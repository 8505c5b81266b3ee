"""The workload list: filters, sorting, pages, start / end / duration, and stopping several at
once; the API list filters and sorts with the same filterset."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from lxml import html

from workloads.choices import State, WorkloadKind
from workloads.models import Workload

pytestmark = pytest.mark.django_db


def a_workload(catalog: Any, owner: Any, tenant: Any, name: str, **fields: Any) -> Workload:
    fields.setdefault("state", State.RUNNING)
    fields.setdefault("kind", WorkloadKind.NOTEBOOK)
    return Workload.objects.create(
        name=name, owner=owner, tenant=tenant, cluster=catalog.cluster, flavor=catalog.small,
        **fields,
    )  # fmt: skip


def names(page: Any) -> list[str]:
    tree = html.fromstring(page.content.decode())
    return [a.text_content() for a in tree.xpath('//td[@class="name"]/a')]


def ago(minutes: int) -> dt.datetime:
    return timezone.now() - dt.timedelta(minutes=minutes)


@pytest.fixture
def three(world, catalog) -> dict[str, Workload]:
    """bob's running notebook (2 h), bob's finished job (10 min), charlie's (class B) notebook."""
    return {
        "long": a_workload(catalog, world.bob, world.class_a, "long", started_at=ago(120)),
        "job": a_workload(
            catalog,
            world.bob,
            world.class_a,
            "job",
            kind=WorkloadKind.JOB,
            state=State.SUCCEEDED,
            started_at=ago(30),
            finished_at=ago(20),
        ),
        "other": a_workload(catalog, world.charlie, world.class_b, "other", started_at=ago(5)),
    }


def test_the_list_shows_start_end_and_duration(world, three, signed_in) -> None:
    page = signed_in(world.bob).get("/workloads/?kind=job")
    (row,) = html.fromstring(page.content.decode()).xpath("//tr[@data-workload-id]")
    assert row.xpath('.//td[@data-role="duration"]')[0].text_content().strip() == "10 min"
    assert len(row.xpath(".//time")) == 2  # start and end


def test_it_filters_by_state_kind_and_class(world, three, signed_in) -> None:
    client = signed_in(world.root)
    assert sorted(names(client.get("/workloads/?state=active"))) == ["long", "other"]
    assert names(client.get("/workloads/?state=Succeeded")) == ["job"]
    assert names(client.get("/workloads/?kind=job")) == ["job"]
    assert names(client.get(f"/workloads/?tenant={world.class_b.slug}")) == ["other"]
    assert names(client.get("/workloads/?owner=charlie")) == ["other"]


def test_a_bad_filter_is_a_form_error_not_a_crash(world, three, signed_in) -> None:
    page = signed_in(world.bob).get("/workloads/?state=Sleeping")
    assert page.status_code == 200
    tree = html.fromstring(page.content.decode())
    assert tree.xpath('//div[contains(@class, "has-error")]//*[@name="state"]')


def test_the_outsider_sees_none_of_the_class(world, three, signed_in) -> None:
    assert names(signed_in(world.charlie).get("/workloads/")) == ["other"]
    # Nor can the class be chosen as a filter: it is not one of charlie's.
    assert names(signed_in(world.charlie).get(f"/workloads/?tenant={world.class_a.slug}")) == []


def test_the_teacher_sees_and_filters_the_students_of_her_class(world, three, signed_in) -> None:
    client = signed_in(world.alice)
    assert sorted(names(client.get("/workloads/"))) == ["job", "long"]
    assert names(client.get("/workloads/?owner=bob&state=active")) == ["long"]


def test_it_sorts_by_duration_name_and_start(world, three, signed_in) -> None:
    client = signed_in(world.root)
    assert names(client.get("/workloads/?ordering=-duration")) == ["long", "job", "other"]
    assert names(client.get("/workloads/?ordering=name")) == ["job", "long", "other"]
    assert names(client.get("/workloads/?ordering=-start")) == ["other", "job", "long"]
    tree = html.fromstring(client.get("/workloads/?ordering=name").content.decode())
    (heading,) = tree.xpath('//th[@aria-sort="ascending"]')
    assert "ordering=-name" in heading.xpath(".//a/@href")[0]


def test_it_pages_by_25_and_keeps_the_filters(world, catalog, signed_in) -> None:
    for i in range(30):
        a_workload(catalog, world.bob, world.class_a, f"w{i:02}", started_at=ago(i + 1))
    client = signed_in(world.bob)
    first = client.get("/workloads/?ordering=name")
    assert len(names(first)) == 25
    link = html.fromstring(first.content.decode()).xpath('//nav[@class="pagination"]//a/@href')
    assert link == ["?ordering=name&page=2"]
    assert names(client.get("/workloads/" + link[0])) == [f"w{i}" for i in range(25, 30)]


def test_the_list_costs_the_same_queries_for_3_or_25_rows(world, catalog, signed_in) -> None:
    client = signed_in(world.alice)

    def cost() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert client.get("/workloads/").status_code == 200
        return len(queries)

    for i in range(3):
        a_workload(catalog, world.bob, world.class_a, f"a{i}", started_at=ago(i + 1))
    few = cost()
    for i in range(22):
        a_workload(catalog, world.bob, world.class_a, f"b{i}", started_at=ago(i + 1))
    assert cost() == few <= 15


# -- stopping several -------------------------------------------------------------------------


def test_the_teacher_stops_the_ticked_sessions_of_her_class(
    world, catalog, backend, signed_in, django_capture_on_commit_callbacks
) -> None:
    mine = [a_workload(catalog, world.bob, world.class_a, f"s{i}") for i in range(2)]
    left = a_workload(catalog, world.bob, world.class_a, "left")
    page = signed_in(world.alice).get("/workloads/").content.decode()
    form = html.fromstring(page).xpath('//form[@action="/workloads/stop/"]')[0]
    assert form.get("data-confirm")  # the browser asks first (static/js/ui.js)
    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in(world.alice).post(
            "/workloads/stop/",
            {"workload": [str(w.pk) for w in mine], "query": "state=active"},
            follow=True,
        )
    assert response.redirect_chain[-1][0] == "/workloads/?state=active"
    assert "Stopping 2 workloads." in response.content.decode()
    states = dict(Workload.objects.values_list("name", "state"))
    assert {states["s0"], states["s1"]} <= {State.STOPPING, State.STOPPED}
    assert states[left.name] == State.RUNNING


def test_nobody_stops_what_is_not_theirs_in_a_bulk_stop(
    world, catalog, backend, signed_in, django_capture_on_commit_callbacks
) -> None:
    bobs = a_workload(catalog, world.bob, world.class_a, "bobs")
    alices = a_workload(catalog, world.alice, world.class_a, "alices")
    for outsider, target in ((world.charlie, bobs), (world.bob, alices)):
        with django_capture_on_commit_callbacks(execute=True):
            response = signed_in(outsider).post(
                "/workloads/stop/", {"workload": [str(target.pk)]}, follow=True
            )
        assert "1 workload was left alone" in response.content.decode()
    assert set(Workload.objects.values_list("state", flat=True)) == {State.RUNNING}


def test_a_bulk_stop_of_no_workload_id_is_a_400(world, signed_in) -> None:
    response = signed_in(world.alice).post("/workloads/stop/", {"workload": ["nope"]})
    assert response.status_code == 400


# -- the API list: the same filterset ---------------------------------------------------------


def test_the_api_filters_and_sorts_like_the_page(world, three, api) -> None:
    client = api(world.root)
    listed = client.get("/api/v1/workloads/?state=active&ordering=-duration").json()
    assert [w["name"] for w in listed["results"]] == ["long", "other"]
    assert [w["name"] for w in client.get("/api/v1/workloads/?kind=job").json()["results"]] == [
        "job"
    ]
    # The API's older names still work.
    old = client.get(f"/api/v1/workloads/?tenant__slug={world.class_b.slug}").json()
    assert [w["name"] for w in old["results"]] == ["other"]
    bad = client.get("/api/v1/workloads/?state=Sleeping")
    assert bad.status_code == 400 and "state" in bad.json()


def test_the_api_list_hides_other_classes_from_the_outsider(world, three, api) -> None:
    listed = api(world.charlie).get(f"/api/v1/workloads/?tenant={world.class_a.slug}")
    assert listed.status_code == 400 or listed.json()["results"] == []


def test_the_api_list_costs_the_same_queries_for_3_or_25_rows(world, catalog, api) -> None:
    client = api(world.alice)

    def cost() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert (
                client.get("/api/v1/workloads/?state=active&ordering=-duration").status_code == 200
            )
        return len(queries)

    cost()  # the reader's roles, read once and kept with the (forced) user
    for i in range(3):
        a_workload(catalog, world.bob, world.class_a, f"a{i}", started_at=ago(i + 1))
    few = cost()
    for i in range(22):
        a_workload(catalog, world.bob, world.class_a, f"b{i}", started_at=ago(i + 1))
    assert cost() == few <= 4
