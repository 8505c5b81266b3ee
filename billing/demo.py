"""Demo prices (``manage.py seed_demo``): every demo cluster without a price plan gets one,
in compute points (1 point = ¥1, as Quantanexus counts), half price at night."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from billing import services
from billing.models import PricePlan
from scheduling.models import Cluster

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


def seed(admin: Any) -> int:
    """Price plans for the clusters that have none; how many were made. Idempotent."""
    made = 0
    now = timezone.now()
    for cluster in Cluster.objects.exclude(
        pk__in=PricePlan.objects.values_list("cluster_id", flat=True)
    ):
        services.create_plan(
            actor=admin, cluster=cluster, effective_from=now, now=now, **DEMO_PRICES
        )
        made += 1
    return made
