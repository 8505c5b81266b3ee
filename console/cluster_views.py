"""Admin console pages for clusters: the overview (GPUs allocated now, fragmented capacity,
GPUs allocated over the last days), hosts with their GPUs (cordon / uncordon) and queues.

For superusers, the platform's operators. Changes go through ``scheduling.services``, as the
inventory API's do.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Count, Prefetch, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from core.guards import console_context, superuser_required
from scheduling import services, utilisation
from scheduling.models import Allocation, Cluster, GpuDevice, Node, PriorityClass, Queue
from workloads.choices import HOLDING, WAITING
from workloads.models import Workload

HISTORY_DAYS = 7
HISTORY_STEP = dt.timedelta(hours=1)
UTILISATION_HOURS = 6  # the hosts page's per-device chart
NODES_PER_PAGE = 24


# --- GPUs allocated over time ------------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    """Whole-GPU equivalents held from ``start`` to ``end`` (None: still held)."""

    start: dt.datetime
    end: dt.datetime | None
    gpus: float


def gpus_allocated_over_time(
    intervals: Iterable[Interval], *, start: dt.datetime, end: dt.datetime, step: dt.timedelta
) -> list[tuple[dt.datetime, float]]:
    """The average number of GPUs allocated in each step from ``start`` to ``end``.

    Each step's value is the GPU-time held in it divided by its length, so a GPU held for
    half of an hour counts 0.5 in that hour. The last step ends at ``end`` and may be shorter.
    """
    if end <= start or step <= dt.timedelta(0):
        return []
    count = math.ceil((end - start) / step)
    held = [0.0] * count  # GPU-seconds in each step
    for interval in intervals:
        begin, finish = max(interval.start, start), min(interval.end or end, end)
        if finish <= begin or interval.gpus <= 0:
            continue
        i = (begin - start) // step
        while i < count and start + i * step < finish:
            low = start + i * step
            high = min(low + step, end)
            held[i] += interval.gpus * (min(finish, high) - max(begin, low)).total_seconds()
            i += 1
    series = []
    for i in range(count):
        low = start + i * step
        length = (min(low + step, end) - low).total_seconds()
        series.append((low, round(held[i] / length, 3)))
    return series


def allocation_history(
    clusters: Sequence[Cluster],
    *,
    now: dt.datetime,
    days: int = HISTORY_DAYS,
    step: dt.timedelta = HISTORY_STEP,
) -> dict[int, list[tuple[dt.datetime, float]]]:
    """GPUs allocated per cluster in each step of the last ``days``, from the workloads'
    running intervals and their flavors' GPU equivalents (one query for all clusters)."""
    local = timezone.localtime(now)
    start = local.replace(minute=0, second=0, microsecond=0) - dt.timedelta(days=days) + step
    return allocation_series(clusters, start=start, now=now, step=step)


def allocation_series(
    clusters: Sequence[Cluster], *, start: dt.datetime, now: dt.datetime, step: dt.timedelta
) -> dict[int, list[tuple[dt.datetime, float]]]:
    """GPUs allocated per cluster in each ``step`` from ``start`` to ``now`` (one query)."""
    rows = (
        Workload.objects.filter(cluster__in=clusters, started_at__isnull=False, started_at__lt=now)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=start))
        .values_list(
            "cluster_id",
            "started_at",
            "finished_at",
            "workers",
            "flavor__gpus",
            "flavor__gpu_milli",
        )
    )
    by_cluster: dict[int, list[Interval]] = defaultdict(list)
    for cluster_id, started, finished, workers, gpus, milli in rows:
        assert started is not None  # the query takes started work only
        per_task = gpus if gpus else milli / 1000
        by_cluster[cluster_id].append(Interval(started, finished, per_task * workers))
    return {
        c.pk: gpus_allocated_over_time(by_cluster[c.pk], start=start, end=now, step=step)
        for c in clusters
    }


# --- Overview ----------------------------------------------------------------------------------


@dataclass
class ModelUse:
    """One GPU model of one cluster: how much is allocated and how much is stranded."""

    model: str
    devices: int = 0
    allocated_milli: int = 0
    partly_used: int = 0  # devices neither empty nor full
    stranded_milli: int = 0  # free share on those devices

    @property
    def allocated(self) -> float:
        return self.allocated_milli / 1000

    @property
    def free(self) -> float:
        return self.devices - self.allocated

    @property
    def fragmented(self) -> float:
        return self.stranded_milli / 1000

    @property
    def percent(self) -> int:
        return round(self.allocated_milli / (self.devices * 10)) if self.devices else 0


@dataclass
class ClusterSummary:
    cluster: Cluster
    models: list[ModelUse] = field(default_factory=list)
    nodes: int = 0
    cordoned: int = 0
    running: int = 0
    waiting: int = 0
    chart: dict[str, Any] = field(default_factory=dict)

    @property
    def total(self) -> ModelUse:
        total = ModelUse(_("All models"))
        for use in self.models:
            total.devices += use.devices
            total.allocated_milli += use.allocated_milli
            total.partly_used += use.partly_used
            total.stranded_milli += use.stranded_milli
        return total


