"""Trace replay: how much of the cluster's GPU a placement policy can hand out.

Arrival mode follows "Beware of Fragmentation" (Weng et al., USENIX ATC '23) and its simulator:
the trace's tasks, shuffled by a seed and topped up by sampling with replacement until their GPU
requests reach `target` x cluster capacity, arrive one at a time; nothing departs; a task that
fits nowhere fails for good. After every arrival we record arrived, allocated and fragmented
milli-GPU. The headline metric, unallocated GPU % at arrived = 100 %, is 100 minus the mean
allocation ratio over the events whose arrived % rounds to 100, computed like the paper's
analysis script (ratios in % rounded to 2 decimals, arrived % rounded half to even).

Time mode plays the trace on its own clock: tasks arrive at their creation time, run as long as
they ran in the trace, and wait in FIFO order (with backfill) while nothing fits.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .cluster import Cluster, IntArray
from .fragmentation import FloatArray, FragmentationModel, FragmentationTracker, TypicalShapes
from .model import MILLI, Node, Shape, TaskRequest
from .placement import Placer
from .policies import make_policy
from .predicates import too_big_reason


def inflate(
    tasks: Sequence[TaskRequest], capacity_milli: int, target: float, rng: np.random.Generator
) -> list[TaskRequest]:
    """The arrival sequence: the tasks in seeded random order, cut or topped up (sampling with
    replacement) so the GPU requests stay within target x capacity."""
    limit = target * capacity_milli
    workload: list[TaskRequest] = []
    total = 0
    for i in rng.permutation(len(tasks)):
        task = tasks[int(i)]
        if total + task.gpu_total_milli > limit:
            return workload
        workload.append(task)
        total += task.gpu_total_milli
    if not any(t.gpu_total_milli for t in tasks):
        return workload
    while True:
        task = tasks[int(rng.integers(len(tasks)))]
        if total + task.gpu_total_milli > limit:
            return workload
        workload.append(task)
        total += task.gpu_total_milli


def allocation_at(
    arrived_milli: IntArray, allocated_milli: IntArray, capacity_milli: int, arrived_pct: int
) -> float:
    """Mean GPU allocation ratio (%) over the events whose arrived % rounds to arrived_pct.

    As the paper's analysis script: if no event rounds there, the events within one point.
    """
    gpus = capacity_milli / MILLI
    arrived = np.round(np.asarray(arrived_milli) / gpus / 10, 0)
    allocated = np.round(np.asarray(allocated_milli) / gpus / 10, 2)
    sel = arrived == arrived_pct
    if not sel.any():
        sel = (arrived >= arrived_pct - 1) & (arrived <= arrived_pct + 1)
    if not sel.any():
        return float("nan")
    return float(allocated[sel].mean())


@dataclass(frozen=True)
class ArrivalRun:
    """One seeded arrival-mode replay of one policy, with its per-event series."""

    policy: str
    seed: int
    capacity_milli: int
    arrived_milli: IntArray
    allocated_milli: IntArray
    fragmented_milli: FloatArray
    failed_tasks: int
    too_big_tasks: int
    seconds: float

    @property
    def tasks(self) -> int:
        return len(self.arrived_milli)

    def allocation_pct(self, arrived_pct: int = 100) -> float:
        return allocation_at(
            self.arrived_milli, self.allocated_milli, self.capacity_milli, arrived_pct
        )

    @property
    def unallocated_pct(self) -> float:
        """Unallocated GPU % at arrived = 100 %, the paper's headline number."""
        return 100.0 - self.allocation_pct(100)

    @property
    def fragmented_pct(self) -> float:
        """Fragmented share of cluster GPU (%) over the same events as unallocated_pct."""
        arrived = np.round(self.arrived_milli / (self.capacity_milli / MILLI) / 10, 0)
        sel = arrived == 100
        if not sel.any():
            return float("nan")
        return float((self.fragmented_milli[sel] / self.capacity_milli * 100).mean())

    def summary(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "unallocated_gpu_pct": round(self.unallocated_pct, 4),
            "fragmented_gpu_pct": round(self.fragmented_pct, 4),
            "tasks": self.tasks,
            "failed_tasks": self.failed_tasks,
            "too_big_tasks": self.too_big_tasks,
            "seconds": round(self.seconds, 3),
        }


