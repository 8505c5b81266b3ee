"""Placement rules that do not depend on free resources: cordon, node selectors, taints.

They are fixed for a node as long as the node object is, so the placer computes them once per
task shape. The resource side of feasibility lives in Cluster.fits.
"""

from __future__ import annotations

import numpy as np

from core.reasons import Reason
from scheduling import reasons as R

from .cluster import BoolArray, Cluster
from .model import Node, TaskRequest


def node_admits(node: Node, task: TaskRequest) -> bool:
    """Cordon, selector and taint checks of one node for one task."""
    if node.unschedulable:
        return False
    if any(node.labels.get(key) != value for key, value in task.node_selector.items()):
        return False
    return all(
        any(tol.tolerates(taint) for tol in task.tolerations)
        for taint in node.taints
        if taint.effect in ("NoSchedule", "NoExecute")
    )


def static_mask(cluster: Cluster, task: TaskRequest) -> BoolArray:
    """node_admits over the whole cluster, with a fast path for the plain case."""
    if not task.node_selector and not cluster.has_taints:
        return cluster.schedulable.copy()
    return np.array([node_admits(node, task) for node in cluster.nodes], dtype=bool)


def too_big_reason(cluster: Cluster, task: TaskRequest) -> Reason | None:
    """Why no node could ever hold the task, even empty; None when some node could."""
    if cluster.fits_empty(task).any():
        return None
    parts: list[Reason] = []
    if not (cluster.cpu_cap >= task.cpu_milli).any():
        parts.append(R.NEEDS_CPU(milli=task.cpu_milli, largest=int(cluster.cpu_cap.max())))
    if not (cluster.mem_cap >= task.memory_mib).any():
        parts.append(R.NEEDS_MEMORY(mib=task.memory_mib, largest=int(cluster.mem_cap.max())))
    if task.num_gpu:
        allowed = cluster.model_mask(task.gpu_models)[cluster.model_id]
        most = int(cluster.gpu_count[allowed].max()) if allowed.any() else 0
        models = "|".join(sorted(task.gpu_models)) or R.ANY_MODEL()
        if most < task.num_gpu:
            parts.append(R.NEEDS_GPUS(n=task.num_gpu, models=models, most=most))
    if not parts:
        parts.append(R.NEEDS_ONE_NODE())
    return R.TOO_BIG_NEEDS(parts=parts)
