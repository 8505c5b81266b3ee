"""Who sees and acts on which workloads (grants: ``Grant.objects.visible_to``)."""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from tenants.choices import MANAGING_ROLES
from tenants.permissions import Access
from workloads.models import Workload


def visible_workloads(user: Any) -> Q:
    """Your own, and those of the tenants you manage (teachers see their classes')."""
    access = Access.of(user)
    if access.is_superuser:
        return Q()
    return Q(owner=user) | access.tenant_filter(MANAGING_ROLES, prefix="tenant__")


def can_control(user: Any, workload: Workload) -> bool:
    """Stop it, read its logs, open it: the owner and the staff of its class."""
    return workload.owner_id == user.pk or Access.of(user).can_manage(workload.tenant)
