"""Roster import: users and memberships from a roster CSV, all rows or none.

Parsing is pure and lives in ``tenants.roster``; this module writes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models.functions import Lower
from django.utils.translation import gettext as _

from core.audit import record
from core.text import natural_sort_key
from tenants import roster
from tenants.choices import TenantKind
from tenants.models import Membership, Tenant
from tenants.permissions import Access
from tenants.services.members import set_membership

User = get_user_model()


@dataclass
class RosterResult:
    created_users: list[str] = field(default_factory=list)
    created_memberships: list[str] = field(default_factory=list)
    changed_memberships: list[str] = field(default_factory=list)
    unchanged: int = 0
    usernames: list[str] = field(default_factory=list)  # every account the roster names


class RosterRejected(Exception):
    def __init__(self, errors: list[roster.RowError]) -> None:
        super().__init__(_("%(n)s problem(s) in the roster") % {"n": len(errors)})
        self.errors = errors


def import_roster(*, actor: Any, data: bytes | str) -> RosterResult:
    """Create users and memberships from a roster CSV, all rows or none.

    Raises ``RosterRejected`` with every row's problems, or ``roster.RosterError`` when the
    file itself is unreadable. Re-importing the same file changes nothing.
    """
    rows, errors = roster.parse(data)
    access = Access.of(actor)
    # Class codes in any letter case: the page shows "ML-101" for the class ml-101.
    codes = {row.class_slug.lower() for row in rows}
    classes = {
        t.slug.lower(): t
        for t in Tenant.objects.annotate(code=Lower("slug")).filter(code__in=codes)
    }
    for row in rows:
        tenant = classes.get(row.class_slug.lower())
        if (
            tenant is None
            or not access.can_view(tenant)
            or tenant.kind not in (TenantKind.CLASS, TenantKind.PROJECT)
        ):
            errors.append(
                roster.RowError(
                    row.line,
                    "class",
                    _("no class %(slug)r that you manage") % {"slug": row.class_slug},
                )
            )
        elif not access.can_manage(tenant):
            errors.append(
                roster.RowError(
                    row.line,
                    "class",
                    _("you do not manage class %(slug)r") % {"slug": row.class_slug},
                )
            )
        elif not access.can_assign_role(tenant, row.role):
            errors.append(
                roster.RowError(
                    row.line,
                    "role",
                    _("you cannot make people %(role)s of this class") % {"role": row.role},
                )
            )
    existing = {
        u.username: u
        for u in User.objects.filter(username__in={row.student_number for row in rows})
    }
    for row in rows:
        user = existing.get(row.student_number)
        if user is not None and user.email and user.email.lower() != row.email:
            errors.append(
                roster.RowError(
                    row.line,
                    "email",
                    _("%(number)s already exists with another email address")
                    % {"number": row.student_number},
                )
            )
    if errors:
        raise RosterRejected(sorted(errors, key=lambda e: (e.line, e.column)))

    result = RosterResult()
    with transaction.atomic():
        for row in rows:
            user = existing.get(row.student_number)
            if user is None:
                try:
                    with transaction.atomic():
                        user = User.objects.create_user(
                            username=row.student_number,
                            email=row.email,
                            student_number=row.student_number,
                            display_name=row.name,
                        )
                except IntegrityError:  # imported concurrently by someone else
                    user = User.objects.get(username=row.student_number)
                else:
                    result.created_users.append(user.username)
                    record(
                        "user.create",
                        actor=actor,
                        target=user,
                        tenant=classes[row.class_slug.lower()],
                        source="roster",
                    )
                existing[user.username] = user
            tenant = classes[row.class_slug.lower()]
            current = Membership.objects.filter(user=user, tenant=tenant).first()
            if current is not None and current.role == row.role:
                result.unchanged += 1
                continue
            set_membership(actor=actor, tenant=tenant, user=user, role=row.role)
            label = f"{user.username} → {tenant.slug} ({row.role})"
            (result.changed_memberships if current else result.created_memberships).append(label)
    result.usernames = sorted({row.student_number for row in rows}, key=natural_sort_key)
    for names in (result.created_users, result.created_memberships, result.changed_memberships):
        names.sort(key=natural_sort_key)  # student2 before student10
    return result
