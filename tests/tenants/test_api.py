"""The REST API as alice (teacher of class A), bob (student of A), charlie (student of B),
dean (admin of the department) and root (superuser) see it."""

import pytest

from core.models import AuditEvent
from tenants.models import ApiToken, Membership, Tenant

pytestmark = pytest.mark.django_db


def slugs(response) -> set[str]:
    return {row["slug"] for row in response.json()["results"]}


# --- who sees which tenants ------------------------------------------------------------------


def test_anonymous_callers_are_turned_away(world, api) -> None:
    assert api(None).get("/api/v1/tenants/").status_code in (401, 403)


def test_a_student_sees_their_class_and_the_tenants_above_it(world, api) -> None:
    response = api(world.bob).get("/api/v1/tenants/")
    assert slugs(response) == {"uni", "cs", "ml-101"}
    assert {r["slug"]: r["my_role"] for r in response.json()["results"]}["ml-101"] == "student"


def test_the_outsider_gets_404_for_another_class(world, api) -> None:
    assert api(world.charlie).get("/api/v1/tenants/ml-101/").status_code == 404
    assert api(world.charlie).get("/api/v1/tenants/ml-101/quota/").status_code == 404
    assert api(world.charlie).patch("/api/v1/tenants/ml-101/", {"name": "x"}).status_code == 404


def test_a_department_admin_sees_the_whole_department(world, api) -> None:
    assert slugs(api(world.dean).get("/api/v1/tenants/?within=cs")) == {"cs", "ml-101", "dl-201"}
    assert "ee" not in slugs(api(world.dean).get("/api/v1/tenants/"))


# --- changing the tree -----------------------------------------------------------------------


