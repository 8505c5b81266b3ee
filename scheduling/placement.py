"""Where a workload's tasks go on the portal-scheduled clusters (local, simulated).

Admission builds the free view below from the allocations (without locks; its commit locks
the nodes it allocates on and checks again), and asks :func:`place` for one placement per
task. A gang is placed whole or not
at all. The answer explains itself: a refusal says why in plain words and whether waiting can
help (``permanent`` is False) or not (the workload is bigger than any node).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from core.reasons import Reason
from scheduling import reasons as R
from scheduling.backends.base import Resources
from scheduling.core.cluster import Allocation as CoreAllocation
from scheduling.core.cluster import Cluster as CoreCluster
from scheduling.core.model import Node as CoreNode
from scheduling.core.model import TaskRequest
from scheduling.core.placement import Placer
from scheduling.core.policies import make_policy


@dataclass
class FreeDevice:
    device_id: int
    index: int
    model: str
    memory_mib: int
    free_milli: int  # 1000: untouched
    free_memory_mib: int
    sharing: str = "fractional"  # GpuSharing: "exclusive", "fractional" or "mig"


@dataclass
class FreeNode:
    node_id: int
    name: str
    cpu_milli: int  # capacity
    memory_mib: int
    free_cpu_milli: int
    free_memory_mib: int
    schedulable: bool = True
    devices: list[FreeDevice] = field(default_factory=list)


@dataclass(frozen=True)
class TaskSlot:
    """One task's share: the node, and per device (id, index) the milli-GPU and memory."""

    node: FreeNode
    devices: tuple[tuple[FreeDevice, int, int], ...] = ()


@dataclass(frozen=True)
class Placement:
    tasks: tuple[TaskSlot, ...] = ()
    reason: Reason | None = None  # why nothing was placed
    permanent: bool = False  # waiting cannot help

    @property
    def placed(self) -> bool:
        return bool(self.tasks)


def _model_ok(device: FreeDevice, res: Resources) -> bool:
    return not res.gpu_models or device.model in res.gpu_models


def _fit(node: FreeNode, res: Resources) -> bool:
    """Could one task go on ``node`` as it is now? (For explaining, not for choosing.)"""
    if not node.schedulable or node.free_cpu_milli < res.cpu_milli:
        return False
    if node.free_memory_mib < res.memory_mib:
        return False
    if res.gpus:
        whole = [d for d in node.devices if d.free_milli == 1000 and _model_ok(d, res)]
        return len(whole) >= res.gpus
    if res.gpu_milli:
        return any(
            _model_ok(d, res)
            and d.free_milli >= res.gpu_milli
            and d.free_memory_mib >= res.gpu_memory_mib
            for d in node.devices
        )
    return True


