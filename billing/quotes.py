"""Prices before a launch and cost after it, for the pages (registered in workloads.costs).

The price of a size is its first hour now: the plan version in force now, the grant's
priority class and the class's queue multipliers, the off-peak multiplier when now is in the
window. A GPU share is priced as admission charges it (``share_milli`` on this cluster's
nodes). A size that may land on GPUs of different prices (no model named, several models on
the cluster) is shown at the highest: it never costs more than the App Center said. The
cost so far is what settlement charged plus the unsettled part since the watermark, priced
the same way as settlement will price it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

from django.db.models import Sum
from django.utils import timezone

from billing import pricing
from billing.models import Account, LedgerEntry, PricePlan, UsageInterval
from scheduling.inventory import free_nodes, queue_for
from scheduling.placement import share_milli
from workloads.costs import Cost
from workloads.specs import resources_for

HOUR = dt.timedelta(hours=1)


def _versions(cluster: Any) -> list[pricing.Version]:
    return pricing.versions(PricePlan.objects.filter(cluster=cluster))


def _per_hour(versions: Sequence[pricing.Version], held: Any, now: dt.datetime) -> Decimal | None:
    """The rate in force at ``now`` for ``held``; None where no version is in force."""
    pieces = pricing.segments(versions, now, now + dt.timedelta(microseconds=1))
    if not pieces:
        return None
    piece = pieces[0]
    return piece.unit_price(held)


def hourly_prices(cluster: Any, flavors: Sequence[Any], grant: Any = None) -> dict[int, Decimal]:
    versions = _versions(cluster)
    if not versions:
        return {}
    now = timezone.now()
    nodes = None
    priority = grant.priority_class.name if grant is not None and grant.priority_class else ""
    queue = queue_for(cluster, grant.tenant) if grant is not None else ""
    prices: dict[int, Decimal] = {}
    for flavor in flavors:
        share = 0
        models: list[str] = [""]
        if flavor.gpus or flavor.gpu_milli:
            if nodes is None:
                nodes = free_nodes(cluster, lock=False)
            if flavor.gpu_milli:
                share = share_milli(resources_for(flavor), nodes) if nodes else flavor.gpu_milli
            # The models it may land on: its own list, else those this cluster has.
            here = sorted({d.model for n in nodes if n.schedulable for d in n.devices})
            models = list(flavor.gpu_models) or here or [""]
        quoted = [
            _per_hour(
                versions,
                SimpleNamespace(
                    cpu_milli=flavor.cpu_milli,
                    memory_mib=flavor.memory_mib,
                    gpus=flavor.gpus,
                    gpu_share_milli=share,
                    gpu_model=model,
                    priority_class=priority,
                    queue=queue,
                ),
                now,
            )
            for model in models
        ]
        known = [price for price in quoted if price is not None]
        if known:
            prices[flavor.pk] = max(known)  # on GPUs of different prices: never more than shown
    return prices


def cost_so_far(workload: Any) -> Cost | None:
    intervals = list(UsageInterval.objects.filter(workload=workload))
    if not intervals:
        return None
    now = timezone.now()
    versions = _versions(workload.cluster)
    total = Decimal(0)
    per_hour: Decimal | None = None
    for interval in intervals:
        total += interval.charged
        if interval.is_settled:
            continue
        end = min(interval.ended_at or now, now)
        if end > interval.settled_until:
            unsettled = pricing.segments(versions, interval.settled_until, end)
            pending = pricing.cost(interval, unsettled)
            total += pricing.round_amount(pending)
        if interval.ended_at is None:
            per_hour = _per_hour(versions, interval, now)
    return Cost(amount=total, per_hour=per_hour, at=now)


def tenant_spend(tenant: Any) -> Decimal | None:
    """The ledger total of the tenant's account (what it paid for, corrections included);
    None where it has no account yet (nothing was ever billed to it)."""
    account = Account.objects.filter(tenant=tenant).first()
    if account is None:
        return None
    total = LedgerEntry.objects.filter(account=account).aggregate(total=Sum("amount"))["total"]
    return total or Decimal(0)
