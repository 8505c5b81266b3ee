"""Service functions: the tree, memberships, quotas and their audit rows."""

import datetime as dt
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction

from core.models import AuditEvent
from tenants import services
from tenants.choices import Role, TenantKind
from tenants.models import MemberUsage, Tenant
from tenants.quota import Request


def test_a_new_tenant_knows_its_ancestors_and_gets_an_empty_quota(world) -> None:
    assert world.class_a.ancestor_ids == [world.school.pk, world.dept.pk, world.class_a.pk]
    assert world.class_a.quota.gpus is None
    event = AuditEvent.objects.filter(action="tenant.create", target_id=str(world.class_a.pk))
    assert event.get().actor == world.root


def test_a_duplicate_slug_is_refused_naming_the_field(world) -> None:
    with pytest.raises(ValidationError) as err:
        services.create_tenant(
            actor=world.root, kind=TenantKind.CLASS, name="Again", slug="ml-101", parent=world.dept
        )
    assert "already used" in err.value.message_dict["slug"][0]
    assert Tenant.objects.filter(slug="ml-101").count() == 1


def test_a_class_cannot_sit_under_a_class(world) -> None:
    with pytest.raises(ValidationError) as err:
        services.create_tenant(
            actor=world.root, kind=TenantKind.CLASS, name="Lab", slug="lab", parent=world.class_a
        )
    assert "cannot be placed under a class" in err.value.message_dict["parent"][0]


def test_a_term_cannot_end_before_it_starts(world) -> None:
    with pytest.raises(ValidationError) as err:
        services.update_tenant(
            actor=world.root,
            tenant=world.class_a,
            term_start=dt.date(2026, 9, 1),
            term_end=dt.date(2026, 8, 1),
        )
    assert "term_end" in err.value.message_dict


def test_moving_a_department_moves_its_classes(world) -> None:
    sub = services.create_tenant(
        actor=world.root, kind=TenantKind.DEPARTMENT, name="AI", slug="ai", parent=world.dept
    )
    lab = services.create_tenant(
        actor=world.root, kind=TenantKind.PROJECT, name="Lab", slug="lab", parent=sub
    )
    services.move_tenant(actor=world.root, tenant=sub, parent=world.other_dept)
    lab.refresh_from_db()
    assert lab.ancestor_ids == [world.school.pk, world.other_dept.pk, sub.pk, lab.pk]
    assert AuditEvent.objects.filter(action="tenant.move", target_id=str(sub.pk)).exists()


def test_moving_a_tenant_under_its_own_descendant_is_refused(world) -> None:
    sub = services.create_tenant(
        actor=world.root, kind=TenantKind.DEPARTMENT, name="AI", slug="ai", parent=world.dept
    )
    with pytest.raises(ValidationError) as err:
        services.move_tenant(actor=world.root, tenant=world.dept, parent=sub)
    assert "own descendant" in err.value.message_dict["parent"][0]
    world.dept.refresh_from_db()
    assert world.dept.parent == world.school


def test_a_role_change_is_audited_and_an_unknown_role_refused(world) -> None:
    services.set_membership(actor=world.root, tenant=world.class_a, user=world.bob, role=Role.TA)
    event = AuditEvent.objects.filter(action="membership.set").first()
    assert event.data["role"] == "ta" and event.data["old_role"] == "student"
    with pytest.raises(ValidationError) as err:
        services.set_membership(
            actor=world.root, tenant=world.class_a, user=world.bob, role="owner"
        )
    assert "unknown role" in err.value.message_dict["role"][0]


def test_a_quota_below_current_use_is_kept_and_flagged(world) -> None:
    world.quota(world.class_a, gpus=4)
    with transaction.atomic():
        services.reserve(tenant=world.class_a, user=world.bob, request=Request(gpus=Decimal(3)))
    update = services.set_quota(actor=world.root, tenant=world.class_a, gpus=Decimal(2))
    assert update.quota.gpus == 2 and update.quota.used_gpus == 3
    assert update.over_use == ["gpus"]


def test_a_negative_limit_is_refused(world) -> None:
    with pytest.raises(ValidationError) as err:
        services.set_quota(actor=world.root, tenant=world.class_a, gpus=Decimal(-1))
    assert "negative" in err.value.message_dict["gpus"][0]


def test_use_in_a_class_counts_against_its_department_and_school(world) -> None:
    world.quota(world.school, gpus=10)
    world.quota(world.dept, gpus=2)
    world.quota(world.class_b, gpus=4)
    with transaction.atomic():
        services.reserve(tenant=world.class_a, user=world.bob, request=Request(gpus=Decimal(2)))
    for tenant in (world.school, world.dept, world.class_a):
        tenant.quota.refresh_from_db()
        assert tenant.quota.used_gpus == 2
    with pytest.raises(services.QuotaExceeded) as err, transaction.atomic():
        services.reserve(tenant=world.class_b, user=world.charlie, request=Request(gpus=Decimal(1)))
    assert err.value.refusal.message == "department CS: 2 of 2 GPUs in use (asked for 1)"
    world.class_b.quota.refresh_from_db()
    assert world.class_b.quota.used_gpus == 0


def test_release_gives_back_what_reserve_charged(world) -> None:
    request = Request(gpus=Decimal("0.5"), environments=1, memory_mib=8192)
    with transaction.atomic():
        services.reserve(tenant=world.class_a, user=world.bob, request=request)
    services.release(tenant=world.class_a, user=world.bob, request=request)
    world.school.quota.refresh_from_db()
    assert (world.school.quota.used_gpus, world.school.quota.used_environments) == (0, 0)
    usage = MemberUsage.objects.get(tenant=world.class_a, user=world.bob)
    assert usage.used_environments == 0


def test_per_member_limits_stop_one_student_but_not_the_next(world) -> None:
    world.quota(world.class_a, environments=10, member_environments=1)
    env = Request(environments=1)
    with transaction.atomic():
        services.reserve(tenant=world.class_a, user=world.bob, request=env)
    refused = pytest.raises(services.QuotaExceeded, match="you use 1 of your 1 environments")
    with refused, transaction.atomic():
        services.reserve(tenant=world.class_a, user=world.bob, request=env)
    with transaction.atomic():
        services.reserve(tenant=world.class_a, user=world.alice, request=env)


@pytest.mark.django_db(transaction=True)
def test_reserve_refuses_to_run_outside_a_transaction(world) -> None:
    with pytest.raises(RuntimeError, match="inside a transaction"):
        services.reserve(tenant=world.class_a, user=world.bob, request=Request(jobs=1))


def test_classes_whose_term_ended_are_closed(world) -> None:
    services.update_tenant(
        actor=world.root,
        tenant=world.class_a,
        term_start=dt.date(2026, 2, 1),
        term_end=dt.date(2026, 6, 30),
    )
    closed = services.close_ended_terms(today=dt.date(2026, 7, 1))
    assert closed == [world.class_a]
    world.class_a.refresh_from_db()
    world.class_b.refresh_from_db()
    assert (world.class_a.is_active, world.class_b.is_active) == (False, True)
    assert services.close_ended_terms(today=dt.date(2026, 7, 1)) == []
