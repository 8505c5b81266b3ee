"""Celery tasks for Kubernetes clusters' own objects, on the cluster queue
(``quanta.cluster.*``): the inventory (nodes and GPUs into rows, ``kubernetes_inventory``)
and the cluster objects (namespaces, quotas, queues and priority classes out,
``kubernetes_objects``), and the replica ranges that model servers' schedules give
(``apply_serving_schedules``). Following workloads on them (the watcher and the resync) is in
``workloads.tasks``: it moves workloads, which live in the layer above.

Tasks are idempotent and keep the portal serving when the API server is down: a transient
error is logged and the next period tries again.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from celery import shared_task
from django.utils import timezone

from scheduling.backends.base import BackendError
from scheduling.backends.kubernetes import KubernetesBackend
from scheduling.backends.registry import get_backend
from scheduling.choices import BackendKind
from scheduling.inventory import desired_objects, sync_inventory
from scheduling.models import Cluster
from scheduling.serving import scheduled_replicas, serving_targets

log = logging.getLogger(__name__)


def kubernetes_clusters() -> list[Cluster]:
    return list(Cluster.objects.filter(backend=BackendKind.KUBERNETES))


def kubernetes_backend(cluster: Cluster) -> KubernetesBackend:
    backend = get_backend(cluster)
    if not isinstance(backend, KubernetesBackend):
        raise TypeError(f"{cluster.slug} is not a Kubernetes cluster")
    return backend


@shared_task(name="quanta.cluster.kubernetes_inventory", acks_late=True)
def inventory() -> dict[str, Any]:
    done: dict[str, Any] = {}
    for cluster in kubernetes_clusters():
        try:
            result = sync_inventory(cluster, kubernetes_backend(cluster).inventory())
        except BackendError as exc:
            log.warning("inventory of %s failed: %s", cluster.slug, exc)
            done[cluster.slug] = f"failed: {exc}"
            continue
        done[cluster.slug] = result.rows_written
    return done


@shared_task(name="quanta.cluster.kubernetes_objects", acks_late=True)
def cluster_objects() -> dict[str, Any]:
    """Namespaces, quotas, queues and priority classes as the portal says, written only
    where the cluster differs."""
    done: dict[str, Any] = {}
    for cluster in kubernetes_clusters():
        try:
            done[cluster.slug] = kubernetes_backend(cluster).apply(desired_objects(cluster))
        except BackendError as exc:
            log.warning("syncing objects to %s failed: %s", cluster.slug, exc)
            done[cluster.slug] = f"failed: {exc}"
    return done


@shared_task(name="quanta.cluster.apply_serving_schedules", acks_late=True)
def apply_serving_schedules() -> dict[str, Any]:
    """Every minute (昼推夜训): the replica range each scheduled model server's windows give
    now, written to the cluster only where it differs."""
    return apply_schedules(timezone.now())


def apply_schedules(now: dt.datetime) -> dict[str, Any]:
    """For each serving workload with a schedule on a Kubernetes cluster: scale it to the
    (min, max) replicas its windows give at ``now`` (local time in TIME_ZONE). Returns, by
    workload id, the minimum written, "unchanged", or why it failed. Serving on the local
    backend is scaled by the portal's gateway, which reads the same windows."""
    targets = serving_targets()
    if targets is None:
        log.info("no source of serving workloads is registered: no schedules to apply")
        return {}
    scheduled = [t for t in targets if t.serving.schedule]
    if not scheduled:
        return {}
    clusters = {
        c.pk: c
        for c in Cluster.objects.filter(
            backend=BackendKind.KUBERNETES, pk__in={t.cluster_id for t in scheduled}
        )
    }
    tz = timezone.get_default_timezone()
    done: dict[str, Any] = {}
    for target in scheduled:
        cluster = clusters.get(target.cluster_id)
        if cluster is None:
            continue
        low, high = scheduled_replicas(target.serving, now, tz)
        try:
            written = kubernetes_backend(cluster).scale(target.handle, low, high)
        except BackendError as exc:
            log.warning("scaling %s on %s failed: %s", target.handle.workload_id, cluster.slug, exc)
            done[target.handle.workload_id] = f"failed: {exc}"
            continue
        done[target.handle.workload_id] = low if written else "unchanged"
    return done
