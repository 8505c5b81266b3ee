"""Placement rules that do not depend on free resources: cordon, node selectors, taints.

They are fixed for a node as long as the node object is, so the placer computes them once per
task shape. The resource side of feasibility lives in Cluster.fits.
"""

from __future__ import annotations

import numpy as np

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
    if not task.node_selector and not any(node.taints for node in cluster.nodes):
        return cluster.schedulable.copy()
    return np.array([node_admits(node, task) for node in cluster.nodes], dtype=bool)


def too_big_reason(cluster: Cluster, task: TaskRequest) -> str | None:
    """Why no node could ever hold the task, even empty; None when some node could."""
    if cluster.fits_empty(task).any():
        return None
    parts = []
    if not (cluster.cpu_cap >= task.cpu_milli).any():
        parts.append(f"{task.cpu_milli} milli-CPU (largest node {int(cluster.cpu_cap.max())})")
    if not (cluster.mem_cap >= task.memory_mib).any():
        parts.append(f"{task.memory_mib} MiB (largest node {int(cluster.mem_cap.max())})")
    if task.num_gpu:
        allowed = cluster.model_mask(task.gpu_models)[cluster.model_id]
        most = int(cluster.gpu_count[allowed].max()) if allowed.any() else 0
        models = "|".join(sorted(task.gpu_models)) or "any model"
        if most < task.num_gpu:
            parts.append(f"{task.num_gpu} GPUs of {models} (largest such node has {most})")
    if not parts:
        parts.append("no single node has all of its CPU, memory and GPUs")
    return "bigger than any node: needs " + "; ".join(parts)
