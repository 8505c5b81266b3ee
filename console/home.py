"""The home page: a dashboard for each role, beside the notices and memberships.

- everyone with a class: their running sessions with the time left, what their quota and
  their class's budget have left, their recent jobs;
- teachers, TAs and tenant admins: their classes — who runs what now, idle sessions, the
  GPU-hours of this week and of the term;
- platform admins: each cluster's health (GPUs allocated and stranded, nodes and cordons),
  the work that waits and why, and the GPUs allocated over the last minutes.

Each section reads only what its reader may see (their own workloads; the classes they
manage, through ``Access``; everything for superusers) with a fixed number of queries for any
number of workloads. Budgets are read per class (a few queries each, for a person's classes).
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.contrib.auth.decorators import login_required
from django.db.models import Min, Q
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext as _

from console.cluster_views import allocation_series, cluster_summaries
from core import notices
from scheduling.models import Cluster
from tenants.choices import MANAGING_ROLES, Role
from tenants.http import AuthenticatedHttpRequest
from tenants.models import Membership, MemberUsage, Tenant
from tenants.permissions import Access
from workloads.choices import ACTIVE, HOLDING, WAITING, State, WorkloadKind
from workloads.costs import budget_of
from workloads.models import Workload
from workloads.teaching import queries

SESSIONS_SHOWN = 20
RECENT_JOBS = 5
CLASS_SESSIONS_SHOWN = 50
IDLE_AFTER = dt.timedelta(minutes=30)
WAITING_READ = 500  # the newest waiting workloads read to group by reason
WAITING_GROUPS = 6
RECENT_WINDOW = dt.timedelta(minutes=15)
RECENT_STEP = dt.timedelta(seconds=15)
RECENT_MINIMUM = dt.timedelta(minutes=2)  # the shortest window a chart shows


def _minutes(delta: dt.timedelta) -> int:
    return max(0, int(delta.total_seconds() // 60))


# --- A student's (anyone's own) --------------------------------------------------------------


def student_dashboard(user: Any, memberships: list[Membership], now: dt.datetime) -> dict[str, Any]:
    sessions = list(
        Workload.objects.filter(owner=user, state__in=ACTIVE)
        .select_related("template", "flavor", "cluster", "tenant")
        .order_by("-created_at")[:SESSIONS_SHOWN]
    )
    for w in sessions:
        w.minutes_left = (
            _minutes(w.deadline_at - now) if w.deadline_at and w.state == State.RUNNING else None
        )
    usage = {u.tenant_id: u for u in MemberUsage.objects.filter(user=user)}
    limits = []
    for m in memberships:
        tenant = m.tenant
        if m.role != Role.STUDENT or tenant.kind not in queries.TEACHING_KINDS:
            continue
        if not tenant.is_active:
            continue
        quota = getattr(tenant, "quota", None)
        used = usage.get(tenant.pk)
        used_gpus = used.used_gpus if used else Decimal(0)
        used_hours = used.used_gpu_hours if used else Decimal(0)
        member_gpus = quota.member_gpus if quota else None
        member_hours = quota.member_gpu_hours_per_term if quota else None
        limits.append(
            {
                "tenant": tenant,
                "gpus_used": used_gpus,
                "gpus_limit": member_gpus,
                "gpus_left": max(Decimal(0), member_gpus - used_gpus)
                if member_gpus is not None
                else None,
                "hours_used": used_hours,
                "hours_limit": member_hours,
                "hours_left": max(Decimal(0), member_hours - used_hours)
                if member_hours is not None
                else None,
                "budget": budget_of(tenant),
            }
        )
    jobs = list(
        Workload.objects.filter(owner=user, kind=WorkloadKind.JOB)
        .select_related("flavor", "cluster", "tenant")
        .order_by("-created_at")[:RECENT_JOBS]
    )
    return {
        "sessions": sessions,
        "limits": limits,
        "jobs": jobs,
        # Shown to students, and to anyone with work of their own.
        "show": bool(limits or sessions or jobs),
    }


# --- A teacher's -------------------------------------------------------------------------------


def week_start(now: dt.datetime) -> dt.datetime:
    local = timezone.localtime(now)
    monday = local - dt.timedelta(days=local.weekday())
    return monday.replace(hour=0, minute=0, second=0, microsecond=0)


def teacher_dashboard(access: Access, now: dt.datetime) -> dict[str, Any]:
    classes = queries.managed_classes(access, now=now)
    in_mine = Q(access.tenant_filter(MANAGING_ROLES, prefix="tenant__")) & Q(
        tenant__kind__in=queries.TEACHING_KINDS
    )
    running = list(
        Workload.objects.filter(in_mine, state__in=HOLDING)
        .select_related("owner", "template", "flavor", "tenant", "cluster")
        .order_by("tenant__name", "owner__username", "created_at")[:CLASS_SESSIONS_SHOWN]
    )
    idle = []
    for w in running:
        w.idle_minutes = None
        if w.state == State.RUNNING and w.kind == WorkloadKind.NOTEBOOK:
            quiet = now - (w.last_activity_at or w.started_at or w.created_at)
            w.idle_minutes = _minutes(quiet)
            if quiet >= IDLE_AFTER:
                idle.append(w)
    # GPU-hours since Monday: each started workload's GPUs times its time inside the week.
    start = week_start(now)
    week: dict[int, Decimal] = defaultdict(Decimal)
    rows = (
        Workload.objects.filter(in_mine, started_at__isnull=False, started_at__lt=now)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=start))
        .values_list("tenant_id", "started_at", "finished_at", "quota_request", "charged")
    )
    for tenant_id, started, finished, request, charged in rows:
        assert started is not None  # the query takes started work only
        gpus = Decimal((request or {}).get("gpus", "0"))
        if not charged or not gpus:
            continue
        seconds = ((finished or now) - max(started, start)).total_seconds()
        week[tenant_id] += gpus * Decimal(max(0.0, seconds)) / 3600
    for row in classes:
        row["week_gpu_hours"] = week[row["tenant"].pk]
    return {"classes": classes, "running": running, "idle": idle, "week_start": start}


# --- An admin's --------------------------------------------------------------------------------


@dataclass
class WaitingGroup:
    cluster: str
    example: Mapping[str, Any]
    count: int = 0
    oldest: dt.datetime | None = None
    tenants: set[str] = field(default_factory=set)


def admin_dashboard(now: dt.datetime) -> dict[str, Any]:
    clusters = list(Cluster.objects.order_by("name"))
    summaries = cluster_summaries(clusters)
    groups: dict[tuple[str, str], WaitingGroup] = {}
    waiting = (
        Workload.objects.filter(state__in=WAITING)
        .order_by("-created_at")
        .values(
            "cluster__name", "tenant__name", "reason_code", "reason_params", "reason", "created_at"
        )[:WAITING_READ]
    )
    for row in waiting:
        key = (row["cluster__name"], row["reason_code"] or row["reason"])
        group = groups.setdefault(key, WaitingGroup(row["cluster__name"], row))
        group.count += 1
        group.oldest = min(group.oldest or row["created_at"], row["created_at"])
        group.tenants.add(row["tenant__name"])
    # The last 15 minutes, or less on a portal younger than that: from a step before the first
    # workload was made (a fresh demo's chart then shows its load rising, not 14 flat minutes).
    # created_at is indexed: its minimum is one index probe, not a scan of every workload.
    first = Workload.objects.aggregate(first=Min("created_at"))
    start = now - RECENT_WINDOW
    if first["first"] is not None:
        start = max(start, min(first["first"] - RECENT_STEP, now - RECENT_MINIMUM))
    step = max(RECENT_STEP / 3, min(RECENT_STEP, (now - start) / 48))  # finer when short
    series = allocation_series(clusters, start=start, now=now, step=step)
    charts = []
    for cluster in clusters:
        summary = summaries[cluster.pk]
        if not summary.total.devices:
            continue
        points = series[cluster.pk]
        charts.append(
            {
                "cluster": cluster,
                "id": f"home-chart-{cluster.slug}",
                "data": {
                    "label": str(_("GPUs allocated")),
                    "capacityLabel": str(_("GPUs in the cluster")),
                    "capacity": summary.total.devices,
                    "labels": [date_format(timezone.localtime(t), "H:i:s") for t, _v in points],
                    "values": [v for _t, v in points],
                    "peak": max((v for _t, v in points), default=0),
                },
            }
        )
    return {
        "summaries": list(summaries.values()),
        "waiting": sorted(groups.values(), key=lambda g: -g.count)[:WAITING_GROUPS],
        "waiting_total": sum(s.waiting for s in summaries.values()),
        "stranded": sum(s.total.fragmented for s in summaries.values()),
        "charts": charts,
        "window_minutes": math.ceil((now - start).total_seconds() / 60),
    }


# --- The page ----------------------------------------------------------------------------------


@login_required
def home(request: AuthenticatedHttpRequest) -> HttpResponse:
    user, now = request.user, timezone.now()
    memberships = list(
        Membership.objects.filter(user=user)
        .select_related("tenant", "tenant__quota")
        .order_by("tenant__path")
    )
    access = Access.of(user)
    managed = (
        Tenant.objects.filter(access.managed_tenants()).select_related("quota")
        if access.manages_anything() and not user.is_superuser
        else Tenant.objects.none()
    )
    return render(
        request,
        "tenants/home.html",
        {
            "memberships": memberships,
            "managed": managed,
            "can_import": access.manages_anything(),
            "notices": notices.recent(user),
            "student": student_dashboard(user, memberships, now),
            "teacher": teacher_dashboard(access, now)
            if access.manages_anything() and not user.is_superuser
            else None,
            "admin": admin_dashboard(now) if user.is_superuser else None,
        },
    )
