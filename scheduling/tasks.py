"""Celery tasks for Kubernetes clusters, all on the cluster queue (``quanta.cluster.*``).

Submit and stop need nothing here: the portal's ``quanta.cluster.submit`` / ``stop`` call the
backend through the registry. What Kubernetes adds:

- a watcher per cluster (``kubernetes_watch``): follows Jobs, PodGroups, pods and
  Deployments live and applies each change to its workload. A cache lock with expiry keeps it
  to one worker per cluster; it runs for a few minutes and the beat starts the next one
  (``kubernetes_watch_all``), so a lost worker costs at most one period;
- a periodic full resync (``kubernetes_resync``), the safety net: observes every workload
  holding resources, stops orphans, admits what waits;
- the inventory (``kubernetes_inventory``) and the cluster objects (``kubernetes_objects``:
  namespaces, quotas, queues, priority classes).

Tasks take ids, are idempotent, and keep the portal serving when the API server is down: a
transient error is logged and the next period tries again.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator
from typing import Any

from celery import shared_task
from django.core.cache import cache

from scheduling.backends.base import BackendError, Handle, Observation, Phase
from scheduling.backends.kubernetes import KubernetesBackend
from scheduling.backends.registry import get_backend
from scheduling.inventory import desired_objects, sync_inventory
from scheduling.models import Cluster
from workloads import services
from workloads.choices import ACTIVE, HOLDING, State
from workloads.lifecycle import transition
from workloads.models import Workload

log = logging.getLogger(__name__)

WATCH_SECONDS = 290.0  # a little under five minutes; the beat starts a watcher every minute
LOCK_SLACK = 30.0


@contextlib.contextmanager
def cluster_lock(name: str, seconds: float) -> Iterator[bool]:
    """True if this process holds ``name`` (for at most ``seconds``). ``cache.add`` is atomic
    on Redis and on the in-process cache; the expiry frees the lock of a worker that died."""
    token = uuid.uuid4().hex
    held = bool(cache.add(name, token, timeout=seconds))
    try:
        yield held
    finally:
        if held and cache.get(name) == token:
            cache.delete(name)


def kubernetes_clusters() -> list[Cluster]:
    return list(Cluster.objects.filter(backend="kubernetes"))


def _backend(cluster: Cluster) -> KubernetesBackend:
    backend = get_backend(cluster)
    if not isinstance(backend, KubernetesBackend):
        raise TypeError(f"{cluster.slug} is not a Kubernetes cluster")
    return backend


# --- following workloads ------------------------------------------------------------------------


@shared_task(name="quanta.cluster.kubernetes_watch_all", acks_late=True)
def watch_all() -> list[int]:
    """Start a watcher for every Kubernetes cluster (those already watched decline)."""
    started = []
    for cluster in kubernetes_clusters():
        watch.delay(cluster.pk)
        started.append(cluster.pk)
    return started


@shared_task(name="quanta.cluster.kubernetes_watch", acks_late=True)
def watch(cluster_id: int, seconds: float = WATCH_SECONDS) -> str:
    cluster = Cluster.objects.get(pk=cluster_id)
    with cluster_lock(f"quanta:kubernetes-watch:{cluster_id}", seconds + LOCK_SLACK) as held:
        if not held:
            return "already watched"
        try:
            stats = _backend(cluster).watch(
                lambda observation: follow(cluster, observation), seconds=seconds
            )
        except BackendError as exc:
            log.warning("watch of %s ended: %s", cluster.slug, exc)
            return f"ended: {exc}"
    return (
        f"{stats.events} events, {stats.emitted} changes applied, {stats.expired} re-lists, "
        f"{stats.reconnects} reconnects"
    )


def follow(cluster: Cluster, observation: Observation) -> None:
    """Apply one observation to its workload (if it still holds resources here)."""
    workload = (
        Workload.objects.filter(pk=observation.workload_id, cluster=cluster)
        .select_related("grant", "flavor")
        .first()
    )
    if workload is None or workload.state not in HOLDING:
        return  # an orphan: the resync stops it
    apply(workload, observation)


def apply(workload: Workload, observation: Observation) -> None:
    """``services.apply_observation``, plus what it does not record yet: the reason a
    starting workload waits (queue, quota, image) and an in-place restart of a running one."""
    if observation.phase != Phase.UNKNOWN and observation.attempt < workload.attempt:
        return  # a previous attempt's last words: the portal has moved on
    services.apply_observation(workload, observation)
    if not observation.reason or observation.phase not in (Phase.PENDING, Phase.STARTING):
        return
    workload.refresh_from_db(fields=["state", "reason"])
    reason = observation.reason
    restarting = workload.state == State.RUNNING and reason.code.startswith("restarting")
    if (workload.state == State.STARTING and workload.reason != reason.text()) or restarting:
        transition(workload, State.STARTING, reason=reason)


@shared_task(name="quanta.cluster.kubernetes_resync", acks_late=True)
def resync() -> dict[str, Any]:
    """The safety net: every Kubernetes cluster, compared in full with the database."""
    done: dict[str, Any] = {}
    for cluster in kubernetes_clusters():
        try:
            done[cluster.slug] = resync_cluster(cluster)
        except BackendError as exc:
            log.warning("resync of %s failed: %s", cluster.slug, exc)
            done[cluster.slug] = f"failed: {exc}"
    return done


def resync_cluster(cluster: Cluster) -> dict[str, int]:
    backend = _backend(cluster)
    holding = list(
        Workload.objects.filter(cluster=cluster, state__in=HOLDING).select_related(
            "grant", "flavor"
        )
    )
    observed = backend.observe([services.handle_for(w) for w in holding]) if holding else {}
    for workload in holding:
        observation = observed.get(str(workload.pk))
        if observation is not None:
            apply(workload, observation)
    known = {str(w.pk) for w in holding}
    orphans = backend.running() - known
    # Admitted and submitted since ``holding`` was read: not orphans.
    orphans -= {
        str(pk)
        for pk in Workload.objects.filter(pk__in=orphans, state__in=ACTIVE).values_list(
            "pk", flat=True
        )
    }
    for orphan in sorted(orphans):
        log.warning("stopping orphan workload %s on %s", orphan, cluster.slug)
        backend.stop(Handle(orphan, {}))
    admitted = services.admit_queued(cluster)
    return {"observed": len(observed), "orphans": len(orphans), "admitted": admitted}


# --- inventory and cluster objects --------------------------------------------------------------


@shared_task(name="quanta.cluster.kubernetes_inventory", acks_late=True)
def inventory() -> dict[str, Any]:
    done: dict[str, Any] = {}
    for cluster in kubernetes_clusters():
        try:
            result = sync_inventory(cluster, _backend(cluster).inventory())
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
            done[cluster.slug] = _backend(cluster).apply(desired_objects(cluster))
        except BackendError as exc:
            log.warning("syncing objects to %s failed: %s", cluster.slug, exc)
            done[cluster.slug] = f"failed: {exc}"
    return done
