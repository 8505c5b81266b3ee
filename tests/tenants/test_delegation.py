"""django-guardian object permissions delegate a tenant to someone without a membership."""

import pytest
from guardian.shortcuts import assign_perm

pytestmark = pytest.mark.django_db


def test_a_delegated_manager_adds_students_to_that_class_only(world, api, make_user) -> None:
    borrowed_ta = make_user("tara")
    assign_perm("tenants.manage_tenant", borrowed_ta, world.class_a)
    client = api(borrowed_ta)

    added = client.post(
        "/api/v1/memberships/",
        {"user": "charlie", "tenant": "ml-101", "role": "student"},
        format="json",
    )
    assert added.status_code == 201, added.content
    refused = client.post(
        "/api/v1/memberships/",
        {"user": "bob", "tenant": "dl-201", "role": "student"},
        format="json",
    )
    assert refused.status_code == 400  # class B does not exist for her
    assert (
        client.patch("/api/v1/tenants/ml-101/quota/", {"gpus": "9"}, format="json").status_code
        == 403
    )


def test_a_view_grant_shows_the_subtree_and_changes_nothing(world, api, make_user) -> None:
    auditor = make_user("audrey")
    assign_perm("tenants.view_tenant", auditor, world.dept)
    client = api(auditor)

    listed = {t["slug"] for t in client.get("/api/v1/tenants/").json()["results"]}
    assert {"cs", "ml-101", "dl-201"} <= listed and "ee" not in listed
    assert (
        client.post(
            "/api/v1/memberships/",
            {"user": "charlie", "tenant": "ml-101", "role": "student"},
            format="json",
        ).status_code
        == 403
    )
