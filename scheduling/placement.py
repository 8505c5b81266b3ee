"""Where a workload's tasks go on the portal-scheduled clusters (local, simulated).

The admission step locks the cluster's node rows, builds the free view below from the
allocations, and asks :func:`place` for one placement per task. A gang is placed whole or not
at all. The answer explains itself: a refusal says why in plain words and whether waiting can
help (``permanent`` is False) or not (the workload is bigger than any node).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field

from scheduling.backends.base import Resources


@dataclass
class FreeDevice:
    device_id: int
    index: int
    model: str
    memory_mib: int
    free_milli: int  # 1000: untouched
    free_memory_mib: int


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
    reason: str = ""  # why nothing was placed
    permanent: bool = False  # waiting cannot help

    @property
    def placed(self) -> bool:
        return bool(self.tasks)


def _model_ok(device: FreeDevice, res: Resources) -> bool:
    return not res.gpu_models or device.model in res.gpu_models


def _fit(node: FreeNode, res: Resources) -> TaskSlot | None:
    """A slot for one task on ``node`` from its free resources, or None."""
    if not node.schedulable or node.free_cpu_milli < res.cpu_milli:
        return None
    if node.free_memory_mib < res.memory_mib:
        return None
    if res.gpus:
        whole = [d for d in node.devices if d.free_milli == 1000 and _model_ok(d, res)]
        if len(whole) < res.gpus:
            return None
        return TaskSlot(node, tuple((d, 1000, d.memory_mib) for d in whole[: res.gpus]))
    if res.gpu_milli:
        shared = [
            d
            for d in node.devices
            if _model_ok(d, res)
            and d.free_milli >= res.gpu_milli
            and d.free_memory_mib >= res.gpu_memory_mib
        ]
        if not shared:
            return None
        # The fullest device that still fits: keeps whole devices free for whole-GPU work.
        best = min(shared, key=lambda d: (d.free_milli, d.index))
        return TaskSlot(node, ((best, res.gpu_milli, res.gpu_memory_mib),))
    return TaskSlot(node)


def _take(slot: TaskSlot, res: Resources) -> None:
    slot.node.free_cpu_milli -= res.cpu_milli
    slot.node.free_memory_mib -= res.memory_mib
    for device, milli, memory in slot.devices:
        device.free_milli -= milli
        device.free_memory_mib -= memory


def _order(nodes: Sequence[FreeNode], policy: str) -> list[FreeNode]:
    if policy == "spread":
        return sorted(nodes, key=lambda n: (-n.free_cpu_milli, n.name))
    # binpack and the rest: the most used node first, so whole nodes stay free.
    return sorted(nodes, key=lambda n: (n.free_cpu_milli, n.name))


def too_big(nodes: Sequence[FreeNode], res: Resources) -> str:
    """Why no node could ever hold one task, or "" if some node could (when empty)."""
    if not nodes:
        return "this cluster has no nodes"
    empty = [
        FreeNode(
            n.node_id,
            n.name,
            n.cpu_milli,
            n.memory_mib,
            n.cpu_milli,
            n.memory_mib,
            True,
            [
                FreeDevice(d.device_id, d.index, d.model, d.memory_mib, 1000, d.memory_mib)
                for d in n.devices
            ],
        )
        for n in nodes
    ]
    if any(_fit(n, res) for n in empty):
        return ""
    largest_cpu = max(n.cpu_milli for n in nodes)
    largest_mem = max(n.memory_mib for n in nodes)
    if res.cpu_milli > largest_cpu:
        return (
            f"bigger than any node: asks {res.cpu_milli / 1000:g} CPU cores, the largest "
            f"node has {largest_cpu / 1000:g}"
        )
    if res.memory_mib > largest_mem:
        return (
            f"bigger than any node: asks {res.memory_mib} MiB of memory, the largest node "
            f"has {largest_mem}"
        )
    if res.gpus or res.gpu_milli:
        matching = [d for n in nodes for d in n.devices if _model_ok(d, res)]
        if not matching:
            return ""  # no such GPU at all now: GPUs may be added, so the caller queues
        most = max(sum(1 for d in n.devices if _model_ok(d, res)) for n in nodes)
        if res.gpus > most:
            return f"bigger than any node: asks {res.gpus} GPUs on one node, the most is {most}"
        if res.gpu_memory_mib > max(d.memory_mib for d in matching):
            return (
                f"bigger than any GPU: asks {res.gpu_memory_mib} MiB of GPU memory, the "
                f"largest GPU has {max(d.memory_mib for d in matching)}"
            )
    return ""


def place(
    nodes: Sequence[FreeNode], res: Resources, workers: int, policy: str = "binpack"
) -> Placement:
    """Place ``workers`` tasks of ``res`` each, all or none."""
    reason = too_big(nodes, res)
    if reason:
        return Placement(reason=reason, permanent=True)
    free = copy.deepcopy(list(nodes))
    slots: list[TaskSlot] = []
    for _ in range(workers):
        slot = next((s for n in _order(free, policy) if (s := _fit(n, res))), None)
        if slot is None:
            break
        _take(slot, res)
        slots.append(slot)
    if len(slots) == workers:
        return Placement(tuple(slots))
    return Placement(reason=_why_waiting(nodes, res, workers, len(slots)))


def _why_waiting(nodes: Sequence[FreeNode], res: Resources, workers: int, fitted: int) -> str:
    if workers > 1 and fitted:
        return f"waiting for all {workers} workers of the gang to fit ({fitted} fit now)"
    if res.gpus or res.gpu_milli:
        models = " or ".join(res.gpu_models) if res.gpu_models else ""
        if not any(_model_ok(d, res) for n in nodes for d in n.devices):
            what = f"{models} GPU" if models else "GPU"
            return f"waiting for capacity: this cluster has no {what} right now"
        what = (
            f"{res.gpus} free {models} GPU{'s' if res.gpus > 1 else ''}"
            if res.gpus
            else (
                f"a {models + ' ' if models else ''}GPU with {res.gpu_milli / 10:g}% compute and "
                f"{res.gpu_memory_mib} MiB free"
            )
        )
        return f"waiting for capacity: no node has {what} now"
    return (
        f"waiting for capacity: no node has {res.cpu_milli / 1000:g} CPU cores and "
        f"{res.memory_mib} MiB of memory free now"
    )
