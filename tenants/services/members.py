"""Memberships: who has which role on a tenant."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from core.audit import record
from tenants.choices import Role
from tenants.models import Membership, Tenant


@transaction.atomic
def set_membership(*, actor: Any, tenant: Tenant, user: Any, role: str) -> Membership:
    """Give ``user`` the role on ``tenant`` (creating or changing the membership)."""
    if role not in Role.values:
        raise ValidationError(
            {
                "role": _("unknown role %(role)r; use one of %(roles)s")
                % {"role": role, "roles": ", ".join(Role.values)}
            }
        )
    membership, created = Membership.objects.select_for_update().get_or_create(
        user=user, tenant=tenant, defaults={"role": role}
    )
    if not created and membership.role == role:
        return membership
    old = None if created else membership.role
    if not created:
        membership.role = role
        membership.save(update_fields=["role"])
    record(
        "membership.set",
        actor=actor,
        target=membership,
        tenant=tenant,
        user=user.username,
        role=role,
        old_role=old,
    )
    _forget_access(user)
    return membership


@transaction.atomic
def remove_membership(*, actor: Any, membership: Membership) -> None:
    record(
        "membership.remove",
        actor=actor,
        target=membership,
        tenant=membership.tenant,
        user=membership.user.username,
        role=membership.role,
    )
    _forget_access(membership.user)
    membership.delete()


def _forget_access(user: Any) -> None:
    if hasattr(user, "_quanta_access"):
        del user._quanta_access
