"""Mutable cluster state as numpy arrays, so feasibility over a thousand nodes is a few vector ops.

Per node: free CPU and memory; per device: free milli-GPU (absent devices of smaller nodes are
padded with zero free, which no GPU request can use). Every change bumps the node's version,
which lets policies cache per-node scores and recompute only what changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .model import MILLI, Node, TaskRequest

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


class PlacementError(ValueError):
    """An allocation that the node cannot hold (a bug in the caller, never a normal outcome)."""


@dataclass(frozen=True, slots=True)
class Allocation:
    """What one placed task holds, enough to give it back exactly."""

    node: int
    devices: tuple[int, ...]
    cpu_milli: int
    memory_mib: int
    gpu_milli: int  # per device


class Cluster:
    """Capacity and free resources of every node and device."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        if not nodes:
            raise ValueError("a cluster needs at least one node")
        self.nodes = tuple(nodes)
        self.index = {node.name: i for i, node in enumerate(self.nodes)}
        if len(self.index) != len(self.nodes):
            raise ValueError("node names must be unique")
        self.models: tuple[str, ...] = tuple(sorted({n.gpu_model for n in nodes if n.gpu_count}))
        model_ids = {m: i for i, m in enumerate(self.models)}
        no_gpu = len(self.models)  # the model id of nodes without GPUs
        self.model_id: IntArray = np.array(
            [model_ids[n.gpu_model] if n.gpu_count else no_gpu for n in nodes], dtype=np.int64
        )
        self.cpu_cap: IntArray = np.array([n.cpu_milli for n in nodes], dtype=np.int64)
        self.mem_cap: IntArray = np.array([n.memory_mib for n in nodes], dtype=np.int64)
        self.gpu_count: IntArray = np.array([n.gpu_count for n in nodes], dtype=np.int64)
        self.max_devices = max(1, int(self.gpu_count.max()))
        self.dev_cap: IntArray = np.where(
            np.arange(self.max_devices)[None, :] < self.gpu_count[:, None], MILLI, 0
        ).astype(np.int64)
        self.schedulable: BoolArray = np.array([not n.unschedulable for n in nodes])
        self.has_taints = any(n.taints for n in nodes)
        self._masks: dict[frozenset[str], BoolArray] = {}
        self.cpu_free = self.cpu_cap.copy()
        self.mem_free = self.mem_cap.copy()
        self.dev_free = self.dev_cap.copy()
        self.version: IntArray = np.zeros(len(nodes), dtype=np.int64)
        self._tick = 0
        self.allocated_gpu_milli = 0

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def gpu_capacity_milli(self) -> int:
        return int(self.gpu_count.sum()) * MILLI

    def model_mask(self, models: Iterable[str]) -> BoolArray:
        """Which model ids a task accepts (the last entry, no GPU, is never accepted)."""
        if isinstance(models, frozenset):  # a task's set: the same few, asked for every task
            mask = self._masks.get(models)
            if mask is None:
                mask = self._masks[models] = self._model_mask(models)
                mask.flags.writeable = False
            return mask
        return self._model_mask(models)

    def _model_mask(self, models: Iterable[str]) -> BoolArray:
        wanted = set(models)
        mask = np.zeros(len(self.models) + 1, dtype=bool)
        if not wanted:
            mask[:-1] = True
        else:
            for i, model in enumerate(self.models):
                mask[i] = model in wanted
        return mask

    @property
    def tick(self) -> int:
        """The version of the latest change (0 before any): a node changed since tick t has a
        version above t."""
        return self._tick

    def fits(self, task: TaskRequest, nodes: IntArray | None = None) -> BoolArray:
        """Resource and GPU-model feasibility of the task on each node (or on `nodes`)."""
        sel = slice(None) if nodes is None else nodes
        ok = self.fits_resources(task, nodes)
        if task.num_gpu:
            ok &= self.model_mask(task.gpu_models)[self.model_id[sel]]
        return ok

    def fits_resources(self, task: TaskRequest, nodes: IntArray | None = None) -> BoolArray:
        """fits() without the GPU models: free CPU, memory and enough devices with room."""
        sel = slice(None) if nodes is None else nodes
        ok: BoolArray = (self.cpu_free[sel] >= task.cpu_milli) & (
            self.mem_free[sel] >= task.memory_mib
        )
        if task.num_gpu == 1:
            ok &= self.dev_free[sel].max(axis=1) >= task.gpu_milli
        elif task.num_gpu:
            ok &= (self.dev_free[sel] >= task.gpu_milli).sum(axis=1) >= task.num_gpu
        return ok

    def fits_empty(self, task: TaskRequest) -> BoolArray:
        """Whether each node could hold the task if it were empty (ignores cordons and taints)."""
        ok: BoolArray = (self.cpu_cap >= task.cpu_milli) & (self.mem_cap >= task.memory_mib)
        if task.num_gpu:
            ok &= self.model_mask(task.gpu_models)[self.model_id]
            ok &= self.gpu_count >= task.num_gpu
        return ok

    def fitting_devices(self, node: int, task: TaskRequest) -> list[int]:
        return [int(d) for d in np.flatnonzero(self.dev_free[node] >= task.gpu_milli)]

    def allocate(self, node: int, task: TaskRequest, devices: Sequence[int] = ()) -> Allocation:
        devices = tuple(int(d) for d in devices)
        cpu, mem, gpu = task.cpu_milli, task.memory_mib, task.gpu_milli
        if len(devices) != task.num_gpu or len(set(devices)) != len(devices):
            raise PlacementError(f"task {task.name} needs {task.num_gpu} distinct devices")
        if self.cpu_free.item(node) < cpu or self.mem_free.item(node) < mem:
            raise PlacementError(f"task {task.name} does not fit node {self.nodes[node].name}")
        free = self.dev_free[node]
        count = self.gpu_count.item(node)
        for d in devices:
            if d >= count or free.item(d) < gpu:
                raise PlacementError(f"device {d} of {self.nodes[node].name} is too full")
        self.cpu_free[node] -= cpu
        self.mem_free[node] -= mem
        for d in devices:
            free[d] -= gpu
        self.allocated_gpu_milli += gpu * len(devices)
        self._touch(node)
        return Allocation(node, devices, cpu, mem, gpu)

    def release(self, alloc: Allocation) -> None:
        node = alloc.node
        self.cpu_free[node] += alloc.cpu_milli
        self.mem_free[node] += alloc.memory_mib
        for d in alloc.devices:
            self.dev_free[node, d] += alloc.gpu_milli
        self.allocated_gpu_milli -= alloc.gpu_milli * len(alloc.devices)
        if (
            self.cpu_free[node] > self.cpu_cap[node]
            or self.mem_free[node] > self.mem_cap[node]
            or (self.dev_free[node] > self.dev_cap[node]).any()
        ):
            raise PlacementError(f"released more than node {self.nodes[node].name} holds")
        self._touch(node)

    def _touch(self, node: int) -> None:
        self._tick += 1
        self.version[node] = self._tick
