"""``/metrics`` for Prometheus (docs/operations.md, "Metrics").

Two kinds of series:

- what a process observes as it happens (``core.metrics``: requests, admission sessions,
  launch-to-running, live connections), kept by prometheus-client in the process (or, with
  ``PROMETHEUS_MULTIPROC_DIR``, in files that every process of the host writes);
- the domain's state (GPUs, workloads, queues, nodes, settlement, Celery queues), read from
  the database and Redis at scrape time by :class:`DomainCollector` in a fixed number of
  aggregate queries, so that every web process answers the same and nothing drifts.

Who may scrape: a bearer token (``METRICS_TOKEN``) or an address in ``METRICS_ALLOW``; with
neither set, only this host. Addresses count for direct connections only: a request that came
through a proxy (``X-Forwarded-For``, ``Forwarded``, ``X-Real-IP``) needs the token.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Min, Q, Sum
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from billing.models import UsageInterval
from core.metrics import HTTP_REQUEST_SECONDS, HTTP_REQUESTS, LAUNCH_TO_RUNNING_SECONDS
from scheduling.models import (
    DEFAULT_QUEUE,
    Allocation,
    Cluster,
    GpuDevice,
    GpuSample,
    Node,
    Queue,
)
from workloads.choices import ACTIVE, WAITING, State, WorkloadKind
from workloads.lifecycle import Transition
from workloads.models import Workload

logger = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
FORWARDING_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP")
LOCALHOST = ("127.0.0.0/8", "::1/128")
# A GPU held by a Running workload without activity for this long counts as idle.
IDLE_AFTER = timedelta(minutes=30)
# The Celery queues of portal/celery.py's routes.
CELERY_QUEUES = ("default", "cluster", "watch")
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


# --- who may scrape -------------------------------------------------------------------------


def allowed_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    nets = settings.METRICS_ALLOW or ([] if settings.METRICS_TOKEN else list(LOCALHOST))
    return [ipaddress.ip_network(net, strict=False) for net in nets]


def refusal(request: HttpRequest) -> HttpResponse | None:
    """None when ``request`` may read the metrics, else the 401 or 403 to answer."""
    token = settings.METRICS_TOKEN
    given = request.headers.get("Authorization", "")
    if token and given.startswith("Bearer "):
        if hmac.compare_digest(given[7:].strip().encode(), token.encode()):
            return None
        return _unauthorized()
    if not any(name in request.META for name in FORWARDING_HEADERS):
        try:
            address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
        except ValueError:
            address = None
        if address is not None and any(address in net for net in allowed_networks()):
            return None
    if token:
        return _unauthorized()
    return HttpResponse(
        "Forbidden: metrics are served to METRICS_ALLOW only.\n",
        status=403,
        content_type="text/plain; charset=utf-8",
    )


def _unauthorized() -> HttpResponse:
    response = HttpResponse(
        "Unauthorized: send Authorization: Bearer <METRICS_TOKEN>.\n",
        status=401,
        content_type="text/plain; charset=utf-8",
    )
    response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response


def metrics_view(request: HttpRequest) -> HttpResponse:
    refused = refusal(request)
    if refused is not None:
        return refused
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        process = CollectorRegistry()
        MultiProcessCollector(process)
    else:
        process = REGISTRY
    domain = CollectorRegistry(auto_describe=False)
    domain.register(DomainCollector())
    body = generate_latest(process) + generate_latest(domain)
    return HttpResponse(body, content_type=CONTENT_TYPE)


# --- the domain's gauges, read at scrape time -------------------------------------------------


def _gauge(name: str, doc: str, labels: Sequence[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels))


class DomainCollector(Collector):
    """The domain's state, computed per scrape from the database (and Redis)."""

    def __init__(self, now: Callable[[], Any] = timezone.now) -> None:
        self.now = now

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        now = self.now()
        clusters = dict(Cluster.objects.values_list("pk", "slug"))
        yield from self._gpus(clusters, now)
        yield from self._utilisation(clusters, now)
        yield from self._nodes(clusters)
        yield from self._workloads(clusters)
        yield from self._queues(clusters, now)
        yield self._settlement(now)
        if settings.REDIS_URL:
            yield from self._celery()
        took = _gauge(
            "quanta_metrics_collect_seconds", "Time the last scrape took to read the domain.", ()
        )
        took.add_metric([], time.perf_counter() - started)
        yield took

    def _utilisation(self, clusters: dict[int, str], now: Any) -> Iterable[Metric]:
        """Each device's newest utilisation sample (scheduling.utilisation), while it is
        recent: a device without a reading has no series rather than a made-up 0."""
        labels = ("cluster", "node", "gpu", "model")
        busy = _gauge(
            "quanta_gpu_utilisation_percent",
            "GPU busy percent per device, as last sampled (NVML / DCGM).",
            labels,
        )
        memory = _gauge(
            "quanta_gpu_memory_used_bytes",
            "GPU memory in use per device, as last sampled.",
            labels,
        )
        fresh = now - timedelta(seconds=3 * settings.GPU_SAMPLE_SECONDS)
        newest: dict[int, tuple[Any, ...]] = {}
        for row in (
            GpuSample.objects.filter(time__gte=fresh)
            .order_by("time")
            .values_list(
                "device_id",
                "device__node__cluster_id",
                "device__node__name",
                "device__index",
                "device__model",
                "utilisation",
                "memory_used_mib",
            )
        ):
            newest[row[0]] = row[1:]
        for cluster_id, node, index, model, utilisation, used in newest.values():
            key = [clusters.get(cluster_id, str(cluster_id)), node, str(index), model]
            busy.add_metric(key, utilisation)
            memory.add_metric(key, used * 1024 * 1024)
        return [busy, memory]

    def _gpus(self, clusters: dict[int, str], now: Any) -> Iterable[Metric]:
        total = _gauge("quanta_gpus", "GPU devices reported, by cluster and model.", LABELS_GPU)
        allocated = _gauge(
            "quanta_gpus_allocated",
            "GPUs allocated (fractional shares add up), by cluster and model.",
            LABELS_GPU,
        )
        free = _gauge("quanta_gpus_free", "GPUs not allocated, by cluster and model.", LABELS_GPU)
        stranded = _gauge(
            "quanta_gpus_stranded",
            "Free share on partly allocated GPUs (free, but not as whole devices).",
            LABELS_GPU,
        )
        idle = _gauge(
            "quanta_gpus_allocated_idle",
            "GPUs held by Running workloads with no activity for 30 minutes or more.",
            LABELS_GPU,
        )
        use: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
        devices = (
            GpuDevice.objects.with_allocated()
            .filter(node__gone_at__isnull=True)
            # The plugin does not see with_allocated()'s annotation (as in console's overview).
            .values_list("node__cluster_id", "model", "allocated_milli")  # type: ignore[misc]
        )
        for cluster_id, model, milli in devices:
            milli = min(int(milli), 1000)
            row = use[(clusters.get(cluster_id, str(cluster_id)), model)]
            row[0] += 1
            row[1] += milli
            if 0 < milli < 1000:
                row[2] += 1000 - milli
        for (cluster, model), (n, milli, stranded_milli) in sorted(use.items()):
            total.add_metric([cluster, model], n)
            allocated.add_metric([cluster, model], milli / 1000)
            free.add_metric([cluster, model], n - milli / 1000)
            stranded.add_metric([cluster, model], stranded_milli / 1000)
        held: dict[tuple[str, str], int] = dict.fromkeys(use, 0)
        for cluster_id, model, milli in (
            Allocation.objects.filter(
                device__isnull=False,
                workload__state=State.RUNNING,
            )
            .annotate(last=Coalesce("workload__last_activity_at", "workload__started_at"))
            .filter(last__lt=now - IDLE_AFTER)
            .order_by()
            .values_list("node__cluster_id", "device__model")
            .annotate(milli=Sum("gpu_milli"))
        ):
            key = (clusters.get(cluster_id, str(cluster_id)), model)
            held[key] = held.get(key, 0) + int(milli or 0)
        for (cluster, model), milli in sorted(held.items()):
            idle.add_metric([cluster, model], milli / 1000)
        return [total, allocated, free, stranded, idle]

    def _nodes(self, clusters: dict[int, str]) -> Iterable[Metric]:
        reporting = _gauge("quanta_nodes", "Nodes the backend reports, by cluster.", ["cluster"])
        cordoned = _gauge("quanta_nodes_cordoned", "Reported nodes cordoned.", ["cluster"])
        gone = _gauge(
            "quanta_nodes_not_reporting",
            "Nodes known to the portal that the backend no longer reports (rows with gone_at).",
            ["cluster"],
        )
        counts = {pk: (0, 0, 0) for pk in clusters}
        for row in (
            Node.objects.order_by()
            .values("cluster_id")
            .annotate(
                n=Count("pk", filter=Q(gone_at__isnull=True)),
                cordoned=Count("pk", filter=Q(gone_at__isnull=True, cordoned=True)),
                gone=Count("pk", filter=Q(gone_at__isnull=False)),
            )
        ):
            counts[row["cluster_id"]] = (row["n"], row["cordoned"], row["gone"])
        for pk, (n, c, g) in sorted(counts.items(), key=lambda item: clusters.get(item[0], "")):
            slug = clusters.get(pk, str(pk))
            reporting.add_metric([slug], n)
            cordoned.add_metric([slug], c)
            gone.add_metric([slug], g)
        return [reporting, cordoned, gone]

    def _workloads(self, clusters: dict[int, str]) -> Iterable[Metric]:
        family = _gauge(
            "quanta_workloads",
            "Active workloads (Pending to Stopping), by cluster, state and kind.",
            ["cluster", "state", "kind"],
        )
        counts = {
            (slug, state, kind): 0
            for slug in clusters.values()
            for state in ACTIVE
            for kind in WorkloadKind.values
        }
        for cluster_id, state, kind, n in (
            Workload.objects.filter(state__in=ACTIVE)
            .order_by()
            .values_list("cluster_id", "state", "kind")
            .annotate(n=Count("pk"))
        ):
            counts[(clusters.get(cluster_id, str(cluster_id)), state, kind)] = n
        for labels, n in sorted(counts.items()):
            family.add_metric(list(labels), n)
        return [family]

    def _queues(self, clusters: dict[int, str], now: Any) -> Iterable[Metric]:
        depth = _gauge(
            "quanta_queue_depth",
            "Workloads waiting (Pending or Queued), by cluster and queue.",
            ["cluster", "queue"],
        )
        oldest = _gauge(
            "quanta_queue_oldest_wait_seconds",
            "How long the longest-waiting workload of the queue has waited (0: none waits).",
            ["cluster", "queue"],
        )
        # Each queue's tenants, by cluster: a tenant waits in its nearest ancestor's queue.
        named: dict[int, dict[int, str]] = defaultdict(dict)
        lines: dict[tuple[int, str], list[Any]] = {}
        for cluster_id, name, tenant_id in Queue.objects.order_by("cluster_id", "name").values_list(
            "cluster_id", "name", "tenants"
        ):
            lines[(cluster_id, name)] = [0, None]
            if tenant_id is not None:
                named[cluster_id].setdefault(tenant_id, name)
        for pk in clusters:
            lines.setdefault((pk, DEFAULT_QUEUE), [0, None])
        for cluster_id, path, n, first in (
            Workload.objects.filter(state__in=WAITING)
            .order_by()
            .values_list("cluster_id", "tenant__path")
            .annotate(n=Count("pk"), first=Min("created_at"))
        ):
            queue = DEFAULT_QUEUE
            for tenant_id in reversed([int(p) for p in path.strip("/").split("/") if p]):
                if tenant_id in named[cluster_id]:
                    queue = named[cluster_id][tenant_id]
                    break
            line = lines.setdefault((cluster_id, queue), [0, None])
            line[0] += n
            line[1] = first if line[1] is None else min(line[1], first)
        for (cluster_id, queue), (n, first) in sorted(lines.items()):
            labels = [clusters.get(cluster_id, str(cluster_id)), queue]
            depth.add_metric(labels, n)
            oldest.add_metric(labels, max((now - first).total_seconds(), 0.0) if first else 0.0)
        return [depth, oldest]

    def _settlement(self, now: Any) -> Metric:
        lag = _gauge(
            "quanta_billing_settlement_lag_seconds",
            "Now minus the oldest watermark of the usage intervals not yet settled (0: none).",
            (),
        )
        oldest = UsageInterval.objects.filter(is_settled=False).aggregate(
            oldest=Min("settled_until")
        )["oldest"]
        lag.add_metric([], max((now - oldest).total_seconds(), 0.0) if oldest else 0.0)
        return lag

    def _celery(self) -> Iterable[Metric]:
        import redis

        family = _gauge(
            "quanta_celery_queue_length", "Tasks waiting in each Celery queue.", ["queue"]
        )
        up = _gauge("quanta_celery_broker_up", "1 when the broker answered this scrape.", ())
        client = redis.Redis.from_url(
            settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2
        )
        try:
            pipe = client.pipeline(transaction=False)
            for queue in CELERY_QUEUES:
                pipe.llen(queue)
            lengths = pipe.execute()
        except redis.RedisError as exc:
            logger.warning("metrics: the Celery broker did not answer: %s", exc)
            up.add_metric([], 0)
            return [up]
        finally:
            client.close()
        for queue, n in zip(CELERY_QUEUES, lengths, strict=True):
            family.add_metric([queue], int(n))
        up.add_metric([], 1)
        return [family, up]


