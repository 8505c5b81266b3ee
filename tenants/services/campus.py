"""Campus sign-in's one way into Quanta: every provider (OIDC, LDAP, CAS) maps what the
campus says about a person to a :class:`CampusIdentity`, and :func:`provision_campus_user`
matches or creates the account from it, the same way for all of them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction

from core.audit import record
from tenants.choices import Role
from tenants.models import Membership, Tenant
from tenants.services.members import set_membership

User = get_user_model()

CAMPUS_SOURCES = ("oidc", "ldap", "cas")


@dataclass(frozen=True)
class CampusIdentity:
    """What a campus provider vouches for. Empty strings mean "not given": nothing is
    overwritten with them. ``role`` is None when no role rule is configured."""

    source: str
    username: str
    email: str = ""
    display_name: str = ""
    student_number: str = ""
    role: str | None = None


class LocalAccountRefused(Exception):
    """The username belongs to a local account (a superuser or one with a password)."""

    def __init__(self, username: str) -> None:
        super().__init__(f"campus sign-in refused for {username}: it is a local account")
        self.username = username


def campus_username(value: Any) -> str:
    return str(value or "").strip().lower()


def campus_role(values: Iterable[Any] | None) -> str | None:
    """The role rule: any value of the role attribute listed in ``CAMPUS_TEACHER_VALUES``
    (compared without case) makes a teacher, anything else a student; None when the
    provider has no role attribute configured (``values`` is None)."""
    if values is None:
        return None
    teacher = {v.strip().lower() for v in settings.CAMPUS_TEACHER_VALUES}
    if any(str(value).strip().lower() in teacher for value in values):
        return Role.TEACHER
    return Role.STUDENT


def first(value: Any) -> str:
    """One attribute value as text: the first of a list, '' for nothing."""
    if isinstance(value, list | tuple):
        value = value[0] if value else ""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value or "").strip()


def many(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return [first(v) for v in value]
    return [first(value)]


@transaction.atomic
def provision_campus_user(identity: CampusIdentity) -> Any:
    """Match the account by username (never by e-mail), or create it without a password;
    copy e-mail, display name and student number where given; apply the role rule.

    Raises :class:`LocalAccountRefused` for a superuser or an account with a usable
    password: a directory entry named ``admin`` must not take over the local ``admin``.
    The caller still checks ``is_active``.
    """
    username = campus_username(identity.username)
    if not username:
        raise ValueError("a campus identity needs a username")
    user = User.objects.select_for_update().filter(username=username).first()
    if user is None:
        try:
            with transaction.atomic():
                user = User.objects.create_user(username=username, email=identity.email)
        except IntegrityError:  # the same person signing in twice at once
            user = User.objects.select_for_update().get(username=username)
        else:
            record("user.create", actor=user, target=user, source=identity.source)
    if user.is_superuser or user.has_usable_password():
        raise LocalAccountRefused(username)
    changed = []
    for name, value in (
        ("email", identity.email),
        ("display_name", identity.display_name),
        ("student_number", identity.student_number[:32]),
    ):
        if value and getattr(user, name) != value:
            setattr(user, name, value)
            changed.append(name)
    if changed:
        user.save(update_fields=changed)
    _apply_role(user, identity)
    return user


def _apply_role(user: Any, identity: CampusIdentity) -> None:
    """The mapped role becomes a membership of ``CAMPUS_ROLE_TENANT`` when the person has
    none there yet; a membership that exists (set by an admin, or at an earlier sign-in)
    is left as it is, so the directory never overrides a decision made in Quanta."""
    slug = settings.CAMPUS_ROLE_TENANT
    if not identity.role or not slug:
        return
    tenant = Tenant.objects.filter(slug__iexact=slug).first()
    if tenant is None or Membership.objects.filter(user=user, tenant=tenant).exists():
        return
    set_membership(actor=user, tenant=tenant, user=user, role=identity.role)
