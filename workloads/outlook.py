"""What a student sees before launching: would it start now, or wait, why, and for how long.

Computed without locks from the same pieces admission uses (the quota chain, the cluster's free
view, the placement), once per cluster and per class, so an App Center of many cards costs a
handful of queries.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, TypedDict

from django.utils import timezone

from scheduling.inventory import free_nodes
from scheduling.models import Cluster
from scheduling.placement import FreeNode, place, resolve_policy
from tenants import quota as quota_math
from tenants import services as tenant_services
from tenants.models import Tenant
from workloads import reasons as R
from workloads import windows
from workloads.choices import HOLDING
from workloads.launch import default_cluster
from workloads.models import Flavor, Grant, Workload
from workloads.specs import resources_for


@dataclass
class Outlook:
    starts_now: bool
    reason: R.Reason | None = None  # why it would wait, or why it can never start
    never: bool = False  # bigger than any node: waiting cannot help
    wait_minutes: int | None = None  # a rough estimate; None: cannot say
    free_gpus: Decimal = Decimal(0)  # whole-GPU equivalents free on the cluster now
    free_cpu_cores: Decimal = Decimal(0)
    quota_left: dict[str, Decimal] = field(default_factory=dict)  # tightest room per resource


class _Room(TypedDict):
    """The fields of an Outlook that every answer carries."""

    free_gpus: Decimal
    free_cpu_cores: Decimal
    quota_left: dict[str, Decimal]


@dataclass
class _ClusterView:
    nodes: list[FreeNode]
    free_gpus: Decimal
    free_cpu: Decimal
    next_free: dt.datetime | None  # earliest deadline of what runs there now


def _cluster_view(cluster: Cluster) -> _ClusterView:
    nodes = free_nodes(cluster, lock=False)
    free_gpus = sum((Decimal(d.free_milli) / 1000 for n in nodes for d in n.devices), Decimal(0))
    free_cpu = sum((Decimal(n.free_cpu_milli) / 1000 for n in nodes if n.schedulable), Decimal(0))
    next_free = (
        Workload.objects.filter(cluster=cluster, state__in=HOLDING, deadline_at__isnull=False)
        .order_by("deadline_at")
        .values_list("deadline_at", flat=True)
        .first()
    )
    return _ClusterView(nodes, free_gpus, free_cpu, next_free)


def _room(levels: list[quota_math.Level]) -> dict[str, Decimal]:
    """The least room left at any level, per resource that has a limit somewhere."""
    room: dict[str, Decimal] = {}
    for level in levels:
        for resource, limit in level.limits.items():
            if limit is not None:
                left = Decimal(limit) - Decimal(level.used.get(resource, 0))
                room[resource] = min(room.get(resource, left), left)
        for member_field, resource in quota_math.MEMBER_RESOURCES.items():
            limit = level.member_limits.get(member_field)
            if limit is not None:
                left = Decimal(limit) - Decimal(level.member_used.get(resource, 0))
                room[resource] = min(room.get(resource, left), left)
    return {k: max(v, Decimal(0)) for k, v in room.items()}


def outlooks(user: Any, grants: list[Grant]) -> dict[tuple[int, int], Outlook]:
    """(grant id, flavor id) → Outlook for every flavor of every grant."""
    clusters: dict[int, _ClusterView] = {}
    chains: dict[int, list[quota_math.Level]] = {}
    fallback = None
    result = {}
    for grant in grants:
        cluster = grant.cluster or fallback or default_cluster()
        if grant.cluster is None:
            fallback = cluster
        view = clusters.get(cluster.pk) or clusters.setdefault(cluster.pk, _cluster_view(cluster))
        levels = chains.get(grant.tenant_id)
        if levels is None:
            levels = chains[grant.tenant_id] = _levels(grant.tenant, user)
        for flavor in grant.flavors.all():
            result[(grant.pk, flavor.pk)] = _one(grant, flavor, cluster, view, levels)
    return result


def _levels(tenant: Tenant, user: Any) -> list[quota_math.Level]:
    quotas, usage = tenant_services._chain(tenant, user, lock=False)
    return tenant_services._levels(quotas, usage)


def _one(
    grant: Grant,
    flavor: Flavor,
    cluster: Cluster,
    view: _ClusterView,
    levels: list[quota_math.Level],
) -> Outlook:
    request = quota_math.Request(
        gpus=flavor.gpu_equivalents,
        gpu_memory_mib=flavor.gpu_memory_mib,
        cpu_cores=Decimal(flavor.cpu_milli) / 1000,
        memory_mib=flavor.memory_mib,
        environments=1,
    )
    common: _Room = {
        "free_gpus": view.free_gpus,
        "free_cpu_cores": view.free_cpu,
        "quota_left": _room(levels),
    }
    if not windows.is_open(grant.windows):
        return Outlook(
            False,
            R.WAITING_FOR_WINDOW(windows=R.windows(grant.windows)),
            **common,
        )
    res = resources_for(flavor)
    if (res.gpus or res.gpu_milli) and not any(
        not res.gpu_models or device.model in res.gpu_models
        for node in view.nodes
        for device in node.devices
    ):  # no (such) GPU at all: what ends elsewhere frees none, so no wait can be promised
        what = " or ".join(res.gpu_models) + " " if res.gpu_models else ""
        return Outlook(False, R.NO_GPU_HERE(what=what), never=True, **common)
    placement = place(view.nodes, res, 1, resolve_policy(cluster.placement_policy, view.nodes))
    if placement.permanent:
        return Outlook(False, placement.reason, never=True, **common)
    refusal = quota_math.check(request, levels)
    if refusal is not None:
        return Outlook(False, R.WAITING_FOR_QUOTA(why=refusal.reason), **common)
    if not placement.placed:
        wait = None
        if view.next_free is not None:
            wait = max(1, int((view.next_free - timezone.now()).total_seconds() // 60))
        return Outlook(False, placement.reason, wait_minutes=wait, **common)
    return Outlook(True, **common)