def test_a_department_admin_creates_a_class_in_their_department(world, api) -> None:
    response = api(world.dean).post(
        "/api/v1/tenants/",
        {
            "kind": "class",
            "name": "CV-301",
            "slug": "cv-301",
            "parent": "cs",
            "term_start": "2026-09-01",
            "term_end": "2027-01-31",
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    assert Tenant.objects.get(slug="cv-301").parent == world.dept


def test_a_department_admin_cannot_create_in_another_department(world, api) -> None:
    response = api(world.dean).post(
        "/api/v1/tenants/",
        {"kind": "class", "name": "X", "slug": "x", "parent": "ee"},
        format="json",
    )
    assert response.status_code == 400
    assert "parent" in response.json()


def test_a_teacher_may_not_rename_their_class(world, api) -> None:
    response = api(world.alice).patch("/api/v1/tenants/ml-101/", {"name": "Mine"}, format="json")
    assert response.status_code == 403
    world.class_a.refresh_from_db()
    assert world.class_a.name == "ML-101"


def test_a_duplicate_slug_gets_a_400_naming_the_field(world, api) -> None:
    response = api(world.root).post(
        "/api/v1/tenants/",
        {"kind": "class", "name": "Y", "slug": "dl-201", "parent": "cs"},
        format="json",
    )
    assert response.status_code == 400 and "slug" in response.json()


def test_moving_under_a_descendant_gets_a_400(world, api) -> None:
    response = api(world.root).post("/api/v1/tenants/cs/move/", {"parent": "ml-101"}, format="json")
    assert response.status_code == 400
    assert "parent" in response.json()


def test_an_admin_moves_a_class_between_departments(world, api) -> None:
    response = api(world.root).post("/api/v1/tenants/ml-101/move/", {"parent": "ee"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["parent"] == "ee"


def test_a_department_admin_cannot_move_a_class_out_of_their_reach(world, api) -> None:
    response = api(world.dean).post("/api/v1/tenants/ml-101/move/", {"parent": "ee"}, format="json")
    assert response.status_code == 400  # ee is not visible to dean


def test_a_tenant_with_children_is_not_deleted(world, api) -> None:
    response = api(world.root).delete("/api/v1/tenants/cs/")
    assert response.status_code == 400
    assert Tenant.objects.filter(slug="cs").exists()


# --- quotas ------------------------------------------------------------------------------------


def test_members_read_their_class_quota_but_only_admins_change_it(world, api) -> None:
    assert api(world.bob).get("/api/v1/tenants/ml-101/quota/").status_code == 200
    assert (
        api(world.alice)
        .patch("/api/v1/tenants/ml-101/quota/", {"gpus": "8"}, format="json")
        .status_code
        == 403
    )
    response = api(world.dean).patch(
        "/api/v1/tenants/ml-101/quota/", {"gpus": "4", "member_gpus": "1"}, format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["gpus"] == "4.000" and response.json()["over_use"] == []


def test_a_negative_quota_gets_a_400(world, api) -> None:
    response = api(world.dean).patch("/api/v1/tenants/ml-101/quota/", {"gpus": "-2"}, format="json")
    assert response.status_code == 400 and "gpus" in response.json()


def test_a_quota_set_below_use_is_flagged_not_clipped(world, api) -> None:
    world.class_a.quota.used_gpus = 3
    world.class_a.quota.save()
    response = api(world.dean).patch("/api/v1/tenants/ml-101/quota/", {"gpus": "1"}, format="json")
    assert response.status_code == 200
    assert response.json()["over_use"] == ["gpus"]
    assert response.json()["used_gpus"] == "3.000"


# --- memberships -------------------------------------------------------------------------------


def test_a_teacher_adds_a_student_to_their_class(world, api, make_user) -> None:
    make_user("dora")
    response = api(world.alice).post(
        "/api/v1/memberships/",
        {"user": "dora", "tenant": "ml-101", "role": "student"},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert Membership.objects.filter(user__username="dora", tenant=world.class_a).exists()


def test_a_teacher_cannot_make_a_teacher(world, api) -> None:
    response = api(world.alice).post(
        "/api/v1/memberships/",
        {"user": "charlie", "tenant": "ml-101", "role": "teacher"},
        format="json",
    )
    assert response.status_code == 403


def test_a_teacher_cannot_add_to_a_class_they_do_not_see(world, api) -> None:
    response = api(world.alice).post(
        "/api/v1/memberships/",
        {"user": "bob", "tenant": "dl-201", "role": "student"},
        format="json",
    )
    assert response.status_code == 400
    assert not Membership.objects.filter(user=world.bob, tenant=world.class_b).exists()


def test_a_student_cannot_add_anyone(world, api) -> None:
    response = api(world.bob).post(
        "/api/v1/memberships/",
        {"user": "charlie", "tenant": "ml-101", "role": "student"},
        format="json",
    )
    assert response.status_code == 403


def test_an_unknown_role_gets_a_400_naming_the_field(world, api) -> None:
    response = api(world.alice).post(
        "/api/v1/memberships/",
        {"user": "charlie", "tenant": "ml-101", "role": "owner"},
        format="json",
    )
    assert response.status_code == 400 and "role" in response.json()


def test_members_lists_are_scoped(world, api) -> None:
    def users(client) -> set[str]:
        return {m["user"] for m in client.get("/api/v1/memberships/").json()["results"]}

    assert users(api(world.alice)) == {"alice", "bob"}
    assert users(api(world.bob)) == {"bob"}
    assert users(api(world.charlie)) == {"charlie"}
    bob_in_a = Membership.objects.get(user=world.bob, tenant=world.class_a)
    assert api(world.charlie).get(f"/api/v1/memberships/{bob_in_a.pk}/").status_code == 404
    assert api(world.charlie).delete(f"/api/v1/memberships/{bob_in_a.pk}/").status_code == 404


def test_a_teacher_removes_a_student_but_a_student_cannot(world, api) -> None:
    bob_in_a = Membership.objects.get(user=world.bob, tenant=world.class_a)
    alice_in_a = Membership.objects.get(user=world.alice, tenant=world.class_a)
    assert api(world.bob).delete(f"/api/v1/memberships/{alice_in_a.pk}/").status_code == 404
    assert api(world.bob).delete(f"/api/v1/memberships/{bob_in_a.pk}/").status_code == 403
    assert api(world.alice).delete(f"/api/v1/memberships/{bob_in_a.pk}/").status_code == 204
    assert AuditEvent.objects.filter(action="membership.remove").exists()


# --- users and tokens --------------------------------------------------------------------------


def test_people_see_themselves_and_the_members_they_manage(world, api) -> None:
    def names(client) -> set[str]:
        return {u["username"] for u in client.get("/api/v1/users/").json()["results"]}

    assert names(api(world.alice)) == {"alice", "bob"}
    assert names(api(world.charlie)) == {"charlie"}
    assert api(world.charlie).get(f"/api/v1/users/{world.bob.pk}/").status_code == 404
    assert api(world.bob).get("/api/v1/users/me/").json()["username"] == "bob"


def test_a_personal_token_is_shown_once_works_and_can_be_revoked(world, api) -> None:
    created = api(world.bob).post("/api/v1/tokens/", {"name": "laptop"}, format="json")
    assert created.status_code == 201
    secret = created.json()["token"]
    assert secret.startswith("qnt_")
    listing = api(world.bob).get("/api/v1/tokens/").json()["results"]
    assert "token" not in listing[0] and listing[0]["last_used_at"] is None
    assert not ApiToken.objects.filter(digest__contains=secret[4:]).exists()

    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert client.get("/api/v1/users/me/").json()["username"] == "bob"
    assert ApiToken.objects.get(name="laptop").last_used_at is not None

    token_id = created.json()["id"]
    assert api(world.charlie).delete(f"/api/v1/tokens/{token_id}/").status_code == 404
    assert api(world.bob).delete(f"/api/v1/tokens/{token_id}/").status_code == 204
    assert client.get("/api/v1/users/me/").status_code == 401


def test_a_malformed_or_unknown_token_is_refused(world) -> None:
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer qnt_nope")
    assert client.get("/api/v1/users/me/").status_code == 401
    client.credentials(HTTP_AUTHORIZATION="Bearer a b")
    assert client.get("/api/v1/users/me/").status_code == 401


def test_a_token_without_a_name_gets_a_400(world, api) -> None:
    response = api(world.bob).post("/api/v1/tokens/", {"name": "  "}, format="json")
    assert response.status_code == 400 and "name" in response.json()


# --- audit log ---------------------------------------------------------------------------------


def test_the_audit_log_is_scoped_to_the_admin_subtree(world, api) -> None:
    def actions(client) -> list[str]:
        return [e["target_repr"] for e in client.get("/api/v1/audit-events/").json()["results"]]

    dean_sees = actions(api(world.dean))
    assert any("ML-101" in t for t in dean_sees)
    assert not any(t == "EE" for t in dean_sees)
    assert actions(api(world.charlie)) == []


# --- query budgets -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["/api/v1/tenants/", "/api/v1/memberships/", "/api/v1/users/", "/api/v1/audit-events/"]
)
def test_list_endpoints_use_a_bounded_number_of_queries(
    world, api, url, django_assert_max_num_queries
) -> None:
    client = api(world.dean)
    with django_assert_max_num_queries(8):
        assert client.get(url).status_code == 200
