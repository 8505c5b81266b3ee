"""Live inventory of clusters: the ``cluster:<slug>`` topic and the ``cluster.inventory``
event (registered with ``core.live`` in ``SchedulingConfig.ready``). Pushes come after commit
from ``workloads/live.py`` when a workload takes or gives back its allocations."""

from __future__ import annotations

import json
import re
from typing import Any

from core import live
from scheduling.api.serializers import NodeSerializer
from scheduling.models import Cluster, Node
from tenants.permissions import Access

INVENTORY_EVENT = "cluster.inventory"


def cluster_inventory(cluster: Cluster) -> dict[str, Any]:
    """The ``cluster.inventory`` event: the cluster's nodes with what is allocated on them,
    exactly as the nodes API lists them."""
    nodes = Node.objects.with_allocations().filter(cluster=cluster)
    items = json.loads(json.dumps(NodeSerializer(nodes, many=True).data))  # plain dicts
    return {"type": INVENTORY_EVENT, "cluster": cluster.slug, "items": items}


def _authorize(user: Any, match: re.Match[str]) -> live.Allowed | None:
    cluster = Cluster.objects.filter(slug=match["cluster"]).first()
    if cluster is None or not Access.of(user).manages_anything():
        return None
    return live.Allowed(live.groups.cluster(cluster.pk), cluster)


def _snapshot(allowed: live.Allowed) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster_inventory(allowed.subject)["items"]
    return items


def register() -> None:
    """Offer the cluster topic and its event (``SchedulingConfig.ready``)."""
    live.register_event(INVENTORY_EVENT)
    live.register_topic(
        live.Topic(
            "cluster",
            re.compile(r"cluster:(?P<cluster>[-\w]{1,64})", re.ASCII),
            _authorize,
            _snapshot,
        )
    )