def run_arrival(
    nodes: Sequence[Node],
    tasks: Sequence[TaskRequest],
    policy: str,
    seed: int,
    target: float = 1.3,
    options: dict[str, Any] | None = None,
    curves: bool = True,
) -> ArrivalRun:
    """One arrival-mode replay (see the module docstring).

    curves=False measures fragmentation only at the events the headline numbers read (arrived
    rounding to 100 %), NaN elsewhere: what a benchmark needs, without arrival_curve's."""
    started = time.perf_counter()
    cluster = Cluster(nodes)
    workload_seed, placement_seed = np.random.SeedSequence(seed).spawn(2)
    workload = inflate(
        tasks, cluster.gpu_capacity_milli, target, np.random.default_rng(workload_seed)
    )
    typical = TypicalShapes.from_tasks(tasks)
    placer = Placer(
        cluster,
        make_policy(policy, typical=typical, **(options or {})),
        np.random.default_rng(placement_seed),
    )
    tracker = FragmentationTracker(FragmentationModel(cluster, typical))
    n = len(workload)
    arrived = np.empty(n, dtype=np.int64)
    allocated = np.empty(n, dtype=np.int64)
    fragmented = np.empty(n, dtype=np.float64)
    too_big: dict[Shape, bool] = {}
    failed = big = 0
    total = 0
    gpus = cluster.gpu_capacity_milli / MILLI
    for i, task in enumerate(workload):
        total += task.gpu_total_milli
        shape = task.shape
        never = too_big.get(shape)
        if never is None:
            never = too_big[shape] = too_big_reason(cluster, task) is not None
        alloc = None if never else placer.place(task)
        if alloc is None:
            failed += 1
            big += never
        else:
            tracker.refresh(alloc.node)
        arrived[i] = total
        allocated[i] = cluster.allocated_gpu_milli
        # round() rounds half to even like np.round, which arrival_curve and the metric use.
        if curves or round(total / gpus / 10) == 100:
            fragmented[i] = tracker.total_milli
        else:
            fragmented[i] = np.nan
    return ArrivalRun(
        policy=policy,
        seed=seed,
        capacity_milli=cluster.gpu_capacity_milli,
        arrived_milli=arrived,
        allocated_milli=allocated,
        fragmented_milli=fragmented,
        failed_tasks=failed,
        too_big_tasks=big,
        seconds=time.perf_counter() - started,
    )


def mean_std(values: Sequence[float]) -> dict[str, float]:
    """Mean and sample standard deviation (0 for a single value), rounded for reports."""
    arr = np.asarray(values, dtype=np.float64)
    std = float(arr.std(ddof=1)) if len(arr) > 1 else 0.0
    return {"mean": round(float(arr.mean()), 4), "std": round(std, 4)}


def summarize_arrival(runs: Sequence[ArrivalRun]) -> dict[str, Any]:
    """Per policy: mean and std of the headline metrics and of seconds per run."""
    out: dict[str, Any] = {}
    for policy in dict.fromkeys(r.policy for r in runs):
        mine = [r for r in runs if r.policy == policy]
        out[policy] = {
            "unallocated_gpu_pct": mean_std([r.unallocated_pct for r in mine]),
            "fragmented_gpu_pct": mean_std([r.fragmented_pct for r in mine]),
            "failed_tasks": mean_std([r.failed_tasks for r in mine]),
            "seconds_per_run": mean_std([r.seconds for r in mine]),
            "runs": [r.summary() for r in mine],
        }
    return out


