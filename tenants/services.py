"""Every change to tenants, memberships, quotas, users and tokens goes through here.

Each function runs in one transaction, takes the acting user as ``actor`` and writes an
audit row. Errors a person can fix raise ``ValidationError`` naming the field; the API turns
them into 400 responses and forms into form errors.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext as _

from portal.audit import record
from tenants import quota as quota_math
from tenants import roster
from tenants.choices import ALLOWED_PARENT_KINDS, Role, TenantKind
from tenants.models import ApiToken, Membership, MemberUsage, Quota, Tenant
from tenants.permissions import Access

User = get_user_model()

QUOTA_LIMIT_FIELDS = (
    "gpus",
    "gpu_memory_mib",
    "cpu_cores",
    "memory_mib",
    "environments",
    "jobs",
    "gpu_hours_per_term",
    "member_gpus",
    "member_environments",
    "member_jobs",
    "member_gpu_hours_per_term",
)
TENANT_FIELDS = ("name", "slug", "term_start", "term_end", "is_active")


# --- Tenant tree -------------------------------------------------------------------------------


def _check_parent(kind: str, parent: Tenant | None) -> None:
    allowed = ALLOWED_PARENT_KINDS[TenantKind(kind)]
    parent_kind = parent.kind if parent else None
    if parent_kind not in allowed:
        if parent is None:
            raise ValidationError(
                {"parent": _("a %(kind)s needs a parent") % {"kind": _(str(kind))}}
            )
        raise ValidationError(
            {
                "parent": _("a %(kind)s cannot be placed under a %(parent)s")
                % {"kind": _(str(kind)), "parent": _(str(parent.kind))}
            }
        )


def _check_term(term_start: dt.date | None, term_end: dt.date | None) -> None:
    if term_start and term_end and term_end < term_start:
        raise ValidationError({"term_end": _("the term cannot end before it starts")})


def _check_slug_free(slug: str, exclude: Tenant | None = None) -> None:
    taken = Tenant.objects.filter(slug=slug)
    if exclude is not None:
        taken = taken.exclude(pk=exclude.pk)
    if taken.exists():
        raise ValidationError(
            {"slug": _("the slug %(slug)r is already used by another tenant") % {"slug": slug}}
        )


@transaction.atomic
def create_tenant(
    *,
    actor: Any,
    kind: str,
    name: str,
    slug: str,
    parent: Tenant | None = None,
    term_start: dt.date | None = None,
    term_end: dt.date | None = None,
) -> Tenant:
    _check_parent(kind, parent)
    _check_term(term_start, term_end)
    _check_slug_free(slug)
    tenant = Tenant.objects.create(
        kind=kind, name=name, slug=slug, parent=parent, term_start=term_start, term_end=term_end
    )
    tenant.path = f"{parent.path if parent else '/'}{tenant.pk}/"
    tenant.save(update_fields=["path"])
    Quota.objects.create(tenant=tenant)
    record(
        "tenant.create",
        actor=actor,
        target=tenant,
        tenant=tenant,
        kind=kind,
        parent=parent.slug if parent else None,
    )
    return tenant


@transaction.atomic
def update_tenant(*, actor: Any, tenant: Tenant, **changes: Any) -> Tenant:
    unknown = set(changes) - set(TENANT_FIELDS)
    if unknown:
        raise ValidationError({name: _("cannot be changed here") for name in unknown})
    if "slug" in changes:
        _check_slug_free(changes["slug"], exclude=tenant)
    _check_term(
        changes.get("term_start", tenant.term_start), changes.get("term_end", tenant.term_end)
    )
    before = {name: getattr(tenant, name) for name in changes}
    for name, value in changes.items():
        setattr(tenant, name, value)
    tenant.save(update_fields=list(changes))
    record(
        "tenant.update",
        actor=actor,
        target=tenant,
        tenant=tenant,
        changes={k: [before[k], v] for k, v in changes.items() if before[k] != v},
    )
    return tenant


@transaction.atomic
def move_tenant(*, actor: Any, tenant: Tenant, parent: Tenant) -> Tenant:
    """Put ``tenant`` (and its subtree) under ``parent``; refuses cycles."""
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    parent = Tenant.objects.get(pk=parent.pk)
    if parent.path.startswith(tenant.path):
        raise ValidationError(
            {
                "parent": _(
                    "%(parent)s is %(tenant)s itself or inside it; "
                    "a tenant cannot move under its own descendant"
                )
                % {"parent": parent.name, "tenant": tenant.name}
            }
        )
    _check_parent(tenant.kind, parent)
    old_path, old_parent = tenant.path, tenant.parent
    new_path = f"{parent.path}{tenant.pk}/"
    subtree = list(Tenant.objects.select_for_update().filter(path__startswith=old_path))
    for node in subtree:
        node.path = new_path + node.path[len(old_path) :]
        if node.pk == tenant.pk:
            node.parent = parent
    Tenant.objects.bulk_update(subtree, ["path", "parent"])
    tenant.refresh_from_db()
    record(
        "tenant.move",
        actor=actor,
        target=tenant,
        tenant=tenant,
        old_parent=old_parent.slug if old_parent else None,
        new_parent=parent.slug,
    )
    return tenant


@transaction.atomic
def delete_tenant(*, actor: Any, tenant: Tenant) -> None:
    if tenant.children.exists():
        raise ValidationError(
            {"tenant": _("%(name)s still has tenants under it") % {"name": tenant.name}}
        )
    quota = Quota.objects.filter(tenant=tenant).first()
    if quota and (quota.used_environments or quota.used_jobs):
        raise ValidationError(
            {"tenant": _("%(name)s still has running workloads") % {"name": tenant.name}}
        )
    parent = tenant.parent
    record("tenant.delete", actor=actor, target=tenant, tenant=parent, slug=tenant.slug)
    tenant.delete()


@transaction.atomic
def close_ended_terms(*, actor: Any = None, today: dt.date | None = None) -> list[Tenant]:
    """Deactivate classes whose term has ended: they grant nothing any more."""
    today = today or timezone.localdate()
    ended = list(
        Tenant.objects.select_for_update().filter(
            kind=TenantKind.CLASS, is_active=True, term_end__lt=today
        )
    )
    for tenant in ended:
        tenant.is_active = False
        tenant.save(update_fields=["is_active"])
        record(
            "tenant.term_closed",
            actor=actor,
            target=tenant,
            tenant=tenant,
            term_end=tenant.term_end,
        )
    return ended


# --- Memberships -----------------------------------------------------------------------------


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


# --- Quotas ------------------------------------------------------------------------------------


@dataclass
class QuotaUpdate:
    quota: Quota
    over_use: list[str]


@transaction.atomic
def set_quota(*, actor: Any, tenant: Tenant, **limits: Any) -> QuotaUpdate:
    """Change limits. A limit below current use is accepted and reported as over-use: running
    work is never cut off by a quota change, new work waits until use drops."""
    unknown = set(limits) - set(QUOTA_LIMIT_FIELDS)
    if unknown:
        raise ValidationError({name: _("is not a quota limit") for name in sorted(unknown)})
    for name, value in limits.items():
        if value is not None and Decimal(value) < 0:
            raise ValidationError({name: _("cannot be negative")})
    quota, _created = Quota.objects.select_for_update().get_or_create(tenant=tenant)
    before = {name: getattr(quota, name) for name in limits}
    for name, value in limits.items():
        setattr(quota, name, value)
    quota.save()
    quota.refresh_from_db()
    over = quota_over_use(quota)
    record(
        "quota.set",
        actor=actor,
        target=quota,
        tenant=tenant,
        changes={k: [before[k], v] for k, v in limits.items() if before[k] != v},
        over_use=over,
    )
    return QuotaUpdate(quota, over)


def quota_over_use(quota: Quota) -> list[str]:
    limits = {name: getattr(quota, name) for name in quota_math.RESOURCES}
    used = {name: getattr(quota, f"used_{name}") for name in quota_math.RESOURCES}
    over = quota_math.over_use(limits, used)
    if quota.gpu_hours_per_term is not None and quota.used_gpu_hours > quota.gpu_hours_per_term:
        over.append("gpu_hours_per_term")
    return over


class QuotaExceeded(Exception):
    def __init__(self, refusal: quota_math.Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


def _chain(tenant: Tenant, user: Any, *, lock: bool) -> tuple[list[Quota], dict[int, MemberUsage]]:
    """Quotas from the root down to ``tenant`` (locked in that order: no deadlocks) and the
    member's usage rows at each level."""
    ids = tenant.ancestor_ids
    quotas = Quota.objects.filter(tenant_id__in=ids).select_related("tenant")
    if lock:
        quotas = quotas.select_for_update(of=("self",)).order_by("tenant__path")
    by_tenant = {q.tenant_id: q for q in quotas}
    missing = [i for i in ids if i not in by_tenant]
    for tenant_id in missing:
        by_tenant[tenant_id], _created = Quota.objects.get_or_create(tenant_id=tenant_id)
    usage: dict[int, MemberUsage] = {}
    if user is not None:
        if lock:  # charging: every level needs a row to update
            for tenant_id in ids:
                usage[tenant_id], _created = MemberUsage.objects.get_or_create(
                    tenant_id=tenant_id, user=user
                )
        else:  # reading: a missing row is zero use
            found = {
                u.tenant_id: u for u in MemberUsage.objects.filter(tenant_id__in=ids, user=user)
            }
            usage = {i: found.get(i) or MemberUsage(tenant_id=i, user=user) for i in ids}
    return [by_tenant[i] for i in ids], usage


