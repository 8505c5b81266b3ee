"""Live status of workloads: after each committed transition, tell the pages that may see it.

``lifecycle.transition`` calls :func:`broadcast_transition` after commit (registered in
``WorkloadsConfig.ready``). The ``workload.state`` event goes to the owner's group, the
workload's group and the group of its tenant and of every tenant above it (a department's
admin follows the department); when the workload took or gave back its allocations, the
cluster's group gets the new inventory. Event shapes and group names: ``portal/live.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from portal import live
from workloads.choices import HOLDING
from workloads.lifecycle import Transition
from workloads.models import Workload


def broadcast_transitions(transitions: Sequence[Transition]) -> None:
    """One commit's transitions: each workload's newest state once, and each cluster whose
    allocations moved gets one inventory push, however many of its workloads moved."""
    ids = list(dict.fromkeys(t.workload.pk for t in transitions))
    current = {
        w.pk: w
        for w in Workload.objects.select_related("owner", "tenant", "template", "cluster").filter(
            pk__in=ids
        )
    }
    messages: list[tuple[str, dict[str, Any]]] = []
    for pk in ids:
        workload = current.get(pk)
        if workload is None:
            continue
        # The row as it is now: a later commit's event may overtake this one, and each
        # carries updated_at, so pages keep the newest.
        event = live.workload_state(workload)
        targets = [
            live.groups.user(workload.owner_id),
            live.groups.workload(workload.pk),
            *(live.groups.tenant(tenant_id) for tenant_id in workload.tenant.ancestor_ids),
        ]
        messages.extend((group, event) for group in targets)
    moved = {
        t.workload.cluster_id
        for t in transitions
        if (t.before in HOLDING) != (t.after in HOLDING)  # admitted, or ended
    }
    for cluster in {w.cluster for w in current.values() if w.cluster_id in moved}:
        messages.append((live.groups.cluster(cluster.pk), live.cluster_inventory(cluster)))
    live.publish(messages)
