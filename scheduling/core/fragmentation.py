"""GPU fragmentation as in "Beware of Fragmentation" (Weng et al., USENIX ATC '23).

A node's free GPU is fragmented *for a task shape* when that shape cannot use it: all of it when
the shape needs no GPU, cannot run on the node's model, or finds too little CPU or too few
devices with enough free; otherwise only the free milli on devices too full for the shape. The
node's fragmentation F(n) is the expectation over the workload's typical shapes, weighted by
how often each occurs; the cluster's is the sum over nodes.

Writing S_t(n) for the free milli on devices with at least m_t free and ok_t(n) for "the shape
fits", F(n) = free(n) - U(n) with U(n) = sum_t p_t * ok_t(n) * S_t(n), the free GPU the
workload can still use. Placing a task changes one node, and S_t, and the device counts behind
ok_t, change by closed forms, so the effect of every candidate placement on F is a handful of
(nodes x devices x shapes) array operations rather than a fresh evaluation per candidate.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .cluster import BoolArray, Cluster, IntArray
from .model import MILLI, TaskRequest

FloatArray = npt.NDArray[np.float64]

ShapeKey = tuple[int, int, int, frozenset[str]]  # cpu_milli, num_gpu, gpu_milli, gpu_models

_NO_BOUND = np.iinfo(np.int64).max  # the CPU-aware cap of a shape that needs no CPU


@dataclass(frozen=True)
class TypicalShapes:
    """The most frequent task shapes covering `coverage` of the tasks, with renormalised weights.

    A shape is (CPU, number of GPUs, milli-GPU per GPU, GPU models), as in the reference
    simulator; memory is not part of it.
    """

    shapes: tuple[ShapeKey, ...]
    weights: tuple[float, ...]

    @classmethod
    def from_tasks(cls, tasks: Iterable[TaskRequest], coverage: float = 0.95) -> TypicalShapes:
        counts = Counter((t.cpu_milli, t.num_gpu, t.gpu_milli, t.gpu_models) for t in tasks)
        if not counts:
            raise ValueError("typical shapes need at least one task")
        total = sum(counts.values())
        # Most frequent first; among equals the larger shape first, like the reference.
        ranked = sorted(
            counts.items(),
            key=lambda kv: (kv[1], kv[0][0], kv[0][2], kv[0][1], sorted(kv[0][3])),
            reverse=True,
        )
        chosen: list[tuple[ShapeKey, int]] = []
        covered = 0
        for shape, count in ranked:
            if covered >= coverage * total:
                break
            chosen.append((shape, count))
            covered += count
        return cls(
            tuple(shape for shape, _ in chosen), tuple(count / covered for _, count in chosen)
        )


class FragmentationModel:
    """F(n) as the paper defines it, with the typical shapes laid out as arrays against one
    cluster's GPU models. Subclasses change what "usable" means (see CpuAwareFragmentation)."""

    def __init__(self, cluster: Cluster, typical: TypicalShapes) -> None:
        self.cluster = cluster
        self.typical = typical
        gpu = [i for i, s in enumerate(typical.shapes) if s[1] > 0]
        self.cpu: IntArray = np.array([typical.shapes[i][0] for i in gpu], dtype=np.int64)
        self.num_gpu: IntArray = np.array([typical.shapes[i][1] for i in gpu], dtype=np.int64)
        self.milli: IntArray = np.array([typical.shapes[i][2] for i in gpu], dtype=np.int64)
        self.weight: FloatArray = np.array([typical.weights[i] for i in gpu], dtype=np.float64)
        # model_ok[t, model id]: shape t accepts that model (no-GPU id never accepted).
        self.model_ok: BoolArray = np.array(
            [cluster.model_mask(typical.shapes[i][3]) for i in gpu], dtype=bool
        ).reshape(len(gpu), len(cluster.models) + 1)
        self._cpu_step = np.maximum(self.cpu, 1)
        self._task_milli = self.num_gpu * self.milli
        self._needs_cpu = self.cpu > 0
        # node_ok[n, t]: shape t accepts node n's model.
        self.node_ok: BoolArray = self.model_ok[:, cluster.model_id].T
        # What placement_delta reads about a node's current state whatever the task (the
        # parts and the terms of U), per node, kept until the node's version moves on (stamp
        # -1: never computed). A node changes once per placement but is scored again for
        # every task shape that arrives after it. Only exact integers are kept: U itself is
        # weighed for each call's nodes together, as it always was, so that every score keeps
        # its last bit (FGD's integer scores sit on a boundary at a delta of exactly 0).
        # _state[n] stacks S_t, the device counts and the terms, so one gather reads them all.
        n, t = len(cluster), len(gpu)
        self._stamp: IntArray = np.full(n, -1, dtype=np.int64)
        self._state: IntArray = np.zeros((n, 2 + self.n_terms, t), dtype=np.int64)

    # The per-node, per-shape state U is computed from, and how one placement changes it.

    def parts(self, dev: IntArray) -> tuple[IntArray, IntArray]:
        """From free milli per device (..., G): S_t and the count of devices with at least
        m_t free, each (..., T)."""
        ge = dev[..., None] >= self.milli
        return (dev[..., None] * ge).sum(axis=-2), ge.sum(axis=-2)

    def after_slice(
        self, parts: tuple[IntArray, IntArray], v: IntArray, m: int
    ) -> tuple[IntArray, IntArray]:
        """The parts after taking m from a device with v free; v is (B, G), parts (B, T),
        the result (B, G, T)."""
        s, count = parts
        v2 = v - m
        ge_old = v[:, :, None] >= self.milli
        ge_new = v2[:, :, None] >= self.milli
        return (
            s[:, None, :] - v[:, :, None] * ge_old + v2[:, :, None] * ge_new,
            count[:, None, :] - ge_old + ge_new,
        )

    def after_whole(self, parts: tuple[IntArray, IntArray], k: int) -> tuple[IntArray, IntArray]:
        """The parts after taking k whole devices, which every shape (m_t <= 1000) counted."""
        s, count = parts
        return s - MILLI * k, count - k

    # U = weigh(terms(...)): the terms are exact integers per shape, weigh sums them with the
    # shapes' weights (the only rounding). Subclasses change both together.
    n_terms = 1

    def terms(
        self, cpu: IntArray, parts: tuple[IntArray, IntArray], model_ok: BoolArray
    ) -> tuple[IntArray, ...]:
        """ok_t * S_t; leading axes of the arguments broadcast together."""
        s, count = parts
        ok = (count >= self.num_gpu) & ((cpu[..., None] >= self.cpu) & model_ok)
        return (s * ok,)

    def weigh(self, terms: tuple[IntArray, ...]) -> FloatArray:
        result: FloatArray = terms[0] @ self.weight
        return result

    def usable(
        self, cpu: IntArray, parts: tuple[IntArray, IntArray], model_ok: BoolArray
    ) -> FloatArray:
        """U = sum_t p_t * ok_t * S_t; leading axes of the arguments broadcast together."""
        return self.weigh(self.terms(cpu, parts, model_ok))

    # What callers use.

    def node_fragmentation(self, nodes: IntArray) -> FloatArray:
        """F(n) in milli-GPU for the given nodes."""
        c = self.cluster
        dev = c.dev_free[nodes]
        model_ok = self.model_ok[:, c.model_id[nodes]].T
        frag: FloatArray = dev.sum(axis=1) - self.usable(
            c.cpu_free[nodes], self.parts(dev), model_ok
        )
        return frag

    def placement_delta(self, task: TaskRequest, nodes: IntArray) -> tuple[FloatArray, IntArray]:
        """Change of F(n) if the task is placed on each node, at its best device.

        Returns the change (milli-GPU; lower is better) and, for a sharing task, the device
        that gives it (-1 otherwise). The nodes must fit the task.
        """
        c = self.cluster
        dev = c.dev_free[nodes]
        parts, terms = self._current(nodes)
        model_ok = self.node_ok[nodes]
        before = self.weigh(terms)
        cpu_after = c.cpu_free[nodes] - task.cpu_milli
        no_device = np.full(len(nodes), -1, dtype=np.int64)
        if task.num_gpu == 0:
            return before - self.usable(cpu_after, parts, model_ok), no_device
        if task.is_sharing:
            after_parts = self.after_slice(parts, dev, task.gpu_milli)
            after = self.usable(cpu_after[:, None], after_parts, model_ok[:, None, :])
            delta = before[:, None] - after - task.gpu_milli
            delta[dev < task.gpu_milli] = np.inf
            best = np.argmin(delta, axis=1)
            return delta[np.arange(len(nodes)), best], best.astype(np.int64)
        if task.gpu_milli == MILLI:
            after = self.usable(cpu_after, self.after_whole(parts, task.num_gpu), model_ok)
            return before - after - task.gpu_total_milli, no_device
        # Several partial devices (not in the openb traces): evaluate each node explicitly.
        deltas = np.empty(len(nodes), dtype=np.float64)
        for i, node in enumerate(nodes):
            one = np.array([node])
            frag_before = self.node_fragmentation(one)[0]
            saved = c.cpu_free[node], c.dev_free[node].copy()
            c.cpu_free[node] -= task.cpu_milli
            c.dev_free[node, pick_tightest(saved[1], task)] -= task.gpu_milli
            deltas[i] = self.node_fragmentation(one)[0] - frag_before
            c.cpu_free[node], c.dev_free[node] = saved
        return deltas, no_device

    def _current(self, nodes: IntArray) -> tuple[tuple[IntArray, IntArray], tuple[IntArray, ...]]:
        """The parts and terms of the given nodes now, refreshing the cache where stale."""
        c = self.cluster
        version = c.version[nodes]
        stale = self._stamp[nodes] != version
        if stale.any():
            todo = nodes[stale]
            s, count = self.parts(c.dev_free[todo])
            terms = self.terms(c.cpu_free[todo], (s, count), self.node_ok[todo])
            block = np.empty((todo.size, *self._state.shape[1:]), dtype=np.int64)
            block[:, 0] = s
            block[:, 1] = count
            for i, term in enumerate(terms):
                block[:, 2 + i] = term
            self._state[todo] = block
            self._stamp[todo] = version[stale]
        state = self._state[nodes]
        return (state[:, 0], state[:, 1]), tuple(state[:, 2 + i] for i in range(self.n_terms))


