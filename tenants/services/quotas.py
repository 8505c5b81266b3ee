"""The quota ledger: limits set by admins, and what admission charges to a tenant chain and
its member (``reserve``) and gives back when a workload ends (``release``).

The arithmetic is pure and lives in ``tenants.quota``; this module reads and locks the rows."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import F
from django.utils.translation import gettext as _

from core.audit import record
from tenants import quota as quota_math
from tenants.models import MemberUsage, Quota, Tenant
from tenants.permissions import Access

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


@dataclass
class QuotaUpdate:
    quota: Quota
    over_use: list[str]


@transaction.atomic
def set_quota(*, actor: Any, tenant: Tenant, **limits: Any) -> QuotaUpdate:
    """Change limits. A limit below current use is accepted and reported as over-use: running
    work is never cut off by a quota change, new work waits until use drops.

    Limits are set from above (``Access.can_set_quota``): by an admin of a tenant above this
    one, the school's by a superuser. The API and the console both come through here.
    """
    if not Access.of(actor).can_set_quota(tenant):
        raise PermissionDenied(
            _("The limits of %(name)s are set by the admins of the tenants above it.")
            % {"name": tenant.name}
        )
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
                # The kind's value, not its label: refusals become reasons, kept in English
                # whatever language the request came in (reasons.py translates them).
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


class QuotaSnapshot:
    """The quota chains of many members at once, read without locks in a few queries: what a
    scheduling session checks its whole line against (``quota_snapshot``).

    ``charge`` adds a request in memory only (the session's plan: what it is about to start
    counts against what comes after it in the line); ``reserve`` charges the rows for real.
    """

    def __init__(self, quotas: dict[int, Quota], usage: dict[tuple[int, int], MemberUsage]):
        self._quotas = quotas
        self._usage = usage

    def _chain(self, tenant: Tenant, user_id: int | None) -> tuple[list[Quota], dict[int, Any]]:
        ids = tenant.ancestor_ids
        usage: dict[int, MemberUsage] = {}
        if user_id is not None:
            for tenant_id in ids:
                key = (tenant_id, user_id)
                if key not in self._usage:  # a missing row is zero use
                    self._usage[key] = MemberUsage(tenant_id=tenant_id, user_id=user_id)
                usage[tenant_id] = self._usage[key]
        return [self._quotas[i] for i in ids], usage

    def check(
        self, tenant: Tenant, user_id: int | None, request: quota_math.Request
    ) -> quota_math.Refusal | None:
        """What ``check_quota`` would say, from the snapshot and the charges made to it."""
        quotas, usage = self._chain(tenant, user_id)
        return quota_math.check(request, _levels(quotas, usage))

    def charge(self, tenant: Tenant, user_id: int | None, request: quota_math.Request) -> None:
        quotas, usage = self._chain(tenant, user_id)
        for q in quotas:
            q.used_gpus += request.gpus
            q.used_gpu_memory_mib += request.gpu_memory_mib
            q.used_cpu_cores += request.cpu_cores
            q.used_memory_mib += request.memory_mib
            q.used_environments += request.environments
            q.used_jobs += request.jobs
        for u in usage.values():
            u.used_gpus += request.gpus
            u.used_environments += request.environments
            u.used_jobs += request.jobs


USERS_PER_QUERY = 500


def quota_snapshot(members: Iterable[tuple[Tenant, int | None]]) -> QuotaSnapshot:
    """The quota chains of every (tenant, user id) in ``members``: one query for the quota rows
    of all their tenants and ancestors, one per 500 members for their usage rows. No locks and
    no writes (a tenant without a quota row is unlimited, as ``reserve`` will create it)."""
    members = list(members)
    ids = sorted({i for tenant, _user in members for i in tenant.ancestor_ids})
    quotas = {
        q.tenant_id: q for q in Quota.objects.filter(tenant_id__in=ids).select_related("tenant")
    }
    missing = [i for i in ids if i not in quotas]
    for tenant in Tenant.objects.filter(pk__in=missing) if missing else ():
        quotas[tenant.pk] = Quota(tenant=tenant)
    users = sorted({user for _tenant, user in members if user is not None})
    usage: dict[tuple[int, int], MemberUsage] = {}
    for start in range(0, len(users), USERS_PER_QUERY):
        for row in MemberUsage.objects.filter(
            tenant_id__in=ids, user_id__in=users[start : start + USERS_PER_QUERY]
        ):
            usage[(row.tenant_id, row.user_id)] = row
    return QuotaSnapshot(quotas, usage)


def lock_chains(tenants: Iterable[Tenant]) -> None:
    """Lock the quota rows of every chain a commit is about to charge, all at once and in one
    global order (by path, so root-first): two commits sharing any tenant queue on it instead
    of each holding a part of what the other needs. ``reserve`` then finds them held."""
    ids = sorted({i for tenant in tenants for i in tenant.ancestor_ids})
    if ids:
        list(
            Quota.objects.select_for_update(of=("self",))
            .filter(tenant_id__in=ids)
            .order_by("tenant__path")
            .values_list("pk", flat=True)
        )
