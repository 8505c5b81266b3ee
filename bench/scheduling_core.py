"""Time one scheduler-core session (scheduling.core.scheduler.schedule) as the cluster grows.

Snapshots are built from the openb traces: the GPU node list repeated to N nodes, pending jobs
of 1-4 tasks drawn from the default pod list (a quarter of them gangs), four weighted queues,
and R tasks already running (placed beforehand with bestfit). Each cell is the best of a few
sessions on one core, so other processes on the machine inflate it as little as possible.

    .venv/bin/python bench/scheduling_core.py              # the grid in bench/scheduling.md
    .venv/bin/python bench/scheduling_core.py --quick      # 1k and 10k nodes only
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path[0] = str(Path(__file__).resolve().parent.parent)

from scheduling.core.cluster import Cluster  # noqa: E402
from scheduling.core.model import Job, Node, Queue, Running, TaskRequest  # noqa: E402
from scheduling.core.placement import Placer  # noqa: E402
from scheduling.core.policies import RECOMMENDED, make_policy  # noqa: E402
from scheduling.core.scheduler import Snapshot, schedule  # noqa: E402
from scheduling.core.trace import load_nodes, load_tasks  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRACES = Path(os.environ.get("OPENB_TRACES", str(ROOT.parent / "shared" / "traces" / "openb")))
QUEUES = (Queue("q0", 1), Queue("q1", 2), Queue("q2", 3), Queue("q3", 4))


def build(
    base_nodes: list[Node],
    pods: list[TaskRequest],
    n_nodes: int,
    n_jobs: int,
    n_running: int,
    policy: str,
    seed: int = 0,
) -> Snapshot:
    """A snapshot of n_nodes nodes, n_jobs pending jobs and n_running running tasks."""
    rng = np.random.default_rng(seed)
    nodes = [
        Node(
            f"{base.name}-{i // len(base_nodes)}",
            base.cpu_milli,
            base.memory_mib,
            base.gpu_count,
            base.gpu_model,
        )
        for i, base in ((i, base_nodes[i % len(base_nodes)]) for i in range(n_nodes))
    ]
    gpu_pods = [p for p in pods if p.num_gpu]

    def draw(prefix: str, k: int) -> tuple[TaskRequest, ...]:
        proto = gpu_pods[int(rng.integers(len(gpu_pods)))]
        return tuple(
            TaskRequest(
                f"{prefix}-{t}",
                proto.cpu_milli,
                proto.memory_mib,
                proto.num_gpu,
                proto.gpu_milli,
                proto.gpu_models,
            )
            for t in range(k)
        )

    running: list[Running] = []
    if n_running:
        cluster = Cluster(nodes)
        placer = Placer(cluster, make_policy("bestfit"), np.random.default_rng(seed))
        i = 0
        while len(running) < n_running:
            tasks = draw(f"r{i}", 1)
            i += 1
            alloc = placer.place(tasks[0])
            if alloc is None:
                continue
            job = Job(f"r{i}", tasks, queue=QUEUES[i % 4].name, order=-i)
            running.append(Running(job, tasks[0], nodes[alloc.node].name, alloc.devices))
    jobs = []
    for j in range(n_jobs):
        size = int(rng.choice([1, 1, 1, 2, 4]))
        tasks = draw(f"j{j}", size)
        jobs.append(
            Job(
                f"j{j}",
                tasks,
                queue=QUEUES[j % 4].name,
                min_available=size,
                priority=int(rng.integers(2)),
                order=j,
            )
        )
    return Snapshot(nodes, QUEUES, jobs, running, policy=policy, seed=seed)


def timed(snap: Snapshot, repeat: int) -> tuple[float, int]:
    best = float("inf")
    placed = 0
    for _ in range(repeat):
        started = time.perf_counter()
        decision = schedule(snap)
        best = min(best, time.perf_counter() - started)
        placed = len(decision.placements)
    return best, placed


def grid(quick: bool) -> list[tuple[int, int, int]]:
    nodes = [1_000, 10_000] if quick else [1_000, 5_000, 10_000, 50_000]
    cells = [(n, 1_000, 0) for n in nodes]
    cells += [(10_000, j, 0) for j in (250, 2_000)]
    cells += [(10_000, 1_000, r) for r in (1_000, 3_000)]
    return cells


def run_grid(policy: str, repeat: int = 2, quick: bool = False) -> list[dict[str, Any]]:
    """Time every cell of the grid; one row per cell."""
    base = load_nodes(TRACES / "openb_node_list_gpu_node.csv")
    pods = load_tasks(TRACES / "openb_pod_list_default.csv")
    rows: list[dict[str, Any]] = []
    for n, j, r in grid(quick):
        snap = build(base, pods, n, j, r, policy)
        seconds, placed = timed(snap, repeat)
        rows.append(
            {
                "nodes": n,
                "jobs": j,
                "running": r,
                "seconds": round(seconds, 3),
                "placements": placed,
            }
        )
        print(f"{n} nodes, {j} jobs, {r} running: {seconds:.2f} s ({placed} placed)", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", default=RECOMMENDED)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = run_grid(args.policy, args.repeat, args.quick)
    if args.json:
        args.json.write_text(json.dumps({"policy": args.policy, "cells": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
