"""What an endpoint's schedule asks at a moment: the minimum number of replicas its time
windows give (``ServingSpec.schedule``), used by the local gateway's autoscaler and by the
beat task that patches ``minReplicas`` on Kubernetes."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from scheduling.backends.base import ReplicaWindow


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