def cluster_summaries(clusters: Sequence[Cluster]) -> dict[int, ClusterSummary]:
    """Per cluster: GPUs allocated and stranded per model, nodes, cordons, work holding and
    waiting (four queries for any number of clusters)."""
    summaries = {c.pk: ClusterSummary(c) for c in clusters}
    uses: dict[tuple[int, str], ModelUse] = {}
    devices = (
        GpuDevice.objects.with_allocated()
        .filter(node__gone_at__isnull=True, node__cluster__in=clusters)
        # The plugin does not see annotations added inside a QuerySet method (allocated_milli,
        # by with_allocated()), so it reports the name as no field; the query is right.
        .values_list("node__cluster_id", "model", "allocated_milli")  # type: ignore[misc]
    )
    for cluster_id, model, milli in devices:
        use = uses.setdefault((cluster_id, model), ModelUse(model))
        milli = min(milli, 1000)
        use.devices += 1
        use.allocated_milli += milli
        if 0 < milli < 1000:
            use.partly_used += 1
            use.stranded_milli += 1000 - milli
    for (cluster_id, _model), use in sorted(uses.items(), key=lambda item: item[0]):
        summaries[cluster_id].models.append(use)
    for row in (
        Node.objects.filter(gone_at__isnull=True, cluster__in=clusters)
        .values("cluster_id")
        .annotate(n=Count("pk"), cordoned=Count("pk", filter=Q(cordoned=True)))
    ):
        summaries[row["cluster_id"]].nodes = row["n"]
        summaries[row["cluster_id"]].cordoned = row["cordoned"]
    for counts in (
        Workload.objects.filter(state__in=WAITING + HOLDING, cluster__in=clusters)
        .values("cluster_id")
        .annotate(
            running=Count("pk", filter=Q(state__in=HOLDING)),
            waiting=Count("pk", filter=Q(state__in=WAITING)),
        )
    ):
        summaries[counts["cluster_id"]].running = counts["running"]
        summaries[counts["cluster_id"]].waiting = counts["waiting"]
    return summaries


@superuser_required
def overview(request: HttpRequest) -> HttpResponse:
    clusters = list(Cluster.objects.order_by("name"))
    summaries = cluster_summaries(clusters)
    history = allocation_history(clusters, now=timezone.now())
    for cluster in clusters:
        summary = summaries[cluster.pk]
        series = history[cluster.pk]
        summary.chart = {
            "label": str(_("GPUs allocated")),
            "capacityLabel": str(_("GPUs in the cluster")),
            "capacity": summary.total.devices,
            "labels": [date_format(timezone.localtime(t), "D H:i") for t, _v in series],
            "values": [v for _t, v in series],
            "peak": max((v for _t, v in series), default=0),
        }
    return render(
        request,
        "console/overview.html",
        {
            **console_context(request, "overview"),
            "summaries": list(summaries.values()),
            "history_days": HISTORY_DAYS,
        },
    )


# --- Hosts and GPUs ----------------------------------------------------------------------------


def _nodes() -> QuerySet[Node]:
    """Nodes with what is allocated on them, their GPUs with the allocations on each and the
    workloads holding them: a fixed number of queries for any number of nodes."""
    allocations = Allocation.objects.select_related("workload__owner").order_by("workload__name")
    devices = GpuDevice.objects.with_allocated().prefetch_related(
        Prefetch("allocations", allocations)
    )
    return Node.objects.with_allocations(devices).order_by("cluster__name", "name")


def _percent(part: float, whole: float) -> int:
    return min(100, round(part * 100 / whole)) if whole else 0


def _isolation(labels: dict[str, str], *, gpus: bool) -> list[str]:
    """What a local-backend host isolates, in words, from the labels its backend reports
    (``scheduling.backends.sandbox``); nothing for hosts that do not say. GPU shares only
    where the host has GPUs."""
    sandbox = labels.get("quanta.io/sandbox")
    if sandbox is None:
        return []
    lines = [
        _("Workloads run in a bubblewrap sandbox: each sees its owner's home, a private /tmp "
          "and the system read-only, and nothing of the portal or of other users.")
        if sandbox == "bubblewrap"
        else _("Workloads are not sandboxed (switched off with LOCAL_SANDBOX=off): a workload "
               "can read other users' homes and the portal's files.")
        if sandbox == "off"
        else _("Workloads are not sandboxed (bubblewrap does not work on this host): a workload "
               "can read other users' homes and the portal's files.")
    ]  # fmt: skip
    limits = labels.get("quanta.io/limits", "none")
    if limits.startswith("cgroup-"):
        lines.append(
            _("CPU and memory limits: enforced by cgroup %(version)s.")
            % {"version": limits.removeprefix("cgroup-")}
        )
    else:
        lines.append(
            _("CPU and memory limits: not enforced (no writable cgroup on this host); memory is "
              "only bounded as address space.")
        )  # fmt: skip
    if not gpus:
        return lines
    if labels.get("quanta.io/gpu-shares") == "mps":
        lines.append(_("GPU shares: isolated by NVIDIA MPS (memory and compute per share)."))
    else:
        lines.append(
            _("GPU shares: not isolated (NVIDIA MPS is not running): a share can use the whole "
              "GPU and all its memory.")
        )  # fmt: skip
    return lines


