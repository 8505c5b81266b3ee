"""What a size costs per hour, and what a workload has cost so far: asked by the App Center
and the workload page, answered by billing.

Billing sits above workloads in the layers (it meters workloads), so workloads cannot import
it: billing registers its answers here from its ``AppConfig.ready`` (as lifecycle listeners
are registered). With no billing installed, or no price plan for a cluster, the answers are
None and the pages show no price.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

HourlyPrices = Callable[[Any, Sequence[Any], Any], dict[int, Decimal]]
CostSoFar = Callable[[Any], "Cost | None"]
TenantSpend = Callable[[Any], "Decimal | None"]
TenantBudget = Callable[[Any], "Any | None"]

_hourly: list[HourlyPrices] = []
_so_far: list[CostSoFar] = []
_spend: list[TenantSpend] = []
_budget: list[TenantBudget] = []


@dataclass(frozen=True)
class Cost:
    """What a workload has cost up to ``at`` and, while it holds resources, what it costs
    per hour now (so a page can count on between updates)."""

    amount: Decimal
    per_hour: Decimal | None
    at: Any  # datetime


def register(
    *,
    hourly: HourlyPrices | None = None,
    so_far: CostSoFar | None = None,
    spend: TenantSpend | None = None,
    budget: TenantBudget | None = None,
) -> None:
    if hourly is not None and hourly not in _hourly:
        _hourly.append(hourly)
    if so_far is not None and so_far not in _so_far:
        _so_far.append(so_far)
    if spend is not None and spend not in _spend:
        _spend.append(spend)
    if budget is not None and budget not in _budget:
        _budget.append(budget)


def _first(answers: Sequence[Callable[..., Any]], *args: Any) -> Any:
    """The first registered answer that knows (not None, not empty)."""
    for answer in answers:
        found = answer(*args)
        if found:
            return found
    return None


def hourly_prices(cluster: Any, flavors: Sequence[Any], grant: Any = None) -> dict[int, Decimal]:
    """Price per hour now of each flavor (by pk) on ``cluster`` under ``grant``; flavors with
    no price are left out."""
    return _first(_hourly, cluster, flavors, grant) or {}


def cost_so_far(workload: Any) -> Cost | None:
    cost: Cost | None = _first(_so_far, workload)
    return cost


def spend_of(tenant: Any) -> Decimal | None:
    """What the tenant (a class) has been charged as payer, all told; None: not billed."""
    for answer in _spend:  # Decimal(0) is an answer: charged nothing yet
        spent = answer(tenant)
        if spent is not None:
            return spent
    return None


def budget_of(tenant: Any) -> Any | None:
    """The budget that binds the tenant as payer now (its own or an ancestor's: the one with
    the least left), with allowance, spent, remaining, percent, policy and state; None: no
    budget (or billing is not installed)."""
    return _first(_budget, tenant)
