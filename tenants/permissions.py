"""Who may see and change what, derived from memberships and django-guardian grants.

A role on a tenant applies to its whole subtree: the admin of a department administers its
classes; a teacher of a class manages that class. Besides roles, django-guardian object
permissions delegate a tenant to someone without a membership (for example a TA borrowed
from another department): ``tenants.manage_tenant`` acts like the teacher role on the subtree,
``tenants.view_tenant`` lets an auditor see it.

Every check goes through :class:`Access`, built once per request and cached on the user.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

from django.db.models import Q
from guardian.shortcuts import get_objects_for_user

from tenants.choices import ADMIN_ROLES, MANAGING_ROLES, Role
from tenants.models import Tenant

# Stronger roles first; a person with two roles on a chain acts with the stronger one.
ROLE_RANK = {Role.ADMIN: 4, Role.TEACHER: 3, Role.TA: 2, Role.STUDENT: 1}
VIEWER = "viewer"  # guardian's view_tenant: sees, changes nothing


@dataclass
class Access:
    """What one user may do: roles by tenant path, from memberships and guardian."""

    is_superuser: bool
    user_id: int | None
    roles: dict[str, str] = field(default_factory=dict)  # tenant path -> role

    @classmethod
    def of(cls, user: Any) -> Access:
        cached = getattr(user, "_quanta_access", None)
        if cached is not None:
            return cached
        if not getattr(user, "is_authenticated", False) or not user.is_active:
            access = cls(is_superuser=False, user_id=None)
        else:
            access = cls(is_superuser=user.is_superuser, user_id=user.pk)
            for path, role in user.memberships.values_list("tenant__path", "role"):
                access._grant(path, role)
            for perm, role in (("manage_tenant", Role.TEACHER), ("view_tenant", VIEWER)):
                granted = get_objects_for_user(
                    user,
                    f"tenants.{perm}",
                    klass=Tenant,
                    accept_global_perms=False,
                    with_superuser=False,
                ).values_list("path", flat=True)
                for path in granted:
                    access._grant(path, role)
            user._quanta_access = access
        return access

    def _grant(self, path: str, role: str) -> None:
        if _rank(role) > _rank(self.roles.get(path)):
            self.roles[path] = role

    # -- single tenant -----------------------------------------------------------------------

    def role_on(self, tenant: Tenant) -> str | None:
        """The strongest role that applies to ``tenant`` (granted on it or an ancestor)."""
        best: str | None = None
        for path, role in self.roles.items():
            if tenant.path.startswith(path) and _rank(role) > _rank(best):
                best = role
        return best

    def can_view(self, tenant: Tenant) -> bool:
        if self.is_superuser or self.role_on(tenant) is not None:
            return True
        # Members see the names of the tenants above them (quota messages name them).
        return any(path.startswith(tenant.path) for path in self.roles)

    def can_manage(self, tenant: Tenant) -> bool:
        """Members, roster, grants and sessions of the subtree (admin, teacher, TA)."""
        return self.is_superuser or self.role_on(tenant) in MANAGING_ROLES

    def can_administer(self, tenant: Tenant) -> bool:
        """The tree itself and quotas (admin)."""
        return self.is_superuser or self.role_on(tenant) in ADMIN_ROLES

    def can_assign_role(self, tenant: Tenant, role: str) -> bool:
        """Teachers and TAs add students and TAs; only admins make teachers and admins."""
        mine = self.role_on(tenant)
        if self.is_superuser or mine in ADMIN_ROLES:
            return True
        if mine == Role.TEACHER:
            return role in (Role.STUDENT, Role.TA)
        if mine == Role.TA:
            return role == Role.STUDENT
        return False

    def can_set_quota(self, tenant: Tenant) -> bool:
        """A tenant's limits are set from above: by the admins of a tenant above it. The top
        of the tree (the school) has nothing above it, so only a superuser sets its limits;
        the admin of a department cannot raise the department's own quota."""
        if self.is_superuser:
            return True
        if tenant.parent_id is None:
            return False
        above = tenant.path[: tenant.path.rstrip("/").rfind("/") + 1]
        return any(
            above.startswith(path) and role in ADMIN_ROLES for path, role in self.roles.items()
        )

    def manages_anything(self) -> bool:
        return self.is_superuser or any(r in MANAGING_ROLES for r in self.roles.values())

    def administers_anything(self) -> bool:
        return self.is_superuser or any(r in ADMIN_ROLES for r in self.roles.values())

    # -- querysets ---------------------------------------------------------------------------

    def tenant_filter(self, roles: tuple[str, ...] | None = None, prefix: str = "") -> Q:
        """Q over a model with ``{prefix}path`` matching the subtrees where a role applies.

        ``roles=None`` means any role, viewers included. Superusers match everything: with
        a condition that is always true rather than an empty ``Q()``, which an ``|`` would
        drop (``Q() | Q(user=me)`` is just ``Q(user=me)``).
        """
        if self.is_superuser:
            return ~Q(pk__in=[])
        paths = [p for p, r in self.roles.items() if roles is None or r in roles]
        if not paths:
            return Q(pk__in=[])
        return reduce(operator.or_, (Q(**{f"{prefix}path__startswith": p}) for p in paths))

    def visible_tenants(self) -> Q:
        """Tenants in a subtree where the user has any role, and the ancestors of those."""
        if self.is_superuser:
            return Q()
        ancestors = {int(part) for path in self.roles for part in path.strip("/").split("/")}
        return self.tenant_filter() | Q(pk__in=ancestors)

    def managed_tenants(self) -> Q:
        return self.tenant_filter(MANAGING_ROLES)

    def administered_tenants(self, prefix: str = "") -> Q:
        return self.tenant_filter(ADMIN_ROLES, prefix)


def administers_anything(access: Access) -> bool:
    """An admin somewhere (or a superuser): the console's tenant tree and audit log open."""
    return access.administers_anything()


def _rank(role: str | None) -> float:
    if role is None:
        return 0
    if role == VIEWER:
        return 0.5
    return ROLE_RANK[Role(role)]
