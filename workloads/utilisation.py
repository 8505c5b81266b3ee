"""GPU utilisation per workload: each device reading (``scheduling.utilisation``) is given to
the workloads that hold the device (the portal's allocations on local and simulated clusters,
the DCGM series' pod on Kubernetes), as one WorkloadGpuSample per workload and sampling: the
mean utilisation of its devices and the memory used on them.

``idle_since`` is what GPU-aware culling asks (``workloads.services.cull``): since when a
workload's GPUs have stayed below its threshold, from the samples alone, so a workload without
readings (no NVML, no Prometheus) is never taken for idle; ``idle_since_many`` answers it for
all the running workloads at once, in one query.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Avg, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from scheduling import utilisation as devices
from scheduling.models import Allocation, Cluster, GpuSample
from workloads.choices import HOLDING
from workloads.models import Workload, WorkloadGpuSample


@dataclass(frozen=True)
class Sampled:
    devices: int = 0
    workloads: int = 0


def sample(now: dt.datetime | None = None) -> Sampled:
    """Read every cluster's GPUs once and record the device and workload samples; then keep
    both histories bounded. How many of each were written."""
    now = now or timezone.now()
    total_devices = total_workloads = 0
    for cluster in Cluster.objects.order_by("pk"):
        readings = devices.read(cluster)
        if not readings:
            continue
        total_devices += devices.record(readings, now)
        total_workloads += _record_workloads(cluster, readings, now)
    devices.compact(GpuSample, "device", now)
    devices.compact(WorkloadGpuSample, "workload", now)
    return Sampled(total_devices, total_workloads)


def _record_workloads(
    cluster: Cluster, readings: Iterable[devices.DeviceReading], now: dt.datetime
) -> int:
    readings = list(readings)
    by_device = {r.device_id: r.reading for r in readings}
    holders: dict[str, set[int]] = defaultdict(set)  # workload id -> device ids
    for held_by, device_id in Allocation.objects.filter(
        device_id__in=by_device, workload__state__in=HOLDING
    ).values_list("workload_id", "device_id"):
        holders[str(held_by)].add(device_id)
    named = {w for r in readings for w in r.reading.workload_ids}
    if named:
        alive = {
            str(pk)
            for pk in Workload.objects.filter(
                pk__in=list(named), cluster=cluster, state__in=HOLDING
            ).values_list("pk", flat=True)
        }
        for r in readings:
            for named_id in r.reading.workload_ids:
                if named_id in alive:
                    holders[named_id].add(r.device_id)
    rows = []
    for workload_id, device_ids in holders.items():
        values = [by_device[d] for d in device_ids]
        rows.append(
            WorkloadGpuSample(
                workload_id=workload_id,
                time=now,
                utilisation=round(sum(v.utilisation for v in values) / len(values)),
                memory_used_mib=sum(v.memory_used_mib for v in values),
            )
        )
    WorkloadGpuSample.objects.bulk_create(rows, batch_size=500)
    return len(rows)


def fresh_after(now: dt.datetime) -> dt.datetime:
    """Samples older than this say nothing about now (three sample intervals)."""
    return now - dt.timedelta(seconds=3 * settings.GPU_SAMPLE_SECONDS)


def idle_since(
    workload: Workload, threshold: int, now: dt.datetime | None = None
) -> dt.datetime | None:
    """Since when every sample of ``workload`` has been below ``threshold`` percent, counting
    from its start or from when its owner last kept it, whichever is later. None while it is
    busy, or when there is no recent reading (no source: never idle on GPU grounds)."""
    return idle_since_many([workload], threshold, now).get(str(workload.pk))


def idle_since_many(
    workloads: Iterable[Workload], threshold: int | None = None, now: dt.datetime | None = None
) -> dict[str, dt.datetime | None]:
    """``idle_since`` of each of ``workloads`` (as stored), by workload id, in one query:
    below ``threshold`` percent, or, when it is None, below each workload's own
    ``gpu_idle_percent``."""
    now = now or timezone.now()
    ids = [w.pk for w in workloads]
    if not ids:
        return {}
    begun = Coalesce("started_at", "created_at")
    samples = WorkloadGpuSample.objects.filter(
        workload=OuterRef("pk"), time__gte=OuterRef("counted_from")
    )
    below = OuterRef("gpu_idle_percent") if threshold is None else Value(threshold)
    busy = samples.filter(utilisation__gte=below)

    def newest(rows: QuerySet[WorkloadGpuSample]) -> Subquery:
        return Subquery(rows.order_by("-time").values("time")[:1])

    def oldest(rows: QuerySet[WorkloadGpuSample]) -> Subquery:
        return Subquery(rows.order_by("time").values("time")[:1])

    rows = (
        Workload.objects.filter(pk__in=ids)
        # From its start, or from when its owner kept it if that came later.
        .annotate(counted_from=Greatest(begun, Coalesce("gpu_kept_at", begun)))
        .annotate(newest=newest(samples), last_busy=newest(busy))
        .annotate(
            first=oldest(samples),
            first_after_busy=oldest(samples.filter(time__gt=OuterRef("last_busy"))),
        )
        .values_list("pk", "newest", "last_busy", "first", "first_after_busy")
    )
    fresh = fresh_after(now)
    since: dict[str, dt.datetime | None] = {}
    for pk, last, last_busy, first, first_after_busy in rows:
        if last is None or last < fresh or (last_busy is not None and last_busy >= last):
            since[str(pk)] = None  # no recent reading, or busy now
        else:
            since[str(pk)] = first if last_busy is None else first_after_busy
    return since


def recent_mean(workloads: Iterable[Workload], minutes: int = 15) -> dict[str, int]:
    """Each workload's mean GPU utilisation over the last ``minutes`` (recent samples only),
    by workload id; workloads without readings are left out."""
    since = timezone.now() - dt.timedelta(minutes=minutes)
    rows = (
        WorkloadGpuSample.objects.filter(workload__in=list(workloads), time__gte=since)
        .values("workload_id")
        .annotate(mean=Avg("utilisation"))
    )
    return {str(r["workload_id"]): round(r["mean"]) for r in rows}


def history(workload: Workload, *, hours: int | None = None) -> list[WorkloadGpuSample]:
    """The workload's samples, oldest first (the last ``hours``; default: the history kept)."""
    since = timezone.now() - dt.timedelta(hours=hours or settings.GPU_HISTORY_HOURS)
    samples = WorkloadGpuSample.objects.filter(workload=workload, time__gte=since)
    return list(samples.order_by("time"))
