"""The simulated backend: a cluster of many nodes that exists only on paper.

Nodes come from a node list (the openb CSV format) or a generated mix; the portal's own
admission places work on them with the scheduler core, exactly as on the local cluster.
Workloads "run" on a clock that is real time times a speed-up: a job finishes after its
simulated duration (``QUANTA_SIM_DURATION`` seconds in its environment, else the cluster's
default), an environment runs until it is stopped. Nothing executes, nothing can be opened,
and everything it shows is labelled simulated. Its state is a small JSON file per workload,
so a restarted portal re-attaches like it does to real processes.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from scheduling import reasons as R
from scheduling.backends.base import (
    BackendError,
    Endpoint,
    GpuInfo,
    GpuReading,
    Handle,
    LogChunk,
    NodeInfo,
    Observation,
    Phase,
    WorkloadSpec,
)
from scheduling.core.trace import load_nodes

DEFAULT_MIX: tuple[Mapping[str, Any], ...] = (
    {
        "count": 8,
        "gpus": 8,
        "model": "A100",
        "gpu_memory_mib": 40960,
        "cpu_milli": 96000,
        "memory_mib": 786432,
    },
    {
        "count": 8,
        "gpus": 8,
        "model": "V100M32",
        "gpu_memory_mib": 32768,
        "cpu_milli": 64000,
        "memory_mib": 524288,
    },
)
GPU_MEMORY_BY_MODEL = {
    "A100": 40960,
    "V100M32": 32768,
    "V100M16": 16384,
    "P100": 16384,
    "T4": 15360,
    "G1": 16384,
    "G2": 24576,
    "G3": 32768,
}


class SimulatedBackend:
    kind = "simulated"
    apps: frozenset[str] | None = None  # paper workloads: any kind "runs"

    def __init__(
        self,
        root: Path,
        *,
        nodes_csv: str | None = None,
        mix: Sequence[Mapping[str, Any]] = DEFAULT_MIX,
        speedup: float = 60.0,
        default_duration_s: float = 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.root = Path(root)
        self.nodes_csv = nodes_csv
        self.mix = tuple(mix)
        self.speedup = speedup
        self.default_duration_s = default_duration_s
        self.clock = clock
        self._nodes: tuple[NodeInfo, ...] | None = None

    # --- state files -------------------------------------------------------------------------

    def _path(self, workload_id: str) -> Path:
        return self.root / f"{workload_id}.json"

    def _load(self, workload_id: str) -> dict[str, Any] | None:
        try:
            loaded: dict[str, Any] = json.loads(self._path(workload_id).read_text())
        except (OSError, ValueError):
            return None
        return loaded

    def _save(self, state: dict[str, Any]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self._path(state["workload_id"])
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, path)

    # --- the contract ------------------------------------------------------------------------

    def submit(self, spec: WorkloadSpec) -> Handle:
        if spec.kind == "serving":
            raise BackendError("model serving is not simulated yet")
        current = self._load(spec.workload_id)
        if current is not None and current["attempt"] >= spec.attempt:
            return Handle(spec.workload_id, current)
        try:
            duration = float(spec.env.get("QUANTA_SIM_DURATION", self.default_duration_s))
        except ValueError:
            raise BackendError("QUANTA_SIM_DURATION must be a number of seconds") from None
        state = {
            "workload_id": spec.workload_id,
            "kind": spec.kind,
            "attempt": spec.attempt,
            "started": self.clock(),
            "duration_s": duration if spec.kind == "job" else None,
            "stopped": None,
            "nodes": sorted({p.node for p in spec.placement}),
            # [node, GPU index, share in thousandths]: what its made-up utilisation lands on.
            "devices": [
                [p.node, i, spec.resources.gpu_milli or 1000]
                for p in spec.placement
                for i in p.gpu_indices
            ],
            "workers": spec.workers,
        }
        self._save(state)
        return Handle(spec.workload_id, state)

    def stop(self, handle: Handle) -> None:
        state = self._load(handle.workload_id)
        if state is None or state["stopped"] is not None or self._finished(state):
            return
        state["stopped"] = self.clock()
        self._save(state)

    def observe(self, handles: Sequence[Handle]) -> dict[str, Observation]:
        return {h.workload_id: self._observe(h.workload_id) for h in handles}

    def _elapsed(self, state: Mapping[str, Any], until: float | None = None) -> float:
        end = until if until is not None else self.clock()
        return max(0.0, (end - float(state["started"])) * self.speedup)

    def _finished(self, state: Mapping[str, Any]) -> bool:
        return state["duration_s"] is not None and self._elapsed(state) >= state["duration_s"]

    def _observe(self, workload_id: str) -> Observation:
        state = self._load(workload_id)
        if state is None:
            return Observation(workload_id, Phase.UNKNOWN)
        attempt = int(state["attempt"])
        if state["stopped"] is not None:
            return Observation(workload_id, Phase.STOPPED, R.STOPPED_SIMULATED(), attempt=attempt)
        if self._finished(state):
            return Observation(
                workload_id,
                Phase.SUCCEEDED,
                R.FINISHED_SIMULATED(n=f"{state['duration_s'] / 60:g}"),
                exit_code=0,
                attempt=attempt,
            )
        where = ", ".join(state["nodes"]) or R.THE_SIMULATED_CLUSTER()
        return Observation(
            workload_id, Phase.RUNNING, R.RUNNING_SIMULATED(where=where), attempt=attempt
        )

    def endpoint(self, handle: Handle) -> Endpoint | None:
        return None  # nothing runs, nothing to open

    def logs(self, handle: Handle, task: int = 0, offset: int = 0, limit: int = 65536) -> LogChunk:
        state = self._load(handle.workload_id)
        if state is None:
            return LogChunk("", offset, 0)
        lines = [f"[simulated] task {task} started on {', '.join(state['nodes']) or '?'}"]
        elapsed = self._elapsed(state, state["stopped"])
        if state["duration_s"]:
            share = min(1.0, elapsed / state["duration_s"])
            lines.append(f"[simulated] {share:.0%} done after {elapsed / 60:.1f} simulated minutes")
        text = "\n".join(lines) + "\n"
        return LogChunk(
            text[offset : offset + limit], min(len(text), offset + limit), int(state["workers"])
        )

    def nodes(self) -> tuple[NodeInfo, ...]:
        if self._nodes is None:
            self._nodes = tuple(self._load_nodes())
        return self._nodes

    def _load_nodes(self) -> list[NodeInfo]:
        if self.nodes_csv:
            return [
                NodeInfo(
                    n.name,
                    n.cpu_milli,
                    n.memory_mib,
                    tuple(
                        GpuInfo(i, n.gpu_model, GPU_MEMORY_BY_MODEL.get(n.gpu_model, 16384))
                        for i in range(n.gpu_count)
                    ),
                    labels={"quanta.io/simulated": "true"},
                )
                for n in load_nodes(self.nodes_csv)
            ]
        nodes = []
        for group in self.mix:
            prefix = str(group.get("prefix") or group["model"].lower())
            for k in range(int(group["count"])):
                nodes.append(
                    NodeInfo(
                        f"sim-{prefix}-{k:02d}",
                        int(group["cpu_milli"]),
                        int(group["memory_mib"]),
                        tuple(
                            GpuInfo(i, str(group["model"]), int(group["gpu_memory_mib"]))
                            for i in range(int(group["gpus"]))
                        ),
                        labels={"quanta.io/simulated": "true"},
                    )
                )
        return nodes

    def gpu_readings(self) -> tuple[GpuReading, ...]:
        """Plausible made-up readings, so the demo's pages and GPU-aware culling have data:
        each running workload keeps its devices busy at a level of its own that drifts from
        minute to minute, except one environment in four, which sits idle (a forgotten
        notebook); devices without work are not reported."""
        memory = {(n.name, g.index): g.memory_mib for n in self.nodes() for g in n.gpus}
        busy: dict[tuple[str, int], list[float]] = {}
        used: dict[tuple[str, int], float] = {}
        minute = int(self.clock() // 60)
        for workload_id in self.running():
            state = self._load(workload_id) or {}
            seed = _unit(workload_id)
            idle = state.get("kind") == "notebook" and seed < 0.25
            level = 0.0 if idle else 35 + 55 * seed + 10 * (_unit(f"{workload_id}:{minute}") - 0.5)
            for node, index, milli in state.get("devices", []):
                key = (node, int(index))
                busy.setdefault(key, []).append(level * int(milli) / 1000)
                used[key] = used.get(key, 0.0) + (0.1 if idle else 0.6) * int(milli) / 1000
        return tuple(
            GpuReading(
                node,
                index,
                max(0, min(100, round(sum(busy.get((node, index), [0.0]))))),
                round(total * min(1.0, used.get((node, index), 0.0))),
            )
            for (node, index), total in sorted(memory.items())
            if (node, index) in busy
        )

    def running(self) -> set[str]:
        if not self.root.is_dir():
            return set()
        live = set()
        for path in self.root.glob("*.json"):
            state = self._load(path.stem)
            if state and state["stopped"] is None and not self._finished(state):
                live.add(path.stem)
        return live


def _unit(text: str) -> float:
    """A number in [0, 1) fixed by ``text``: the same workload reads alike in every process."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=4).digest()) / 2**32
