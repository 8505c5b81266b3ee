"""Metering from the lifecycle: a usage interval per workload per stretch of holding
resources, opened at the transition into a holding state (Starting, Running, Stopping) and
closed at the transition out of them, with what was held snapshotted on it.

``on_transitions`` is a lifecycle listener (registered in ``BillingConfig.ready``): it is told
after each commit, so it reads and writes in its own transactions. A workload that ends is
settled there and then. ``sync_intervals`` (on the settlement tick) repairs what a lost
listener call left: an interval still open for work that ended, work holding resources
without an open interval.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from billing import services
from billing.models import Account, UsageInterval
from scheduling.inventory import free_nodes, queue_for
from scheduling.models import Allocation, PriorityClass
from scheduling.placement import share_milli
from workloads.choices import HOLDING, TERMINAL
from workloads.lifecycle import Transition
from workloads.models import Workload
from workloads.specs import resources_for

logger = logging.getLogger(__name__)


def on_transitions(transitions: Sequence[Transition]) -> None:
    for change in transitions:
        holds_before = change.before in HOLDING
        holds_after = change.after in HOLDING
        if holds_before == holds_after:
            continue
        at = change.workload.updated_at or timezone.now()
        if holds_after:
            open_interval(change.workload, at)
        else:
            close_interval(change.workload, at)
            if change.after in TERMINAL:
                services.settle_workload(change.workload)


def payer_account(workload: Workload) -> Account:
    if workload.payer_user_id is not None:
        return services.account_for_user(workload.payer_user)
    return services.account_for_tenant(workload.payer_tenant or workload.tenant)


def held(workload: Workload) -> dict[str, Any]:
    """What the workload holds, in all: workers × its flavor; for GPUs, what admission
    allocated (a share as admission charged it: ``scheduling.placement.share_milli``)."""
    flavor, n = workload.flavor, workload.workers
    devices = list(
        Allocation.objects.filter(workload=workload, device__isnull=False).values_list(
            "gpu_milli", "device__model"
        )
    )
    model = devices[0][1] if devices else (flavor.gpu_models[0] if flavor.gpu_models else "")
    gpus = share = 0
    if flavor.gpus:
        gpus = flavor.gpus * n
    elif flavor.gpu_milli:
        if devices:
            share = sum(milli for milli, _model in devices)
        else:  # a backend that places itself (Kubernetes): the share the same rule gives
            nodes = free_nodes(workload.cluster, lock=False)
            share = share_milli(resources_for(flavor), nodes) * n
    return {
        "workers": n,
        "cpu_milli": flavor.cpu_milli * n,
        "memory_mib": flavor.memory_mib * n,
        "gpus": gpus,
        "gpu_share_milli": share,
        "gpu_model": model,
    }


def _priority_name(workload: Workload) -> str:
    grant = workload.grant
    if (
        grant is not None
        and grant.priority_class
        and grant.priority_class.value == workload.priority
    ):
        return grant.priority_class.name
    if not workload.priority:
        return ""
    return (
        PriorityClass.objects.filter(value=workload.priority).values_list("name", flat=True).first()
        or ""
    )


def open_interval(workload: Workload, at: dt.datetime) -> UsageInterval | None:
    """The interval of a stretch of holding that starts at ``at`` (none if one is open)."""
    fresh = (
        Workload.objects.select_related(
            "flavor", "cluster", "tenant", "owner", "grant__priority_class"
        )
        .filter(pk=workload.pk)
        .first()
    )
    if fresh is None:
        return None
    workload = fresh
    if UsageInterval.objects.filter(workload=workload, ended_at__isnull=True).exists():
        return None
    try:
        with transaction.atomic():
            return UsageInterval.objects.create(
                workload=workload,
                account=payer_account(workload),
                cluster=workload.cluster,
                owner=workload.owner,
                tenant=workload.tenant,
                started_at=at,
                settled_until=at,
                priority_class=_priority_name(workload),
                queue=queue_for(workload.cluster, workload.tenant),
                workload_name=workload.name,
                owner_name=workload.owner.get_username(),
                flavor_name=workload.flavor.name,
                **held(workload),
            )
    except IntegrityError:  # opened meanwhile (one open interval per workload)
        return None


def close_interval(workload: Workload, at: dt.datetime) -> int:
    return UsageInterval.objects.filter(workload=workload, ended_at__isnull=True).update(
        ended_at=at
    )


def sync_intervals(now: dt.datetime | None = None) -> dict[str, int]:
    """Repair what a lost listener call left: close the open intervals of work that no
    longer holds resources (at its end), open one for work that holds without one."""
    now = now or timezone.now()
    closed = 0
    stale = (  # storage intervals (billing.storage) are not work: they end with their data
        UsageInterval.objects.filter(ended_at__isnull=True, storage_mib=0).exclude(
            workload__state__in=HOLDING
        )
    )
    for interval in stale.select_related("workload"):
        ended = interval.workload.finished_at if interval.workload else None
        end = max(interval.started_at, ended or now)
        closed += UsageInterval.objects.filter(pk=interval.pk, ended_at__isnull=True).update(
            ended_at=end
        )
    opened = 0
    still_open = UsageInterval.objects.filter(workload=OuterRef("pk"), ended_at__isnull=True)
    missing = Workload.objects.filter(state__in=HOLDING).exclude(Exists(still_open))
    for workload in missing:
        had = UsageInterval.objects.filter(workload=workload).exists()
        at = (workload.updated_at if had else workload.started_at or workload.updated_at) or now
        if open_interval(workload, min(at, now)) is not None:
            opened += 1
            logger.warning("workload %s held resources without a usage interval", workload.pk)
    return {"closed": closed, "opened": opened}
