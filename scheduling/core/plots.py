"""PNG plots of replays, drawn with matplotlib's object API on the Agg canvas (no pyplot, no
global backend state, safe in a web process or a test).

matplotlib is in the `local` extra, not in the web image: it is imported when a plot is drawn,
and :data:`MISSING` says why there are none where it is absent (the replay then writes its
CSV and JSON files only).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .replay import TimeRun

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MISSING = "matplotlib is not installed (pip install 'quanta[local]'): no PNG plots"


class PlotsUnavailable(RuntimeError):
    """matplotlib is not installed here."""


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _figure(**kwargs: Any) -> Figure:
    try:
        from matplotlib.figure import Figure as MatplotlibFigure
    except ImportError as exc:
        raise PlotsUnavailable(MISSING) from exc
    return MatplotlibFigure(**kwargs)


def _save(fig: Figure, path: Path) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def plot_arrival_curves(curve: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """GPU allocation and fragmentation against arrived workload, one line per policy."""
    fig = _figure(figsize=(10, 4.2))
    alloc_ax, frag_ax = fig.subplots(1, 2)
    for policy in dict.fromkeys(row["policy"] for row in curve):
        rows = [row for row in curve if row["policy"] == policy]
        x = [row["arrived_pct"] for row in rows]
        alloc_ax.plot(x, [row["allocated_pct"] for row in rows], label=policy)
        frag_ax.plot(x, [row["fragmented_pct"] for row in rows], label=policy)
    top = max((row["arrived_pct"] for row in curve), default=100)
    alloc_ax.plot([0, 100], [0, 100], color="grey", linestyle=":", linewidth=1)
    alloc_ax.axvline(100, color="grey", linewidth=0.8)
    alloc_ax.set(xlabel="arrived GPU demand (% of capacity)", ylabel="GPU allocated (%)")
    alloc_ax.set_xlim(0, top)
    frag_ax.set(xlabel="arrived GPU demand (% of capacity)", ylabel="fragmented GPU (%)")
    frag_ax.set_xlim(0, top)
    alloc_ax.legend(loc="lower right", fontsize="small")
    alloc_ax.set_title("GPU allocation ratio (mean over seeds)")
    frag_ax.set_title("Fragmentation (paper's measure)")
    return _save(fig, path)


def plot_unallocated(summary: Mapping[str, Mapping[str, Any]], path: Path) -> Path:
    """Unallocated GPU % at arrived = 100 %: mean and standard deviation per policy."""
    fig = _figure(figsize=(6, 3.6))
    ax = fig.subplots()
    names = list(summary)
    means = [summary[n]["unallocated_gpu_pct"]["mean"] for n in names]
    stds = [summary[n]["unallocated_gpu_pct"]["std"] for n in names]
    ax.bar(names, means, yerr=stds, capsize=4, color="#4c72b0")
    for i, m in enumerate(means):
        ax.text(i, m, f"{m:.2f}", ha="center", va="bottom", fontsize="small")
    ax.set(ylabel="unallocated GPU (%)", title="Unallocated GPU at arrived = 100 %")
    return _save(fig, path)


def plot_time(runs: Sequence[TimeRun], path: Path) -> Path:
    """Allocated GPU and waiting tasks over trace time, one line per policy (first seed)."""
    fig = _figure(figsize=(10, 4.2))
    alloc_ax, wait_ax = fig.subplots(1, 2)
    seen: set[str] = set()
    for run in runs:
        if run.policy in seen or not run.timeline:
            continue
        seen.add(run.policy)
        t = np.array([row[0] for row in run.timeline]) / 3600.0
        alloc = np.array([row[1] for row in run.timeline]) / run.capacity_milli * 100
        waiting = np.array([row[3] for row in run.timeline])
        alloc_ax.step(t, alloc, where="post", label=run.policy, linewidth=0.8)
        wait_ax.step(t, waiting, where="post", label=run.policy, linewidth=0.8)
    alloc_ax.set(xlabel="trace time (h)", ylabel="GPU allocated (% of capacity)")
    wait_ax.set(xlabel="trace time (h)", ylabel="waiting tasks")
    alloc_ax.legend(fontsize="small")
    return _save(fig, path)