def arrival_curve(runs: Sequence[ArrivalRun], step: int = 1) -> list[dict[str, float]]:
    """Per policy and arrived % (0..max): mean allocation and fragmentation over the seeds."""
    rows: list[dict[str, Any]] = []
    for policy in dict.fromkeys(r.policy for r in runs):
        mine = [r for r in runs if r.policy == policy]
        top = int(max(r.arrived_milli[-1] for r in mine) * 100 // mine[0].capacity_milli)
        for pct in range(0, top + 1, step):
            alloc, frag = [], []
            for r in mine:
                a = np.round(r.arrived_milli / (r.capacity_milli / MILLI) / 10, 0)
                sel = a == pct
                if sel.any():
                    alloc.append(float((r.allocated_milli[sel] / r.capacity_milli * 100).mean()))
                    frag.append(float((r.fragmented_milli[sel] / r.capacity_milli * 100).mean()))
            if alloc:
                rows.append(
                    {
                        "policy": policy,
                        "arrived_pct": pct,
                        "allocated_pct": round(float(np.mean(alloc)), 4),
                        "fragmented_pct": round(float(np.mean(frag)), 4),
                    }
                )
    return rows


# --- time mode -------------------------------------------------------------------------------


@dataclass
class TimeRun:
    """One time-mode replay: per-task start times and a timeline of the cluster."""

    policy: str
    seed: int
    capacity_milli: int
    queueing_delay: FloatArray  # seconds, per started task
    rejected: dict[str, str]  # task name -> reason (bigger than any node)
    max_waiting: int
    timeline: list[tuple[float, int, int, int, float]] = field(default_factory=list)
    # (time, allocated milli, demanded milli, waiting tasks, fragmented milli)
    last_arrival: float = 0.0
    seconds: float = 0.0

    def _time_weighted(self, column: int) -> float:
        """Time-weighted mean of a timeline column over the arrival window (first to last
        arrival): after it the cluster only drains, which says nothing about the policy."""
        t = np.array([row[0] for row in self.timeline])
        v = np.array([row[column] for row in self.timeline], dtype=np.float64)
        keep = t <= self.last_arrival
        t, v = t[keep], v[keep]
        if len(t) < 2 or t[-1] <= t[0]:
            return float(v.mean()) if len(v) else float("nan")
        return float((v[:-1] * np.diff(t)).sum() / (t[-1] - t[0]))

    def summary(self) -> dict[str, Any]:
        delay = self.queueing_delay
        allocated = self._time_weighted(1)
        demanded = self._time_weighted(2)
        return {
            "seed": self.seed,
            "started_tasks": len(delay),
            "rejected_tasks": len(self.rejected),
            "delayed_tasks": int((delay > 0).sum()),
            "queueing_delay_s": {
                "mean": round(float(delay.mean()), 2) if len(delay) else 0.0,
                "p95": round(float(np.percentile(delay, 95)), 2) if len(delay) else 0.0,
                "max": round(float(delay.max()), 2) if len(delay) else 0.0,
            },
            "max_waiting_tasks": self.max_waiting,
            "gpu_allocated_pct_of_capacity": round(allocated / self.capacity_milli * 100, 4),
            "gpu_allocated_pct_of_demand": round(allocated / demanded * 100, 4)
            if demanded
            else 100.0,
            "fragmented_gpu_pct": round(self._time_weighted(4) / self.capacity_milli * 100, 4),
            "seconds": round(self.seconds, 3),
        }


def run_time(
    nodes: Sequence[Node],
    tasks: Sequence[TaskRequest],
    policy: str,
    seed: int,
    time_scale: float = 1.0,
    options: dict[str, Any] | None = None,
) -> TimeRun:
    """Replay on the trace's clock with FIFO queueing and backfill (see the module docstring).

    time_scale > 1 compresses the arrival times (durations unchanged), raising the load: the
    openb traces spread their pods over five months and barely load the cluster otherwise.
    """
    if time_scale <= 0:
        raise ValueError("time_scale must be positive")
    started = time.perf_counter()
    for task in tasks:
        if task.creation_time is None or task.deletion_time is None:
            raise ValueError(f"task {task.name}: time mode needs creation and deletion times")
    cluster = Cluster(nodes)
    typical = TypicalShapes.from_tasks(tasks)
    placer = Placer(
        cluster,
        make_policy(policy, typical=typical, **(options or {})),
        np.random.default_rng(seed),
    )
    tracker = FragmentationTracker(FragmentationModel(cluster, typical))
    run = TimeRun(policy, seed, cluster.gpu_capacity_milli, np.empty(0), {}, 0)

    # Events: (time, kind, index); departures (kind 0) free resources before arrivals (kind 1).
    arrival = [float(t.creation_time or 0.0) / time_scale for t in tasks]
    run.last_arrival = max(arrival, default=0.0)
    events: list[tuple[float, int, int]] = [(arrival[i], 1, i) for i in range(len(tasks))]
    heapq.heapify(events)
    waiting: list[int] = []
    allocations: dict[int, Any] = {}
    delays: list[float] = []
    demanded = 0

    def start(i: int, now: float) -> bool:
        task = tasks[i]
        alloc = placer.place(task)
        if alloc is None:
            return False
        allocations[i] = alloc
        tracker.refresh(alloc.node)
        delays.append(now - arrival[i])
        begin = task.scheduled_time if task.scheduled_time is not None else task.creation_time
        duration = max(0.0, float(task.deletion_time or 0.0) - float(begin or 0.0))
        heapq.heappush(events, (now + duration, 0, i))
        return True

    def drain(now: float) -> None:
        failed: set[Shape] = set()  # nothing frees up within one pass
        still: list[int] = []
        for i in waiting:
            shape = tasks[i].shape
            if shape in failed or not start(i, now):
                failed.add(shape)
                still.append(i)
        waiting[:] = still

    while events:
        now, kind, i = heapq.heappop(events)
        task = tasks[i]
        if kind == 0:
            alloc = allocations.pop(i)
            cluster.release(alloc)
            tracker.refresh(alloc.node)
            demanded -= task.gpu_total_milli
            drain(now)
        else:
            reason = too_big_reason(cluster, task)
            if reason is not None:
                run.rejected[task.name] = reason.text()
            else:
                demanded += task.gpu_total_milli
                if not start(i, now):
                    waiting.append(i)
        run.max_waiting = max(run.max_waiting, len(waiting))
        run.timeline.append(
            (now, cluster.allocated_gpu_milli, demanded, len(waiting), tracker.total_milli)
        )
    run.queueing_delay = np.array(delays, dtype=np.float64)
    run.seconds = time.perf_counter() - started
    return run
