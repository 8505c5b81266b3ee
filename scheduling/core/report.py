"""Running replays over policies and seeds, and writing what they found (CSV, PNG, JSON).

Shared by the `replay` management command and bench/scheduling.py so both produce the same
files from the same runs. Runs are sequential: one core, one process.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import plots
from .model import Node, TaskRequest
from .plots import plot_arrival_curves, plot_time, plot_unallocated
from .replay import (
    ArrivalRun,
    TimeRun,
    arrival_curve,
    mean_std,
    run_arrival,
    run_time,
    summarize_arrival,
)

OnRun = Callable[[Any], None]


def arrival_runs(
    nodes: Sequence[Node],
    tasks: Sequence[TaskRequest],
    policies: Sequence[str],
    seeds: Sequence[int],
    target: float = 1.3,
    on_run: OnRun | None = None,
) -> list[ArrivalRun]:
    runs = []
    for policy in policies:
        for seed in seeds:
            run = run_arrival(nodes, tasks, policy, seed, target)
            runs.append(run)
            if on_run:
                on_run(run)
    return runs


def time_runs(
    nodes: Sequence[Node],
    tasks: Sequence[TaskRequest],
    policies: Sequence[str],
    seeds: Sequence[int],
    time_scale: float = 1.0,
    on_run: OnRun | None = None,
) -> list[TimeRun]:
    runs = []
    for policy in policies:
        for seed in seeds:
            run = run_time(nodes, tasks, policy, seed, time_scale)
            runs.append(run)
            if on_run:
                on_run(run)
    return runs


def _write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else [])
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_arrival(runs: Sequence[ArrivalRun], out: Path) -> list[Path]:
    """runs.csv (one row per policy and seed), curve.csv and two PNG plots (where
    matplotlib is installed)."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [{"policy": r.policy, **r.summary()} for r in runs]
    curve = arrival_curve(runs)
    files = [
        _write_csv(out / "arrival_runs.csv", rows),
        _write_csv(out / "arrival_curve.csv", curve),
    ]
    if plots.available():  # else the CSV only (plots.MISSING says why)
        files += [
            plot_arrival_curves(curve, out / "arrival_allocation.png"),
            plot_unallocated(summarize_arrival(runs), out / "arrival_unallocated.png"),
        ]
    return files


def _flat_time(run: TimeRun) -> dict[str, Any]:
    s = run.summary()
    delay = s.pop("queueing_delay_s")
    return {"policy": run.policy, **s, **{f"queueing_delay_{k}_s": v for k, v in delay.items()}}


def write_time(runs: Sequence[TimeRun], out: Path) -> list[Path]:
    """time_runs.csv (one row per policy and seed) and a PNG of allocation and waiting."""
    out.mkdir(parents=True, exist_ok=True)
    files = [_write_csv(out / "time_runs.csv", [_flat_time(r) for r in runs])]
    if plots.available():
        files.append(plot_time(runs, out / "time_timeline.png"))
    return files


def time_summary(runs: Sequence[TimeRun]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for policy in dict.fromkeys(r.policy for r in runs):
        mine = [r.summary() for r in runs if r.policy == policy]
        out[policy] = {
            "queueing_delay_mean_s": mean_std([m["queueing_delay_s"]["mean"] for m in mine]),
            "delayed_tasks": mean_std([m["delayed_tasks"] for m in mine]),
            "rejected_tasks": mean_std([m["rejected_tasks"] for m in mine]),
            "max_waiting_tasks": mean_std([m["max_waiting_tasks"] for m in mine]),
            "gpu_allocated_pct_of_demand": mean_std(
                [m["gpu_allocated_pct_of_demand"] for m in mine]
            ),
            "fragmented_gpu_pct": mean_std([m["fragmented_gpu_pct"] for m in mine]),
            "seconds_per_run": mean_std([m["seconds"] for m in mine]),
            "runs": mine,
        }
    return out
