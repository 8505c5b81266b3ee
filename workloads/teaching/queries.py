"""What the teachers' pages show: the classes a person manages with their running sessions
and GPU-hours, a class's sessions and its roster. Reads only; a fixed number of queries for
any number of classes, sessions or students."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db.models import Count

from tenants.choices import MANAGING_ROLES, Role, TenantKind
from tenants.models import Membership, MemberUsage, Quota, Tenant
from tenants.permissions import ROLE_RANK, Access
from workloads import utilisation, windows
from workloads.choices import ACTIVE, HOLDING, State, WorkloadKind
from workloads.models import Grant, Workload

# A session holding a GPU that is less busy than this (or than its own GPU-aware culling
# threshold, where it has one) is listed as wasting it.
LOW_GPU_PERCENT = 10
LOW_GPU_MINUTES = 15  # over this many recent minutes

# Grants go to classes and projects; those are what a teacher's pages are about.
TEACHING_KINDS = (TenantKind.CLASS, TenantKind.PROJECT)


def held_gpu_hours(
    *,
    started_at: dt.datetime | None,
    charged: bool,
    quota_request: dict[str, Any],
    now: dt.datetime,
) -> Decimal:
    """GPU-hours a workload has used so far in its current run: what ending it will add to
    the member's and the class's ``used_gpu_hours`` (computed as ``lifecycle`` does)."""
    gpus = Decimal((quota_request or {}).get("gpus", "0"))
    if not charged or started_at is None or not gpus:
        return Decimal(0)
    return gpus * Decimal((now - started_at).total_seconds()) / 3600


def used_gpu_hours(tenant: Tenant) -> Decimal:
    try:
        return tenant.quota.used_gpu_hours
    except Quota.DoesNotExist:
        return Decimal(0)


def managed_classes(access: Access, *, now: dt.datetime) -> list[dict[str, Any]]:
    """The classes and projects ``access`` manages, each with its running environments and
    its GPU-hours (ended runs plus what the running ones hold so far)."""
    tenants = list(
        Tenant.objects.filter(access.managed_tenants(), kind__in=TEACHING_KINDS)
        .select_related("parent", "quota")
        .annotate(member_count=Count("memberships"))
        .order_by("-is_active", "name")
    )
    running: dict[int, int] = defaultdict(int)
    held: dict[int, Decimal] = defaultdict(Decimal)
    holding = Workload.objects.filter(
        access.tenant_filter(MANAGING_ROLES, prefix="tenant__"),
        tenant__kind__in=TEACHING_KINDS,
        state__in=HOLDING,
    ).values("tenant_id", "kind", "state", "started_at", "charged", "quota_request")
    for row in holding:
        if row["kind"] == WorkloadKind.NOTEBOOK and row["state"] == State.RUNNING:
            running[row["tenant_id"]] += 1
        held[row["tenant_id"]] += held_gpu_hours(
            started_at=row["started_at"],
            charged=row["charged"],
            quota_request=row["quota_request"],
            now=now,
        )
    return [
        {
            "tenant": t,
            "running": running[t.pk],
            "gpu_hours": used_gpu_hours(t) + held[t.pk],
        }
        for t in tenants
    ]


def _minutes(delta: dt.timedelta) -> int:
    return max(0, int(delta.total_seconds() // 60))


@dataclass
class Sessions:
    """A class's active workloads, and per member what they hold and how many run."""

    workloads: list[Workload]
    held: dict[int, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    running: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    low_gpu: list[Workload] = field(default_factory=list)  # holding a GPU, hardly using it


def class_sessions(tenant: Tenant, *, now: dt.datetime) -> Sessions:
    """Active workloads of ``tenant``, each with ``gpu_hours_now``, ``idle_minutes`` (running
    environments), ``minutes_left`` (before its deadline) and ``gpu_busy`` (its GPUs' mean
    utilisation over the last minutes; None without readings)."""
    sessions = Sessions(
        list(
            Workload.objects.filter(tenant=tenant, state__in=ACTIVE)
            .select_related("owner", "template", "flavor")
            .order_by("owner__sort_key", "created_at")  # student2 before student10
        )
    )
    for w in sessions.workloads:
        w.gpu_hours_now = held_gpu_hours(
            started_at=w.started_at, charged=w.charged, quota_request=w.quota_request, now=now
        )
        sessions.held[w.owner_id] += w.gpu_hours_now
        sessions.running[w.owner_id] += 1
        w.idle_minutes = w.minutes_left = None
        if w.state == State.RUNNING and w.kind == WorkloadKind.NOTEBOOK:
            w.idle_minutes = _minutes(now - (w.last_activity_at or w.started_at or w.created_at))
        if w.deadline_at and w.state == State.RUNNING:
            w.minutes_left = _minutes(w.deadline_at - now)
    busy = utilisation.recent_mean(sessions.workloads, LOW_GPU_MINUTES)
    for w in sessions.workloads:
        w.gpu_busy = busy.get(str(w.pk))
        holds_gpu = bool(w.flavor.gpus or w.flavor.gpu_milli)
        low = w.gpu_busy is not None and w.gpu_busy < max(LOW_GPU_PERCENT, w.gpu_idle_percent)
        if w.state == State.RUNNING and holds_gpu and low:
            sessions.low_gpu.append(w)
    return sessions


def class_roster(tenant: Tenant, sessions: Sessions, *, viewer: Any) -> list[dict[str, Any]]:
    """The members by role and name with their GPU-hours this term and running sessions,
    then people removed since who used GPUs here (their hours still count this term)."""
    access = Access.of(viewer)
    memberships = sorted(
        Membership.objects.filter(tenant=tenant).select_related("user"),
        key=lambda m: (-ROLE_RANK[Role(m.role)], m.user.sort_key),  # student2 < student10
    )
    usage = {u.user_id: u for u in MemberUsage.objects.filter(tenant=tenant).select_related("user")}
    held, running = sessions.held, sessions.running
    roster: list[dict[str, Any]] = []
    for m in memberships:
        used = usage.pop(m.user_id, None)
        roster.append(
            {
                "membership": m,
                "user": m.user,
                "gpu_hours": (used.used_gpu_hours if used else Decimal(0)) + held[m.user_id],
                "running": running[m.user_id],
                "can_remove": m.user_id != viewer.pk and access.can_assign_role(tenant, m.role),
            }
        )
    for u in usage.values():
        if u.used_gpu_hours or held[u.user_id]:
            roster.append(
                {
                    "membership": None,
                    "user": u.user,
                    "gpu_hours": u.used_gpu_hours + held[u.user_id],
                    "running": running[u.user_id],
                    "can_remove": False,
                }
            )
    most = max((r["gpu_hours"] for r in roster), default=Decimal(0))
    for r in roster:
        r["bar"] = round(r["gpu_hours"] * 100 / most) if most else 0
    return roster


def class_grants(tenant: Tenant) -> list[Grant]:
    """The class's grants, each with ``windows_text`` in the reader's language."""
    grants = list(Grant.objects.of_tenant(tenant))
    for g in grants:
        g.windows_text = windows.describe_local(g.windows)
    return grants


def active_sessions_of(grant: Grant) -> int:
    return Workload.objects.filter(grant=grant, state__in=ACTIVE).count()
