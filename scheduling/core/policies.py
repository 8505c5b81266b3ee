"""Node and device ordering policies, registered by name.

A policy scores feasible nodes for a task (higher is better) and picks the devices on the chosen
node. Scores depend only on the node's own state and the task, which is what lets the placer
cache them per task shape and recompute only nodes that changed.

- random: a uniformly random feasible node, a random fitting device.
- spread: least allocated after placement (kube-scheduler LeastAllocated, GPU included),
  the emptiest device.
- binpack: Volcano's binpack plugin formula with configurable weights, GPU included,
  the fullest fitting device.
- bestfit: the reference simulator's Best-Fit (least CPU and GPU left, normalised by the
  largest node), the fullest fitting device.
- fgd: Fragmentation Gradient Descent as published: the node and device whose expected
  fragmentation grows least.
- fgd-cpu: FGD on a measure that also counts free GPU the node's free CPU cannot serve.
- fgd-mix: FGD adapted to the workload mix it expects: a blend of the two measures chosen by
  the share of multi-GPU demand, and scarce GPU models kept for the work only they can serve;
  the recommended policy (RECOMMENDED), see bench/scheduling.md.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from .cluster import Cluster, IntArray
from .fragmentation import (
    BlendedFragmentation,
    CpuAwareFragmentation,
    FloatArray,
    FragmentationModel,
    TypicalShapes,
    pick_tightest,
)
from .model import MILLI, TaskRequest

MAX_NODE_SCORE = 100.0  # kube-scheduler's framework.MaxNodeScore


class Policy(ABC):
    """Scores nodes for a task and picks devices on the chosen one."""

    name: ClassVar[str]
    randomized: ClassVar[bool] = False  # choose uniformly among feasible nodes, ignore scores

    def bind(self, cluster: Cluster) -> None:  # noqa: B027 - optional hook
        """Prepare per-cluster data (called once by the placer)."""

    @abstractmethod
    def score(self, cluster: Cluster, task: TaskRequest, nodes: IntArray) -> FloatArray:
        """Scores of the given nodes, all of which fit the task; higher is better."""

    def score_devices(
        self, cluster: Cluster, task: TaskRequest, nodes: IntArray
    ) -> tuple[FloatArray, IntArray | None]:
        """Scores and, where the policy picks the device while scoring, the device each node
        would give the task (None otherwise: the placer then asks devices())."""
        return self.score(cluster, task, nodes), None

    def devices(
        self, cluster: Cluster, node: int, task: TaskRequest, rng: np.random.Generator
    ) -> tuple[int, ...]:
        """The devices the task takes on its node: by default the fullest ones that fit."""
        return tuple(pick_tightest(cluster.dev_free[node], task)) if task.num_gpu else ()


class RandomPolicy(Policy):
    name = "random"
    randomized = True

    def score(self, cluster: Cluster, task: TaskRequest, nodes: IntArray) -> FloatArray:
        return np.zeros(len(nodes))

    def devices(
        self, cluster: Cluster, node: int, task: TaskRequest, rng: np.random.Generator
    ) -> tuple[int, ...]:
        if task.is_sharing:
            return (int(rng.choice(cluster.fitting_devices(node, task))),)
        return super().devices(cluster, node, task, rng)


class SpreadPolicy(Policy):
    """Least allocated: the mean share of CPU, memory and GPU left free after placement."""

    name = "spread"

    def score(self, cluster: Cluster, task: TaskRequest, nodes: IntArray) -> FloatArray:
        parts = [
            _ratio(cluster.cpu_free[nodes] - task.cpu_milli, cluster.cpu_cap[nodes]),
            _ratio(cluster.mem_free[nodes] - task.memory_mib, cluster.mem_cap[nodes]),
        ]
        if cluster.gpu_capacity_milli:
            gpu_free = cluster.dev_free[nodes].sum(axis=1) - task.gpu_total_milli
            parts.append(_ratio(gpu_free, cluster.gpu_count[nodes] * MILLI))
        result: FloatArray = MAX_NODE_SCORE * np.mean(parts, axis=0)
        return result

    def devices(
        self, cluster: Cluster, node: int, task: TaskRequest, rng: np.random.Generator
    ) -> tuple[int, ...]:
        if task.is_sharing:
            free = cluster.dev_free[node]
            return (int(np.argmax(np.where(free >= task.gpu_milli, free, -1))),)
        return super().devices(cluster, node, task, rng)


class BinpackPolicy(Policy):
    """Volcano's binpack: sum over requested resources of weight * (used + request) / capacity,
    divided by the weights of the requested resources, times 100 and the plugin weight.

    Resources the task does not request are left out, as in Volcano; GPU counts as the node's
    total milli-GPU (Volcano's `binpack.resources` entry for the GPU resource).
    """

    name = "binpack"

    def __init__(self, weight: int = 1, cpu: int = 1, memory: int = 1, gpu: int = 1) -> None:
        self.weight, self.cpu, self.memory, self.gpu = weight, cpu, memory, gpu

    def score(self, cluster: Cluster, task: TaskRequest, nodes: IntArray) -> FloatArray:
        total = np.zeros(len(nodes))
        weight_sum = 0
        dims = (
            (task.cpu_milli, cluster.cpu_cap[nodes], cluster.cpu_free[nodes], self.cpu),
            (task.memory_mib, cluster.mem_cap[nodes], cluster.mem_free[nodes], self.memory),
            (
                task.gpu_total_milli,
                cluster.gpu_count[nodes] * MILLI,
                cluster.dev_free[nodes].sum(axis=1),
                self.gpu,
            ),
        )
        for request, capacity, free, weight in dims:
            if request == 0:
                continue
            total += resource_binpack_score(request, capacity, capacity - free, weight)
            weight_sum += weight
        if weight_sum:
            total /= weight_sum
        result: FloatArray = total * MAX_NODE_SCORE * self.weight
        return result


def resource_binpack_score(
    requested: float, capacity: IntArray | float, used: IntArray | float, weight: int
) -> FloatArray:
    """Volcano's ResourceBinPackingScore, element-wise: 0 for no capacity or overflow."""
    capacity = np.asarray(capacity, dtype=np.float64)
    used_finally = requested + np.asarray(used, dtype=np.float64)
    safe = np.where(capacity > 0, capacity, 1.0)
    score: FloatArray = np.where(
        (capacity > 0) & (weight != 0) & (used_finally <= capacity),
        used_finally * weight / safe,
        0.0,
    )
    return score


class BestFitPolicy(Policy):
    """The reference simulator's Best-Fit: 1 - sum_r w_r (free_r - request_r) / max_r over CPU
    and GPU (weights 0.5 each, max_r the largest node's capacity); the fullest device."""

    name = "bestfit"

    def bind(self, cluster: Cluster) -> None:
        self.max_cpu = float(max(1, cluster.cpu_cap.max()))
        self.max_gpu = float(max(1, cluster.gpu_count.max() * MILLI))

    def score(self, cluster: Cluster, task: TaskRequest, nodes: IntArray) -> FloatArray:
        cpu_left = (cluster.cpu_free[nodes] - task.cpu_milli) / self.max_cpu
        gpu_left = (cluster.dev_free[nodes].sum(axis=1) - task.gpu_total_milli) / self.max_gpu
        result: FloatArray = MAX_NODE_SCORE * (1.0 - 0.5 * cpu_left - 0.5 * gpu_left)
        return result


class FGDPolicy(Policy):
    """Fragmentation Gradient Descent: the node and device whose fragmentation grows least.

    The typical shapes come from the workload the caller expects (the trace for a replay, the
    recent mix for a live cluster). The score is the reference's int(100 * sigmoid(-dF / 1000))
    with dF in milli-GPU; its coarseness matters: near-equal nodes tie and fall to the fixed
    random node order, which consolidates work. Exact scores let rounding noise pick among
    near-equals and left 5.8-10.5 % unallocated instead of 4.8 % on openb default.
    """

    name = "fgd"
    measure: ClassVar[type[FragmentationModel]] = FragmentationModel

    def __init__(self, typical: TypicalShapes) -> None:
        self.typical = typical

    def bind(self, cluster: Cluster) -> None:
        self.model = self.measure(cluster, self.typical)

    def score(self, cluster: Cluster, task: TaskRequest, nodes: IntArray) -> FloatArray:
        return self.score_devices(cluster, task, nodes)[0]

    def score_devices(
        self, cluster: Cluster, task: TaskRequest, nodes: IntArray
    ) -> tuple[FloatArray, IntArray | None]:
        """The delta that scores a node for a sharing task also names its best device, so
        the chosen node's delta is never computed twice."""
        delta, device = self.model.placement_delta(task, nodes)
        score: FloatArray = np.floor(MAX_NODE_SCORE / (1.0 + np.exp(delta / MILLI)))
        return score, device if task.is_sharing else None

    def devices(
        self, cluster: Cluster, node: int, task: TaskRequest, rng: np.random.Generator
    ) -> tuple[int, ...]:
        if task.is_sharing:
            _, device = self.model.placement_delta(task, np.array([node]))
            return (int(device[0]),)
        return super().devices(cluster, node, task, rng)


class FGDCpuPolicy(FGDPolicy):
    """FGD on the CPU-aware fragmentation measure (CpuAwareFragmentation)."""

    name = "fgd-cpu"
    measure = CpuAwareFragmentation


class FGDMixPolicy(FGDPolicy):
    """FGD that reads the workload mix it expects (the typical shapes) and adapts to it.

    Two changes to the paper's FGD, both computed from the typical shapes at bind time:

    - the fragmentation measure blends the paper's with the CPU-aware one (alpha, see
      BlendedFragmentation and adaptive_alpha): half of each, down to the paper's alone as
      multi-GPU work grows past 15 % of the GPU demand;
    - scarce GPU models are kept for the work that needs them: each model's pressure is the
      share of the expected GPU demand only it can serve (constrained shapes, split over their
      allowed models by capacity) over its share of the cluster's GPUs, and a task that may
      run on several models pays `scarcity` x its GPU request x (pressure of the node's model
      - the lowest pressure among the models it may use). With no constrained shapes every
      pressure is 0 and the term vanishes.

    alpha=None (the default) sets alpha from the mix; scarcity=0 turns the second part off.
    """

    name = "fgd-mix"
    measure = BlendedFragmentation

    def __init__(
        self, typical: TypicalShapes, alpha: float | None = None, scarcity: float = 1.0
    ) -> None:
        super().__init__(typical)
        self.alpha = alpha
        self.scarcity = scarcity

    def mix(self) -> dict[str, float]:
        """Shares of the expected GPU demand: sharing, multi-GPU and model-constrained."""
        demand = {"sharing": 0.0, "multi": 0.0, "constrained": 0.0, "total": 0.0}
        for (_, num_gpu, milli, models), weight in zip(
            self.typical.shapes, self.typical.weights, strict=True
        ):
            gpu = weight * num_gpu * milli
            demand["total"] += gpu
            demand["sharing"] += gpu if num_gpu == 1 and milli < MILLI else 0.0
            demand["multi"] += gpu if num_gpu > 1 else 0.0
            demand["constrained"] += gpu if models and num_gpu else 0.0
        total = demand.pop("total") or 1.0
        return {key: value / total for key, value in demand.items()}

    def bind(self, cluster: Cluster) -> None:
        alpha = self.alpha
        if alpha is None:
            alpha = ADAPTIVE_ALPHA(self.mix())
        self.model = BlendedFragmentation(cluster, self.typical, alpha)
        self.pressure = model_pressure(cluster, self.typical)
        self._accepts: dict[frozenset[str], float] = {}

    def score_devices(
        self, cluster: Cluster, task: TaskRequest, nodes: IntArray
    ) -> tuple[FloatArray, IntArray | None]:
        delta, device = self.model.placement_delta(task, nodes)
        if task.num_gpu and self.scarcity and self.pressure.any():
            lowest = self._accepts.get(task.gpu_models)
            if lowest is None:
                allowed = cluster.model_mask(task.gpu_models)
                lowest = float(self.pressure[allowed].min()) if allowed.any() else 0.0
                self._accepts[task.gpu_models] = lowest
            extra = self.pressure[cluster.model_id[nodes]] - lowest
            delta = delta + self.scarcity * task.gpu_total_milli * extra
        score: FloatArray = np.floor(MAX_NODE_SCORE / (1.0 + np.exp(delta / MILLI)))
        return score, device if task.is_sharing else None


def adaptive_alpha(mix: dict[str, float]) -> float:
    """How CPU-aware fgd-mix's measure is, from the mix (see FGDMixPolicy): half way between
    the two measures while multi-GPU work is at most 15 % of the GPU demand, falling to the
    paper's measure at 25 % and beyond. Whole multi-GPU tasks need nodes with many free
    devices, which the paper's measure protects best; single-GPU and shared work packs better
    when free GPUs without the CPU to use them count as fragmented too."""
    return 0.5 * float(np.clip((0.25 - mix["multi"]) / 0.10, 0.0, 1.0))


ADAPTIVE_ALPHA = adaptive_alpha


def model_pressure(cluster: Cluster, typical: TypicalShapes) -> FloatArray:
    """Per model id (no-GPU last, always 0): the share of the typical GPU demand that only
    that model's nodes can serve, over the model's share of the cluster's GPUs."""
    n = len(cluster.models)
    gpus = np.array(
        [cluster.gpu_count[cluster.model_id == m].sum() for m in range(n)], dtype=np.float64
    )
    demand = np.zeros(n + 1)
    total = 0.0
    for (_, num_gpu, milli, models), weight in zip(typical.shapes, typical.weights, strict=True):
        gpu = weight * num_gpu * milli
        total += gpu
        if not (num_gpu and models):
            continue
        allowed = cluster.model_mask(models)[:n]
        if allowed.any() and gpus[allowed].sum():
            demand[:n] += gpu * np.where(allowed, gpus, 0.0) / gpus[allowed].sum()
    pressure = np.zeros(n + 1)
    if total and gpus.sum():
        share = gpus / gpus.sum()
        pressure[:n] = np.where(share > 0, demand[:n] / total / np.maximum(share, 1e-12), 0.0)
    return pressure


def _ratio(left: IntArray, capacity: IntArray) -> FloatArray:
    safe = np.where(capacity > 0, capacity, 1)
    result: FloatArray = np.where(capacity > 0, left / safe, 0.0)
    return result


PolicyFactory = Callable[..., Policy]

POLICIES: dict[str, PolicyFactory] = {
    "random": RandomPolicy,
    "spread": SpreadPolicy,
    "binpack": BinpackPolicy,
    "bestfit": BestFitPolicy,
    "fgd": FGDPolicy,
    "fgd-cpu": FGDCpuPolicy,
    "fgd-mix": FGDMixPolicy,
}


# What the replay runs by default and fractional-GPU clusters get: see bench/scheduling.md.
RECOMMENDED = "fgd-mix"


def make_policy(
    name: str,
    typical: TypicalShapes | None = None,
    workload: Sequence[TaskRequest] = (),
    **options: Any,
) -> Policy:
    """Build a policy by name. FGD uses `typical`, or learns the typical shapes from
    `workload`; the other policies ignore both."""
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}") from None
    if isinstance(factory, type) and issubclass(factory, FGDPolicy):
        options["typical"] = typical or TypicalShapes.from_tasks(workload)
    return factory(**options)