def _levels(quotas: list[Quota], usage: dict[int, MemberUsage]) -> list[quota_math.Level]:
    levels = []
    for q in quotas:
        member = usage.get(q.tenant_id)
        levels.append(
            quota_math.Level(
                tenant=q.tenant.name,
                # The kind's value, not its label: a refusal's reason carries the value as a
                # word parameter (tenants/reasons.py), rendered in the reader's language.
                kind=str(q.tenant.kind),
                limits={name: getattr(q, name) for name in quota_math.RESOURCES},
                used={name: getattr(q, f"used_{name}") for name in quota_math.RESOURCES},
                gpu_hours_limit=q.gpu_hours_per_term,
                gpu_hours_used=q.used_gpu_hours,
                member_limits={name: getattr(q, name) for name in quota_math.MEMBER_RESOURCES},
                member_used={
                    "gpus": member.used_gpus,
                    "environments": member.used_environments,
                    "jobs": member.used_jobs,
                }
                if member
                else {},
                member_gpu_hours_limit=q.member_gpu_hours_per_term,
                member_gpu_hours_used=member.used_gpu_hours if member else 0,
            )
        )
    return levels


def check_quota(
    *, tenant: Tenant, user: Any, request: quota_math.Request
) -> quota_math.Refusal | None:
    """Would ``request`` fit now? (No locks: for showing, not for admitting.)"""
    quotas, usage = _chain(tenant, user, lock=False)
    return quota_math.check(request, _levels(quotas, usage))