def _node_card(
    node: Node,
    latest: dict[int, Any] | None = None,
    history: dict[int, list[tuple[dt.datetime, int]]] | None = None,
) -> dict[str, Any]:
    gpus = []
    for device in node.gpus.all():
        allocations = list(device.allocations.all())
        memory = sum(a.gpu_memory_mib for a in allocations)
        sample = (latest or {}).get(device.pk)
        series = (history or {}).get(device.pk, [])
        gpus.append(
            {
                "device": device,
                "compute": _percent(device.allocated_milli, 1000),
                "memory": _percent(memory, device.memory_mib),
                "allocations": allocations,
                # Utilisation as read (NVML / DCGM), beside what is allocated; None: no reading.
                "busy": sample.utilisation if sample else None,
                "memory_used": _percent(sample.memory_used_mib, device.memory_mib)
                if sample
                else None,
                "chart": {
                    "label": str(_("GPU utilisation (%)")),
                    "labels": [f"{timezone.localtime(t):%H:%M}" for t, _v in series],
                    "values": [v for _t, v in series],
                    "capacity": 100,
                    "capacityLabel": "100 %",
                    "compact": True,
                }
                if series
                else None,
            }
        )
    return {
        "node": node,
        "cpu": _percent(node.allocated_cpu_milli, node.cpu_milli),
        "memory": _percent(node.allocated_memory_mib, node.memory_mib),
        "gpus": gpus,
        "isolation": _isolation(node.labels or {}, gpus=bool(gpus)),
    }


@superuser_required
def hosts(request: HttpRequest) -> HttpResponse:
    clusters = list(Cluster.objects.order_by("name"))
    nodes = _nodes()
    cluster_slug = request.GET.get("cluster", "")
    if cluster_slug:
        nodes = nodes.filter(cluster__slug=cluster_slug)
    search = request.GET.get("q", "").strip()
    if search:
        nodes = nodes.filter(name__icontains=search)
    page = Paginator(nodes, NODES_PER_PAGE).get_page(request.GET.get("page"))
    devices = [device for node in page for device in node.gpus.all()]
    now = timezone.now()
    latest = utilisation.latest(devices, now)
    history = utilisation.history(devices, since=now - dt.timedelta(hours=UTILISATION_HOURS))
    return render(
        request,
        "console/hosts.html",
        {
            **console_context(request, "hosts"),
            "clusters": clusters,
            "cluster_slug": cluster_slug,
            "search": search,
            "page": page,
            "cards": [_node_card(node, latest, history) for node in page],
            "utilisation_hours": UTILISATION_HOURS,
        },
    )


def _set_cordon(request: HttpRequest, pk: int, cordoned: bool) -> HttpResponse:
    node = get_object_or_404(Node, pk=pk)
    if cordoned:
        services.cordon(actor=request.user, node=node)
        messages.success(
            request,
            _("%(node)s is cordoned: nothing new lands on it; what runs there keeps running.")
            % {"node": node.name},
        )
    else:
        services.uncordon(actor=request.user, node=node)
        messages.success(request, _("%(node)s takes new work again.") % {"node": node.name})
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        back = reverse("console-hosts")
    return redirect(f"{back}#node-{node.pk}")


@superuser_required
@require_POST
def cordon(request: HttpRequest, pk: int) -> HttpResponse:
    return _set_cordon(request, pk, True)


@superuser_required
@require_POST
def uncordon(request: HttpRequest, pk: int) -> HttpResponse:
    return _set_cordon(request, pk, False)


# --- Queues ------------------------------------------------------------------------------------


@superuser_required
def queues(request: HttpRequest) -> HttpResponse:
    rows = list(
        Queue.objects.select_related("cluster", "parent")
        .prefetch_related("tenants")
        .order_by("cluster__name", "parent__name", "name")
    )
    # The deserved share of a queue: its weight among the queues beside it (same parent).
    weights: dict[tuple[int, int | None], int] = defaultdict(int)
    for queue in rows:
        if queue.is_open:
            weights[(queue.cluster_id, queue.parent_id)] += queue.weight
    for queue in rows:
        total = weights[(queue.cluster_id, queue.parent_id)]
        queue.share = _percent(queue.weight, total) if queue.is_open else 0
    return render(
        request,
        "console/queues.html",
        {
            **console_context(request, "queues"),
            "queues": rows,
            "priority_classes": PriorityClass.objects.all(),
        },
    )
