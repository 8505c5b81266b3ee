"""Live status of workloads: after each committed transition, tell the pages that may see it.

``lifecycle.transition`` calls :func:`broadcast_transition` after commit (registered in
``WorkloadsConfig.ready``). The ``workload.state`` event goes to the owner's group, the
workload's group and the group of its tenant and of every tenant above it (a department's
admin follows the department); when the workload took or gave back its allocations, the
cluster's group gets the new inventory. Event shapes and group names: ``portal/live.py``.
"""

from __future__ import annotations

from typing import Any

from portal import live
from workloads.choices import HOLDING
from workloads.models import Workload


def broadcast_transition(workload: Workload, from_state: str, to_state: str) -> None:
    current = (
        Workload.objects.select_related("owner", "tenant", "template", "cluster")
        .filter(pk=workload.pk)
        .first()
    )
    if current is None:
        return
    # The row as it is now: a later transition's event may overtake this one, and each
    # carries updated_at, so pages keep the newest.
    event = live.workload_state(current)
    targets = [
        live.groups.user(current.owner_id),
        live.groups.workload(current.pk),
        *(live.groups.tenant(tenant_id) for tenant_id in current.tenant.ancestor_ids),
    ]
    messages: list[tuple[str, dict[str, Any]]] = [(group, event) for group in targets]
    if (from_state in HOLDING) != (to_state in HOLDING):  # admitted, or ended: allocations moved
        cluster = current.cluster
        messages.append((live.groups.cluster(cluster.pk), live.cluster_inventory(cluster)))
    live.publish(messages)