def reserve(*, tenant: Tenant, user: Any, request: quota_math.Request) -> None:
    """Charge ``request`` to the tenant chain and the member, or raise ``QuotaExceeded``.

    Must run inside the caller's transaction (admission): the chain's quota rows stay locked
    until it commits, so concurrent launches cannot both take the last GPU.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("reserve() must run inside a transaction")
    quotas, usage = _chain(tenant, user, lock=True)
    refusal = quota_math.check(request, _levels(quotas, usage))
    if refusal is not None:
        raise QuotaExceeded(refusal)
    _apply(quotas, usage, request, sign=1)


def release(
    *, tenant: Tenant, user: Any, request: quota_math.Request, gpu_hours: Decimal = Decimal(0)
) -> None:
    """Give back what ``reserve`` charged (a workload ended) and add the GPU-hours it used."""
    with transaction.atomic():
        quotas, usage = _chain(tenant, user, lock=True)
        _apply(quotas, usage, request, sign=-1)
        if gpu_hours:
            Quota.objects.filter(pk__in=[q.pk for q in quotas]).update(
                used_gpu_hours=F("used_gpu_hours") + gpu_hours
            )
            MemberUsage.objects.filter(pk__in=[u.pk for u in usage.values()]).update(
                used_gpu_hours=F("used_gpu_hours") + gpu_hours
            )


def _apply(
    quotas: Iterable[Quota], usage: dict[int, MemberUsage], request: quota_math.Request, sign: int
) -> None:
    quota_ids = [q.pk for q in quotas]
    # F() updates: the counters change in the database, never from stale Python values.
    Quota.objects.filter(pk__in=quota_ids).update(
        used_gpus=F("used_gpus") + sign * request.gpus,
        used_gpu_memory_mib=F("used_gpu_memory_mib") + sign * request.gpu_memory_mib,
        used_cpu_cores=F("used_cpu_cores") + sign * request.cpu_cores,
        used_memory_mib=F("used_memory_mib") + sign * request.memory_mib,
        used_environments=F("used_environments") + sign * request.environments,
        used_jobs=F("used_jobs") + sign * request.jobs,
    )
    MemberUsage.objects.filter(pk__in=[u.pk for u in usage.values()]).update(
        used_gpus=F("used_gpus") + sign * request.gpus,
        used_environments=F("used_environments") + sign * request.environments,
        used_jobs=F("used_jobs") + sign * request.jobs,
    )


# --- Roster import -----------------------------------------------------------------------------


@dataclass
class RosterResult:
    created_users: list[str] = field(default_factory=list)
    created_memberships: list[str] = field(default_factory=list)
    changed_memberships: list[str] = field(default_factory=list)
    unchanged: int = 0


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
    slugs = {row.class_slug for row in rows}
    classes = {t.slug: t for t in Tenant.objects.filter(slug__in=slugs)}
    for row in rows:
        tenant = classes.get(row.class_slug)
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
                        tenant=classes[row.class_slug],
                        source="roster",
                    )
                existing[user.username] = user
            tenant = classes[row.class_slug]
            current = Membership.objects.filter(user=user, tenant=tenant).first()
            if current is not None and current.role == row.role:
                result.unchanged += 1
                continue
            set_membership(actor=actor, tenant=tenant, user=user, role=row.role)
            label = f"{user.username} → {tenant.slug} ({row.role})"
            (result.changed_memberships if current else result.created_memberships).append(label)
    return result


# --- Users and tokens --------------------------------------------------------------------------

PREFERENCE_FIELDS = ("display_name", "language", "time_zone")


@transaction.atomic
def update_preferences(*, actor: Any, **changes: Any) -> Any:
    """A person's own display name, language and time zone."""
    unknown = set(changes) - set(PREFERENCE_FIELDS)
    if unknown:
        raise ValidationError({name: _("cannot be changed here") for name in unknown})
    changed = {k: v for k, v in changes.items() if getattr(actor, k) != v}
    if changed:
        for name, value in changed.items():
            setattr(actor, name, value)
        actor.save(update_fields=list(changed))
        record("user.preferences", actor=actor, target=actor, changes=changed)
    return actor


TOKEN_PREFIX = "qnt_"


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@transaction.atomic
def create_api_token(
    *, actor: Any, name: str, expires_at: dt.datetime | None = None
) -> tuple[ApiToken, str]:
    """A new personal token for ``actor``; the secret is returned once and never stored."""
    name = name.strip()
    if not name:
        raise ValidationError({"name": _("give the token a name, e.g. 'laptop'")})
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": _("must be in the future")})
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=actor,
        name=name[:100],
        prefix=secret[: len(TOKEN_PREFIX) + 6],
        digest=hash_token(secret),
        expires_at=expires_at,
    )
    record("token.create", actor=actor, target=token, name=token.name)
    return token, secret


@transaction.atomic
def revoke_api_token(*, actor: Any, token: ApiToken) -> ApiToken:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        record("token.revoke", actor=actor, target=token, name=token.name)
    return token


def touch_api_token(token: ApiToken) -> None:
    """Record use, at most once per API_TOKEN_TOUCH_INTERVAL (no write on every request)."""
    now = timezone.now()
    interval = dt.timedelta(seconds=settings.API_TOKEN_TOUCH_INTERVAL)
    if token.last_used_at is None or now - token.last_used_at >= interval:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
