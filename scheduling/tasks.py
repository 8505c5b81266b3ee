"""Celery tasks for Kubernetes clusters' own objects, on the cluster queue
(``quanta.cluster.*``): the inventory (nodes and GPUs into rows, ``kubernetes_inventory``)
and the cluster objects (namespaces, quotas, queues and priority classes out,
``kubernetes_objects``). Following workloads on them (the watcher and the resync) is in
``workloads.tasks``: it moves workloads, which live in the layer above.

Tasks are idempotent and keep the portal serving when the API server is down: a transient
error is logged and the next period tries again.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task

from scheduling.backends.base import BackendError
from scheduling.backends.kubernetes import KubernetesBackend
from scheduling.backends.registry import get_backend
from scheduling.choices import BackendKind
from scheduling.inventory import desired_objects, sync_inventory
from scheduling.models import Cluster

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
