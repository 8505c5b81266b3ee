"""workloads.grants: one set of rules and one audit trail for grants, from the API and from
the teachers' pages. alice teaches class A, bob studies in it, charlie is the outsider."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from core.models import AuditEvent
from scheduling.models import PriorityClass
from workloads import grants
from workloads.models import AppTemplate, Grant

pytestmark = pytest.mark.django_db


@pytest.fixture
def tensorboard(catalog) -> AppTemplate:
    """A template granted to nobody yet, allowing the small flavor only."""
    template = AppTemplate.objects.create(
        name="TensorBoard",
        slug="tensorboard",
        kind="tensorboard",
        image=catalog.image,
        default_flavor=catalog.small,
    )
    template.allowed_flavors.set([catalog.small])
    return template


WINDOW = {"day": 1, "start": "14:00", "end": "16:00"}


def trace(action: str) -> list[tuple[Any, ...]]:
    return list(
        AuditEvent.objects.filter(action=action).values_list("actor__username", "tenant__slug")
    )


def test_a_teacher_grants_to_her_class_with_one_audit_row(world, catalog, tensorboard) -> None:
    grant = grants.create_grant(
        actor=world.alice,
        template=tensorboard,
        tenant=world.class_a,
        flavors=[catalog.small],
        windows=[WINDOW],
        member_limit=2,
    )
    assert grant.created_by == world.alice and grant.member_limit == 2
    assert grant.windows == [WINDOW] and list(grant.flavors.all()) == [catalog.small]
    event = AuditEvent.objects.get(action="grant.create")
    assert event.actor == world.alice and event.tenant == world.class_a
    assert event.data == {"flavors": ["small"]}


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"flavors": []}, "flavors"),
        ({"windows": [{"day": 1, "start": "16:00", "end": "14:00"}]}, "windows"),
        ({"member_limit": 0}, "member_limit"),
        ({"created_by": None}, "created_by"),
    ],
)
def test_a_bad_grant_names_the_field_and_creates_nothing(
    world, catalog, tensorboard, fields, field
) -> None:
    values = {"flavors": [catalog.small], **fields}
    with pytest.raises(ValidationError) as raised:
        grants.create_grant(actor=world.alice, template=tensorboard, tenant=world.class_a, **values)
    assert field in raised.value.message_dict
    assert not Grant.objects.filter(template=tensorboard).exists()
    assert not AuditEvent.objects.filter(action="grant.create").exists()


def test_a_flavor_outside_the_template_is_refused(world, catalog, tensorboard) -> None:
    with pytest.raises(ValidationError) as raised:
        grants.create_grant(
            actor=world.alice,
            template=tensorboard,
            tenant=world.class_a,
            flavors=[catalog.small, catalog.gpu],
        )
    assert raised.value.message_dict == {"flavors": ["not allowed by TensorBoard: gpu"]}


def test_a_department_is_not_granted_to(world, catalog) -> None:
    with pytest.raises(ValidationError) as raised:
        grants.create_grant(
            actor=world.dean, template=catalog.jupyter, tenant=world.dept, flavors=[catalog.small]
        )
    assert "tenant" in raised.value.message_dict


def test_a_bad_update_changes_nothing(world, catalog) -> None:
    grant = catalog.grant
    with pytest.raises(ValidationError):
        grants.update_grant(
            actor=world.alice, grant=grant, member_limit=9, windows=[{**WINDOW, "day": 9}]
        )
    grant.refresh_from_db()
    assert grant.member_limit == 3 and grant.windows == []
    assert not AuditEvent.objects.filter(action="grant.update").exists()


def test_outsiders_and_students_change_no_grant_of_class_a(world, catalog, tensorboard) -> None:
    create = {"template": tensorboard, "tenant": world.class_a, "flavors": [catalog.small]}
    with pytest.raises(ValidationError) as raised:  # charlie cannot even see class A
        grants.create_grant(actor=world.charlie, **create)
    assert "tenant" in raised.value.message_dict
    with pytest.raises(PermissionDenied):  # bob sees it, but does not manage it
        grants.create_grant(actor=world.bob, **create)
    for actor in (world.charlie, world.bob):
        with pytest.raises((ValidationError, PermissionDenied)):
            grants.update_grant(actor=actor, grant=catalog.grant, member_limit=9)
        with pytest.raises((ValidationError, PermissionDenied)):
            grants.delete_grant(actor=actor, grant=catalog.grant)
    catalog.grant.refresh_from_db()
    assert catalog.grant.member_limit == 3
    assert list(Grant.objects.all()) == [catalog.grant]
    assert not AuditEvent.objects.filter(action__startswith="grant.").exists()


def test_moving_a_grant_needs_the_right_to_manage_both_classes(world, catalog) -> None:
    with pytest.raises(ValidationError) as raised:
        grants.update_grant(actor=world.alice, grant=catalog.grant, tenant=world.class_b)
    assert "tenant" in raised.value.message_dict
    grants.update_grant(actor=world.dean, grant=catalog.grant, tenant=world.class_b)
    assert Grant.objects.get().tenant == world.class_b
    assert trace("grant.update") == [("dean", "dl-201")]


def test_only_admins_set_a_grants_priority(world, catalog) -> None:
    exam = PriorityClass.objects.create(name="exam", value=1000)
    with pytest.raises(PermissionDenied):
        grants.update_grant(actor=world.alice, grant=catalog.grant, priority_class=exam)
    grants.update_grant(actor=world.dean, grant=catalog.grant, priority_class=exam)
    assert Grant.objects.get().priority_class == exam


def test_the_api_and_the_grant_form_write_the_same_grant_and_audit_row(
    world, catalog, tensorboard, api, client
) -> None:
    body = {
        "template": "tensorboard",
        "tenant": "ml-101",
        "flavors": ["small"],
        "member_limit": 2,
        "max_duration_minutes": 120,
        "idle_timeout_minutes": 30,
        "max_extensions": 1,
        "windows": [WINDOW],
    }
    assert api(world.alice).post("/api/v1/grants/", body, format="json").status_code == 201
    columns = ("template", "tenant", "member_limit", "max_duration_minutes", "windows")
    from_api = Grant.objects.filter(template=tensorboard).values(*columns, "created_by").get()
    api_trace = trace("grant.create")
    Grant.objects.filter(template=tensorboard).delete()
    AuditEvent.objects.filter(action="grant.create").delete()

    client.force_login(world.alice)
    form = {
        **{k: v for k, v in body.items() if k not in ("tenant", "windows")},
        "expires_on": "",
        "windows-TOTAL_FORMS": 1,
        "windows-INITIAL_FORMS": 0,
        "windows-0-day": "1",
        "windows-0-start": "14:00",
        "windows-0-end": "16:00",
    }
    assert client.post("/teaching/ml-101/grants/new/", form).status_code == 302
    from_page = Grant.objects.filter(template=tensorboard).values(*columns, "created_by").get()
    assert from_page == from_api and from_page["created_by"] == world.alice.pk
    assert trace("grant.create") == api_trace == [("alice", "ml-101")]


def test_the_api_and_the_form_refuse_the_same_bad_grant_with_the_same_words(
    world, catalog, tensorboard, api, client
) -> None:
    body = {"template": "tensorboard", "tenant": "ml-101", "flavors": ["small", "gpu"]}
    response = api(world.alice).post("/api/v1/grants/", body, format="json")
    assert response.status_code == 400
    message = response.json()["flavors"][0]
    client.force_login(world.alice)
    form = {
        "template": "tensorboard",
        "flavors": ["small", "gpu"],
        "member_limit": 1,
        "max_duration_minutes": 120,
        "idle_timeout_minutes": 30,
        "max_extensions": 1,
        "windows-TOTAL_FORMS": 0,
        "windows-INITIAL_FORMS": 0,
    }
    page = client.post("/teaching/ml-101/grants/new/", form)
    assert page.status_code == 200 and message in page.content.decode()
    assert not Grant.objects.filter(template=tensorboard).exists()


def test_deleting_through_the_api_or_the_page_writes_one_audit_row(
    world, catalog, api, client
) -> None:
    assert api(world.alice).delete(f"/api/v1/grants/{catalog.grant.pk}/").status_code == 204
    assert trace("grant.delete") == [("alice", "ml-101")]
    grant = grants.create_grant(
        actor=world.alice, template=catalog.jupyter, tenant=world.class_a, flavors=[catalog.small]
    )
    client.force_login(world.alice)
    assert client.post(f"/teaching/grants/{grant.pk}/delete/").status_code == 302
    assert not Grant.objects.exists()
    assert trace("grant.delete") == [("alice", "ml-101")] * 2


def test_a_student_sees_the_grants_of_her_classes_only(world, catalog) -> None:
    assert list(Grant.objects.visible_to(world.bob)) == [catalog.grant]
    assert list(Grant.objects.visible_to(world.alice)) == [catalog.grant]
    assert list(Grant.objects.visible_to(world.dean)) == [catalog.grant]
    assert not Grant.objects.visible_to(world.charlie).exists()
