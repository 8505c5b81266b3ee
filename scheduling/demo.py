"""Demo clusters: this host (local backend) and a simulated GPU farm."""

from __future__ import annotations

from django.conf import settings

from scheduling.choices import BackendKind
from scheduling.models import Cluster

# Interactive sessions sit idle most of the time: the demo lets the local host take eight
# times its cores in CPU requests. Set "cpu_overcommit" in the cluster's config to change it.
DEMO_CPU_OVERCOMMIT = 8


def seed_simulated() -> Cluster:
    """16 nodes × 8 GPUs of two models, simulated (its name says so everywhere)."""
    sim, _ = Cluster.objects.get_or_create(
        slug="sim",
        defaults={
            "name": "GPU farm",
            "backend": BackendKind.SIMULATED,
            "placement_policy": "fgd-mix",
            "config": {"speedup": 60, "default_duration_s": 1800},
            "is_default": settings.CLUSTER_BACKEND == BackendKind.SIMULATED,
        },
    )
    return sim


def seed() -> Cluster:
    local, _ = Cluster.objects.get_or_create(
        slug="local",
        defaults={
            "name": "This host",
            "backend": BackendKind.LOCAL,
            "config": {"cpu_overcommit": DEMO_CPU_OVERCOMMIT},
            "is_default": settings.CLUSTER_BACKEND == BackendKind.LOCAL,
        },
    )
    return local