LABELS_GPU = ("cluster", "model")


# --- what is observed as it happens ---------------------------------------------------------


def on_transitions(transitions: Sequence[Transition]) -> None:
    """Launch-to-running: observed when a workload first reaches Running (the transition that
    set ``started_at`` also set ``updated_at`` to the same instant; a restarted job's later
    Running does not count again)."""
    first_runs = [
        t.workload
        for t in transitions
        if t.after == State.RUNNING
        and t.before != State.RUNNING
        and t.workload.started_at is not None
        and t.workload.started_at == t.workload.updated_at
    ]
    if not first_runs:
        return
    slugs = dict(
        Cluster.objects.filter(pk__in={w.cluster_id for w in first_runs}).values_list("pk", "slug")
    )
    for workload in first_runs:
        seconds = (workload.started_at - workload.created_at).total_seconds()  # type: ignore[operator]
        LAUNCH_TO_RUNNING_SECONDS.labels(
            cluster=slugs.get(workload.cluster_id, str(workload.cluster_id)), kind=workload.kind
        ).observe(max(seconds, 0.0))


class RequestMetricsMiddleware:
    """Counts each request by method, status and view (the URL pattern's name, never the
    path: one series per page, not per workload) and times it."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        view = match.view_name if match is not None else "<unmatched>"
        method = request.method if request.method in METHODS else "other"
        HTTP_REQUESTS.labels(method=method, status=str(response.status_code), view=view).inc()
        HTTP_REQUEST_SECONDS.labels(method=method, view=view).observe(time.perf_counter() - started)
        return response
