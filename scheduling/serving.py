"""What an endpoint's schedule asks at a moment: the minimum number of replicas its time
windows give (``ServingSpec.schedule``), used by the local gateway's autoscaler and by the
beat task that patches ``minReplicas`` on Kubernetes (``scheduling.tasks.apply_serving_schedules``).

That task lives below workloads (layers), so it learns which serving workloads run where
through a registry: workloads registers a callable (``register_serving_specs``) in its
AppConfig.ready() that yields a :class:`ServingTarget` per serving workload alive on a cluster.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from scheduling.backends.base import Handle, ReplicaWindow, ServingSpec

log = logging.getLogger(__name__)


def _inside(window: ReplicaWindow, local: dt.datetime) -> bool:
    now, today = local.time(), local.weekday()
    if window.start < window.end:
        return today in window.days and window.start <= now < window.end
    # Across midnight: from start on one of its days to end on the next day.
    yesterday = (today - 1) % 7
    return (today in window.days and now >= window.start) or (
        yesterday in window.days and now < window.end
    )


def min_replicas_at(
    base: int, schedule: Sequence[ReplicaWindow], moment: dt.datetime, tz: Any
) -> int:
    """``base``, raised to the largest ``min_replicas`` of the windows ``moment`` is in (local
    time in ``tz``)."""
    local = moment.astimezone(tz)
    return max([base, *(w.min_replicas for w in schedule if _inside(w, local))])


def next_change(
    schedule: Sequence[ReplicaWindow], moment: dt.datetime, tz: Any
) -> dt.datetime | None:
    """The next local time after ``moment`` at which a window opens or closes (within a
    week); None without windows."""
    if not schedule:
        return None
    local = moment.astimezone(tz)
    best: dt.datetime | None = None
    for offset in range(8):
        day = local.date() + dt.timedelta(days=offset)
        for window in schedule:
            for at in (window.start, window.end):
                edge = dt.datetime.combine(day, at, tzinfo=tz)
                if edge > local and (best is None or edge < best):
                    best = edge
    return best


def scheduled_replicas(serving: ServingSpec, moment: dt.datetime, tz: Any) -> tuple[int, int]:
    """(min, max) replicas an endpoint should have at ``moment``: its minimum raised by the
    windows it is in, never above its maximum (a window asking more than the endpoint may
    have gets the maximum)."""
    high = max(serving.max_replicas, 1)
    low = min_replicas_at(serving.min_replicas, serving.schedule, moment, tz)
    return min(low, high), high


# --- who serves what (filled by workloads) ------------------------------------------------------


@dataclass(frozen=True)
class ServingTarget:
    """One serving workload alive on a cluster, as the schedule task needs it."""

    cluster_id: int
    handle: Handle  # the backend's handle (``Workload.backend_state``)
    serving: ServingSpec


ServingSource = Callable[[], Iterable[ServingTarget]]
_sources: list[ServingSource] = []


def register_serving_specs(source: ServingSource) -> None:
    """Add a source of serving workloads (idempotent: the same callable counts once)."""
    if source not in _sources:
        _sources.append(source)


def unregister_serving_specs(source: ServingSource) -> None:
    if source in _sources:
        _sources.remove(source)


def serving_targets() -> list[ServingTarget] | None:
    """Every registered source's serving workloads; None when nothing is registered (the
    layer that knows the workloads has not hooked in)."""
    if not _sources:
        return None
    return [target for source in list(_sources) for target in source()]