class CpuAwareFragmentation(FragmentationModel):
    """Our refinement: free GPU counts as usable by a shape only as far as the node's free CPU
    can host tasks of that shape.

    The paper calls all free GPU on qualifying devices usable as soon as the CPU for *one*
    task of the shape is there: eight free GPUs next to CPU for one more task count as eight.
    Here usable_t = min(S_t, floor(cpu / cpu_t) * k_t * m_t), so placements that leave GPUs
    without the CPU to use them register as fragmentation. The closed forms are unchanged.
    """

    def terms(
        self, cpu: IntArray, parts: tuple[IntArray, IntArray], model_ok: BoolArray
    ) -> tuple[IntArray, ...]:
        s, count = parts
        ok = (count >= self.num_gpu) & ((cpu[..., None] >= self.cpu) & model_ok)
        term: IntArray = np.minimum(s, self.cpu_cap(cpu)) * ok
        return (term,)

    def cpu_cap(self, cpu: IntArray) -> IntArray:
        """floor(cpu / cpu_t) * k_t * m_t per shape (..., T); no bound for shapes without CPU."""
        cap: IntArray = np.where(
            self._needs_cpu, cpu[..., None] // self._cpu_step * self._task_milli, _NO_BOUND
        )
        return cap


class BlendedFragmentation(CpuAwareFragmentation):
    """A mix of the two measures: usable = (1 - alpha) * the paper's + alpha * the CPU-aware
    one. alpha = 0 is the paper's measure, 1 the CPU-aware one."""

    def __init__(self, cluster: Cluster, typical: TypicalShapes, alpha: float = 0.5) -> None:
        if not 0.0 <= alpha <= 1.0:
            raise ValueError("alpha must be in 0..1")
        self.alpha = alpha
        self.n_terms = 1 if alpha == 0.0 else 2
        super().__init__(cluster, typical)

    def terms(
        self, cpu: IntArray, parts: tuple[IntArray, IntArray], model_ok: BoolArray
    ) -> tuple[IntArray, ...]:
        # The two measures' terms exactly as they compute them, sharing what they have in common.
        s, count = parts
        ok = (count >= self.num_gpu) & ((cpu[..., None] >= self.cpu) & model_ok)
        if self.alpha == 0.0:
            return (s * ok,)
        paper: IntArray = s * ok
        aware: IntArray = np.minimum(s, self.cpu_cap(cpu)) * ok
        return paper, aware

    def weigh(self, terms: tuple[IntArray, ...]) -> FloatArray:
        paper: FloatArray = terms[0] @ self.weight
        if self.alpha == 0.0:
            return paper
        aware: FloatArray = terms[1] @ self.weight
        result: FloatArray = (1.0 - self.alpha) * paper + self.alpha * aware
        return result


def pick_tightest(dev_free: IntArray, task: TaskRequest) -> list[int]:
    """The num_gpu devices with the least free that still fit, in device order on ties."""
    fitting = np.flatnonzero(dev_free >= task.gpu_milli)
    if task.gpu_milli < MILLI:  # whole devices all have the same (full) free: device order
        fitting = fitting[np.argsort(dev_free[fitting], kind="stable")]
    chosen: list[int] = fitting[: task.num_gpu].tolist()
    return chosen


class FragmentationTracker:
    """Keeps F(n) of every node for the replay's metrics: placements mark their node, and the
    marked nodes are re-evaluated together when the total is read, so a replay that reports
    fragmentation at a few events pays for those events only."""

    def __init__(self, model: FragmentationModel) -> None:
        self.model = model
        self.per_node = model.node_fragmentation(np.arange(len(model.cluster)))
        self._dirty: set[int] = set()

    def refresh(self, node: int) -> None:
        self._dirty.add(node)

    @property
    def total_milli(self) -> float:
        if self._dirty:
            nodes = np.fromiter(self._dirty, dtype=np.int64, count=len(self._dirty))
            self.per_node[nodes] = self.model.node_fragmentation(nodes)
            self._dirty.clear()
        return float(self.per_node.sum())
