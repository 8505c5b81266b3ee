"""Activity that keeps an environment from being culled as idle.

JupyterLab reports its own kernel and terminal activity (the backend's ``Observation``); the
other apps (VS Code, a desktop, an SSH session) are used through the portal, so the notebook
proxy and the SSH gateway call :func:`record_activity` as traffic passes. The last activity
only ever moves forward, whoever reports it. Writes are throttled per workload (one UPDATE per
``ACTIVITY_WRITE_SECONDS`` at most), so a busy WebSocket costs no database load.
"""

from __future__ import annotations

import datetime as dt
import uuid

from django.core.cache import cache
from django.db.models import Q
from django.utils import timezone

from workloads.models import Workload

ACTIVITY_WRITE_SECONDS = 30


def advance_activity(workload_id: uuid.UUID | str, at: dt.datetime) -> bool:
    """Move ``last_activity_at`` forward to ``at`` (never back). True when it moved."""
    moved = (
        Workload.objects.filter(pk=workload_id)
        .filter(Q(last_activity_at__isnull=True) | Q(last_activity_at__lt=at))
        .update(last_activity_at=at)
    )
    return bool(moved)


def record_activity(workload_id: uuid.UUID | str, at: dt.datetime | None = None) -> bool:
    """Someone used the workload now (proxy traffic, an SSH session). Throttled: True when
    this call wrote, False when a write within the last ``ACTIVITY_WRITE_SECONDS`` covers it."""
    if not cache.add(f"quanta:activity:{workload_id}", 1, ACTIVITY_WRITE_SECONDS):
        return False
    return advance_activity(workload_id, at or timezone.now())
