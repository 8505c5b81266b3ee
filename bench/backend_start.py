"""Submit → Running of one JupyterLab on the local backend alone (no portal, no browser), with
the start-up CPU boost and without it, on the demo's ½-CPU size, runs alternating; each
stopped before the next. What `bench/launch.md` quotes for the backend's own share of a launch.

    .venv/bin/python bench/backend_start.py --runs 6
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduling.backends.base import TERMINAL_PHASES, Phase, Resources, WorkloadSpec  # noqa: E402
from scheduling.backends.local import DEFAULT_STARTUP_CPU_MILLI, LocalBackend  # noqa: E402


def start_once(backend: LocalBackend, home: Path) -> float:
    """Seconds from submit to Running; then stop and wait for it to end."""
    workload_id = str(uuid.uuid4())
    spec = WorkloadSpec(
        workload_id=workload_id, kind="notebook", app="jupyter", owner="bench",
        base_url=f"/nb/{workload_id}/", working_dir=str(home),
        resources=Resources(cpu_milli=500, memory_mib=1024),
    )  # fmt: skip
    start = time.perf_counter()
    handle = backend.submit(spec)
    while backend.observe([handle])[workload_id].phase != Phase.RUNNING:
        if time.perf_counter() - start > 120:
            raise SystemExit("JupyterLab was not Running within 120 s")
        time.sleep(0.05)
    took = time.perf_counter() - start
    backend.stop(handle)
    while backend.observe([handle])[workload_id].phase not in TERMINAL_PHASES:
        time.sleep(0.1)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="quanta-backend-start-"))
    backends = {
        "boost": LocalBackend(root / "boost", startup_cpu_milli=DEFAULT_STARTUP_CPU_MILLI),
        "no boost": LocalBackend(root / "plain", startup_cpu_milli=0),
    }
    print(f"isolation: {backends['boost'].isolation}")
    times: dict[str, list[float]] = {name: [] for name in backends}
    for run in range(args.runs):
        for name, backend in backends.items():
            times[name].append(start_once(backend, root / "home"))
            print(f"run {run + 1} {name}: Running after {times[name][-1]:.2f} s", flush=True)
    print("| ½-CPU JupyterLab, submit → Running | median (s) | min (s) | max (s) |")
    print("|---|---|---|---|")
    for name, values in times.items():
        print(
            f"| {name} | {statistics.median(values):.2f} | {min(values):.2f} | {max(values):.2f} |"
        )


if __name__ == "__main__":
    main()