def share_milli(res: Resources, nodes: Sequence[FreeNode]) -> int:
    """The share of one device a fractional task takes: its compute share, or its memory
    share of the smallest matching device if that is larger. Charging the larger of the two
    keeps both a device's compute and its memory within bounds with one number."""
    memories = [d.memory_mib for n in nodes for d in n.devices if _model_ok(d, res)]
    by_memory = -(-res.gpu_memory_mib * 1000 // min(memories)) if memories else 0
    return min(1000, max(res.gpu_milli, by_memory))


def _core_cluster(nodes: Sequence[FreeNode]) -> CoreCluster:
    """The scheduler core's view of the cluster as it is now (capacity minus allocations)."""
    cluster = CoreCluster(
        [
            CoreNode(
                n.name,
                n.cpu_milli,
                n.memory_mib,
                gpu_count=len(n.devices),
                gpu_model=n.devices[0].model if n.devices else "",
                unschedulable=not n.schedulable,
            )
            for n in nodes
        ]
    )
    for i, node in enumerate(nodes):
        cluster.cpu_free[i] = node.free_cpu_milli
        cluster.mem_free[i] = node.free_memory_mib
        for d, device in enumerate(node.devices):
            cluster.dev_free[i, d] = device.free_milli
            cluster.allocated_gpu_milli += 1000 - device.free_milli
    return cluster


def empty_shapes(nodes: Sequence[FreeNode]) -> list[FreeNode]:
    """One empty node per distinct node shape (capacity, devices' models and memory), in the
    order first seen: what ``too_big`` needs, a few dozen nodes for a cluster of thousands."""
    shapes: dict[tuple[object, ...], FreeNode] = {}
    for n in nodes:
        key = (n.cpu_milli, n.memory_mib, tuple((d.model, d.memory_mib) for d in n.devices))
        if key not in shapes:
            shapes[key] = FreeNode(
                n.node_id,
                n.name,
                n.cpu_milli,
                n.memory_mib,
                n.cpu_milli,
                n.memory_mib,
                True,
                [
                    FreeDevice(
                        d.device_id, d.index, d.model, d.memory_mib, 1000, d.memory_mib, d.sharing
                    )
                    for d in n.devices
                ],
            )
    return list(shapes.values())


# What ``Cluster.placement_policy = "auto"`` (the default) means: fgd-mix, which strands the
# fewest GPUs on fractional workloads (bench/scheduling.md), where some GPU is shared; binpack,
# Volcano's default node order, where every GPU is handed out whole (nothing to fragment).
AUTO_POLICY = "auto"
SHARED_GPU_POLICY = "fgd-mix"
WHOLE_GPU_POLICY = "binpack"


def resolve_policy(policy: str, nodes: Sequence[FreeNode]) -> str:
    """The scheduler core's policy for a cluster's ``placement_policy`` over ``nodes``:
    ``auto`` becomes fgd-mix when some device is shared (fractional), else binpack."""
    if policy != AUTO_POLICY:
        return policy
    shared = any(d.sharing == "fractional" for n in nodes for d in n.devices)
    return SHARED_GPU_POLICY if shared else WHOLE_GPU_POLICY


def too_big(nodes: Sequence[FreeNode], res: Resources) -> Reason | None:
    """Why no node could ever hold one task, or None if some node could (when empty).

    Only the nodes' shapes matter: the answer is the same for ``empty_shapes(nodes)``, which
    a caller asking for many workloads computes once."""
    if not nodes:
        return R.NO_NODES()
    nodes = empty_shapes(nodes)
    if any(_fit(n, res) for n in nodes):
        return None
    largest_cpu = max(n.cpu_milli for n in nodes)
    largest_mem = max(n.memory_mib for n in nodes)
    if res.cpu_milli > largest_cpu:
        return R.TOO_BIG_CPU(n=f"{res.cpu_milli / 1000:g}", m=f"{largest_cpu / 1000:g}")
    if res.memory_mib > largest_mem:
        return R.TOO_BIG_MEMORY(n=res.memory_mib, m=largest_mem)
    if res.gpus or res.gpu_milli:
        matching = [d for n in nodes for d in n.devices if _model_ok(d, res)]
        if not matching:
            return None  # no such GPU at all now: GPUs may be added, so the caller queues
        most = max(sum(1 for d in n.devices if _model_ok(d, res)) for n in nodes)
        if res.gpus > most:
            return R.TOO_BIG_GPUS(n=res.gpus, m=most)
        if res.gpu_memory_mib > max(d.memory_mib for d in matching):
            return R.TOO_BIG_GPU_MEMORY(n=res.gpu_memory_mib, m=max(d.memory_mib for d in matching))
    return None


def place(
    nodes: Sequence[FreeNode],
    res: Resources,
    workers: int,
    policy: str = "binpack",
    recent: Sequence[Resources] = (),
) -> Placement:
    """Place ``workers`` tasks of ``res`` each, all or none, with the scheduler core's
    ``policy``; ``recent`` is the recent workload mix (FGD estimates fragmentation from it)."""
    reason = too_big(nodes, res)
    if reason is not None:
        return Placement(reason=reason, permanent=True)
    milli = share_milli(res, nodes) if res.gpu_milli else 1000
    cluster = _core_cluster(nodes)
    task = _core_task("task", res, milli)
    mix = [
        _core_task(f"recent-{i}", r, share_milli(r, nodes) if r.gpu_milli else 1000)
        for i, r in enumerate(recent)
    ] or [task]
    placer = Placer(cluster, make_policy(policy, workload=mix), np.random.default_rng(0))
    taken: list[CoreAllocation] = []
    for _ in range(workers):
        allocation = placer.place(task)
        if allocation is None:
            break
        taken.append(allocation)
    if len(taken) < workers:
        return Placement(reason=_why_waiting(nodes, res, workers, len(taken)))
    slots = []
    for allocation in taken:
        node = nodes[allocation.node]
        memory = res.gpu_memory_mib if res.gpu_milli else 0
        slots.append(
            TaskSlot(
                node,
                tuple(
                    (
                        node.devices[d],
                        allocation.gpu_milli,
                        memory if res.gpu_milli else node.devices[d].memory_mib,
                    )
                    for d in allocation.devices
                ),
            )
        )
    return Placement(tuple(slots))


def _core_task(name: str, res: Resources, milli: int) -> TaskRequest:
    gpus = res.gpus or (1 if res.gpu_milli else 0)
    return TaskRequest(
        name,
        cpu_milli=res.cpu_milli,
        memory_mib=res.memory_mib,
        num_gpu=gpus,
        gpu_milli=milli if gpus else 0,
        gpu_models=frozenset(res.gpu_models),
    )


def _why_waiting(nodes: Sequence[FreeNode], res: Resources, workers: int, fitted: int) -> Reason:
    if workers > 1 and fitted:
        return R.GANG_WAITING(n=workers, m=fitted)
    if res.gpus or res.gpu_milli:
        models = " or ".join(res.gpu_models) + " " if res.gpu_models else ""
        if not any(_model_ok(d, res) for n in nodes for d in n.devices):
            return R.NO_SUCH_GPU(what=models)
        what = (
            R.FREE_GPUS(n=res.gpus, models=models)
            if res.gpus
            else R.FREE_GPU_SHARE(
                models=models, pct=f"{res.gpu_milli / 10:g}", mib=res.gpu_memory_mib
            )
        )
        return R.NO_CAPACITY(what=what)
    return R.NO_CAPACITY(
        what=R.FREE_CPU_MEMORY(cores=f"{res.cpu_milli / 1000:g}", mib=res.memory_mib)
    )
