"""GPU utilisation per device: read from the cluster's backend (``UtilisationBackend``:
NVML, DCGM through Prometheus, or the simulation) and kept as a short history.

Rows stay bounded: readings are kept as taken for ``GPU_FULL_RESOLUTION_MINUTES`` (and up to
one bucket more), averaged into one row per ``GPU_DOWNSAMPLE_MINUTES`` after that (a bucket
once it is wholly past that window), and deleted after
``GPU_HISTORY_HOURS`` (``compact``). A device therefore holds at most about
full-resolution / sample-interval + history / bucket rows, whatever the uptime.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from scheduling.backends.base import GpuReading, UtilisationBackend
from scheduling.backends.registry import get_backend
from scheduling.models import Cluster, GpuDevice, GpuSample

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeviceReading:
    """A reading matched to the portal's row for its device (by id: a tick over thousands of
    devices builds no model instances for them)."""

    device_id: int
    reading: GpuReading


def read(cluster: Cluster) -> list[DeviceReading]:
    """The cluster's devices now, as its backend reads them; ``[]`` where the backend has no
    utilisation source or the source has no reading (never raises for that)."""
    try:
        backend = get_backend(cluster)
        if not isinstance(backend, UtilisationBackend):
            return []
        readings = backend.gpu_readings()
    except Exception:  # a broken cluster or source must not stop the sampling of the others
        log.exception("cluster %s: reading GPU utilisation failed", cluster.slug)
        return []
    if not readings:
        return []
    devices = {
        (node, index): pk
        for pk, node, index in GpuDevice.objects.filter(
            node__cluster=cluster, node__gone_at__isnull=True
        ).values_list("pk", "node__name", "index")
    }
    matched = []
    for reading in readings:
        device_id = devices.get((reading.node, reading.index))
        if device_id is not None:
            matched.append(DeviceReading(device_id, reading))
    return matched


def record(readings: Sequence[DeviceReading], now: dt.datetime) -> int:
    """One GpuSample per reading at ``now``; how many."""
    GpuSample.objects.bulk_create(
        [
            GpuSample(
                device_id=r.device_id,
                time=now,
                utilisation=max(0, min(100, r.reading.utilisation)),
                memory_used_mib=max(0, r.reading.memory_used_mib),
            )
            for r in readings
        ],
        batch_size=500,
    )
    return len(readings)


def compact(model: type[models.Model], key: str, now: dt.datetime | None = None) -> tuple[int, int]:
    """Keep a sample history bounded (GpuSample by ``device``, WorkloadGpuSample by
    ``workload``): rows older than the full-resolution window become one mean row per
    key and bucket, rows older than the history are deleted. (rows deleted, rows made)."""
    now = now or timezone.now()
    bucket = dt.timedelta(minutes=settings.GPU_DOWNSAMPLE_MINUTES)
    manager = model._default_manager
    kept_from = now - dt.timedelta(hours=settings.GPU_HISTORY_HOURS)
    deleted, _ = manager.filter(time__lt=kept_from).delete()
    step = int(bucket.total_seconds())
    # Whole buckets only, each once: the boundary is the start of the bucket the
    # full-resolution window's edge falls in.
    edge = (now - dt.timedelta(minutes=settings.GPU_FULL_RESOLUTION_MINUTES)).timestamp()
    cutoff = dt.datetime.fromtimestamp(edge // step * step, tz=dt.UTC)
    rows = list(
        manager.filter(time__lt=cutoff, span_seconds__lt=step).values_list(
            "pk", f"{key}_id", "time", "utilisation", "memory_used_mib"
        )
    )
    if not rows:
        return deleted, 0
    groups: dict[tuple[object, dt.datetime], list[tuple[int, int, int]]] = defaultdict(list)
    for pk, owner, time, utilisation, memory in rows:
        start = dt.datetime.fromtimestamp(time.timestamp() // step * step, tz=dt.UTC)
        groups[(owner, start)].append((pk, utilisation, memory))
    made = [
        model(
            **{f"{key}_id": owner},
            time=start,
            utilisation=round(sum(u for _pk, u, _m in group) / len(group)),
            memory_used_mib=round(sum(m for _pk, _u, m in group) / len(group)),
            span_seconds=step,
        )
        for (owner, start), group in groups.items()
    ]
    with transaction.atomic():
        ids = [pk for pk, *_rest in rows]
        for first in range(0, len(ids), 500):
            manager.filter(pk__in=ids[first : first + 500]).delete()
        manager.bulk_create(made, batch_size=500)
    return deleted + len(rows), len(made)


def latest(devices: Sequence[GpuDevice], now: dt.datetime | None = None) -> dict[int, GpuSample]:
    """Each device's newest sample, if it is recent (three sample intervals); by device id."""
    now = now or timezone.now()
    fresh = now - dt.timedelta(seconds=3 * settings.GPU_SAMPLE_SECONDS)
    newest: dict[int, GpuSample] = {}
    for sample in GpuSample.objects.filter(device__in=devices, time__gte=fresh).order_by("time"):
        newest[sample.device_id] = sample
    return newest


def history(
    devices: Sequence[GpuDevice], *, since: dt.datetime
) -> dict[int, list[tuple[dt.datetime, int]]]:
    """(time, utilisation %) per device since ``since``, oldest first; by device id."""
    series: dict[int, list[tuple[dt.datetime, int]]] = defaultdict(list)
    rows = (
        GpuSample.objects.filter(device__in=devices, time__gte=since)
        .order_by("time")
        .values_list("device_id", "time", "utilisation")
    )
    for device_id, time, utilisation in rows:
        series[device_id].append((time, utilisation))
    return series
