"""Demo prices (``manage.py seed_demo``): every demo cluster without a price plan gets one,
in compute points (1 point = ¥1, as Quantanexus counts), half price at night."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from billing import budgets, services
from billing.choices import BudgetPeriod, BudgetPolicy
from billing.models import Budget, PricePlan
from scheduling.models import Cluster
from tenants.models import Tenant

DEMO_PRICES: dict[str, Any] = {
    "gpu_hour": "3.0000",  # a GPU of a model not listed below
    "gpu_hour_by_model": {"A100": "8.0000", "V100": "4.0000", "T4": "1.5000"},
    "cpu_core_hour": "0.1000",
    "memory_gib_hour": "0.0200",
    "storage_gib_month": "0.1000",
    "offpeak": {"start": "00:00", "end": "07:00"},
    "offpeak_multiplier": "0.5000",
    "note": "demo prices: compute points (1 point = ¥1), half price 00:00–07:00",
}
# The demo class's budget: 500 points a month, warnings at 80 % and 100 %, then CPU-only.
DEMO_BUDGET: dict[str, Any] = {
    "period": BudgetPeriod.MONTH,
    "allowance": "500",
    "thresholds": [80, 100],
    "policy": BudgetPolicy.DOWNGRADE,
}
DEMO_BUDGET_CLASS = "ml-101"


def seed(admin: Any) -> int:
    """Price plans for the clusters that have none, and the demo class's budget; how many
    plans were made. Idempotent."""
    made = 0
    now = timezone.now()
    klass = Tenant.objects.filter(slug=DEMO_BUDGET_CLASS).first()
    if klass is not None and not Budget.objects.filter(tenant=klass).exists():
        budgets.create_budget(actor=admin, tenant=klass, now=now, **DEMO_BUDGET)
    for cluster in Cluster.objects.exclude(
        pk__in=PricePlan.objects.values_list("cluster_id", flat=True)
    ):
        services.create_plan(
            actor=admin, cluster=cluster, effective_from=now, now=now, **DEMO_PRICES
        )
        made += 1
    return made
