"""Thin Celery tasks: take ids, call services. Idempotent, acks_late; only transient backend
errors are retried. Without REDIS_URL they run in-process (task_always_eager).

The backend work of a transition (admit, submit, stop) is enqueued after commit by
``workloads.dispatch``; admission is per cluster and coalesced (``admit_soon``: at most one
session pending per cluster, whatever the number of launches); the periodic ones come from
the beat schedule in ``portal/celery.py``.
For Kubernetes clusters a watcher per cluster (``kubernetes_watch``) follows Jobs, PodGroups,
pods and Deployments live; a cache lock with expiry keeps it to one worker per cluster; it runs
for a few minutes and the beat starts the next (``kubernetes_watch_all``), so a lost worker
costs at most one period. ``kubernetes_resync`` is the same reconcile as the other clusters',
on a slower period.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import Task, shared_task
from django.core.cache import cache

from scheduling.backends.base import BackendError
from scheduling.choices import BackendKind
from scheduling.inventory import sync_backend_nodes
from scheduling.locks import cluster_lock
from scheduling.models import Cluster
from scheduling.tasks import kubernetes_backend as _kubernetes
from scheduling.tasks import kubernetes_clusters
from workloads import autoscale, services, utilisation
from workloads import reconcile as loop
from workloads.choices import WAITING, State
from workloads.models import Workload

log = logging.getLogger(__name__)

WATCH_SECONDS = 290.0  # a little under five minutes; the beat starts a watcher every minute
LOCK_SLACK = 30.0
FOLLOW_POLLS = 240
FOLLOW_SECONDS = 0.25


ADMIT_PENDING = "quanta:admit-pending:{}"
ADMIT_PENDING_SECONDS = 30.0  # a lost message delays the cluster's admissions this long at most


def admit_soon(cluster_id: int) -> bool:
    """Ask for an admission session over the cluster's line, unless one is already pending:
    a burst of launches enqueues one session, plus at most one for what arrives while it runs
    (the task clears the flag as it starts, before it reads the line). ``cache.add`` is atomic
    on Redis and on the in-process cache; in-process the session runs here and now. True if
    a session was enqueued."""
    if _runs_in_process():
        return _admit_in_process(cluster_id)
    key = ADMIT_PENDING.format(cluster_id)
    if not cache.add(key, 1, timeout=ADMIT_PENDING_SECONDS):
        return False
    try:
        admit_cluster.delay(cluster_id)
    except BaseException:
        cache.delete(key)  # not enqueued: the next request must not wait for the expiry
        raise
    return True


# In-process (no broker): one thread at a time runs a cluster's sessions; a launch that comes
# while one runs asks it for one more round instead of running a session of its own beside it
# (which would only wait on the same rows). The rounds are bounded so that one request does
# not serve a whole burst; what is left the embedded beat admits on its next tick.
_IN_PROCESS_ROUNDS = 5
_in_process_locks: dict[int, threading.Lock] = {}
_in_process_again: set[int] = set()
_in_process_guard = threading.Lock()


def _runs_in_process() -> bool:
    return bool(admit_cluster.app.conf.task_always_eager)


def _admit_in_process(cluster_id: int) -> bool:
    with _in_process_guard:
        lock = _in_process_locks.setdefault(cluster_id, threading.Lock())
        if not lock.acquire(blocking=False):
            _in_process_again.add(cluster_id)
            return False
    try:
        for _round in range(_IN_PROCESS_ROUNDS):
            with _in_process_guard:
                _in_process_again.discard(cluster_id)
            admit_cluster(cluster_id)
            with _in_process_guard:
                if cluster_id not in _in_process_again:
                    break
    finally:
        lock.release()
    return True


@shared_task(name="quanta.workloads.admit_cluster", acks_late=True)
def admit_cluster(cluster_id: int) -> int:
    """One admission session over a cluster's line; how many started."""
    cache.delete(ADMIT_PENDING.format(cluster_id))  # what arrives from now asks for the next
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    return services.admit_queued(cluster) if cluster is not None else 0


@shared_task(name="quanta.workloads.admit", acks_late=True)
def admit(workload_id: str) -> str:
    """Messages queued before sessions were per cluster: ask for the workload's cluster's
    session (``admit_soon``); its state now."""
    found = Workload.objects.filter(pk=workload_id).values_list("cluster_id", "state").first()
    if found is None:
        return ""
    cluster_id, state = found
    if state in WAITING:
        admit_soon(cluster_id)
        state = Workload.objects.values_list("state", flat=True).get(pk=workload_id)
    return str(state)


@shared_task(name="quanta.cluster.submit", acks_late=True, bind=True, max_retries=5)
def submit(self: Task, workload_id: str) -> None:
    try:
        loop.submit(workload_id)
    except BackendError as exc:
        if not exc.transient:
            raise
        raise self.retry(exc=exc, countdown=min(2**self.request.retries, 60)) from exc
    if not self.request.is_eager:  # in-process mode: the embedded beat follows instead
        follow.apply_async((workload_id,), countdown=FOLLOW_SECONDS)


@shared_task(name="quanta.cluster.stop", acks_late=True, bind=True, max_retries=5)
def stop(self: Task, workload_id: str) -> None:
    try:
        loop.stop_on_backend(workload_id)
    except BackendError as exc:
        if not exc.transient:
            raise
        raise self.retry(exc=exc, countdown=min(2**self.request.retries, 60)) from exc
    if not self.request.is_eager:
        follow.apply_async((workload_id,), countdown=FOLLOW_SECONDS)


@shared_task(name="quanta.cluster.reconcile", acks_late=True)
def reconcile() -> None:
    """Follow every portal-scheduled cluster: transitions, stops, orphans; then ask for a
    session over its line if one waits (``admit_soon``: not here, on the cluster queue, and
    not a second one while one is pending)."""
    for cluster in Cluster.objects.exclude(backend=BackendKind.KUBERNETES):
        loop.reconcile(cluster)
        if Workload.objects.filter(cluster=cluster, state__in=WAITING).exists():
            admit_soon(cluster.pk)


@shared_task(name="quanta.cluster.follow", acks_late=True)
def follow(workload_id: str, polls: int = 0) -> None:
    """Watch one starting (or stopping) workload closely so its next state shows within a
    second; the periodic reconcile is the safety net."""
    workload = (
        Workload.objects.select_related("cluster", "grant", "flavor", "owner", "tenant")
        .filter(pk=workload_id)
        .first()
    )
    if workload is None or workload.state not in (State.STARTING, State.STOPPING):
        return
    loop.reconcile(workload.cluster, only=[workload])
    if polls < FOLLOW_POLLS:
        follow.apply_async((workload_id, polls + 1), countdown=FOLLOW_SECONDS)


@shared_task(name="quanta.workloads.cull", acks_late=True)
def cull() -> list[str]:
    return services.cull()


@shared_task(name="quanta.workloads.sample_gpus", acks_late=True)
def sample_gpus() -> dict[str, int]:
    """Every cluster's GPU utilisation into the short history (``workloads.utilisation``)."""
    done = utilisation.sample()
    return {"devices": done.devices, "workloads": done.workloads}


@shared_task(name="quanta.workloads.expire_grants", acks_late=True)
def expire_grants() -> int:
    return services.expire_grants()


@shared_task(name="quanta.cluster.sync_nodes", acks_late=True)
def sync_nodes() -> None:
    for cluster in Cluster.objects.exclude(backend=BackendKind.KUBERNETES):
        sync_backend_nodes(cluster)


# --- Kubernetes clusters -------------------------------------------------------------------------


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
            stats = _kubernetes(cluster).watch(
                lambda observation: loop.follow(cluster, observation), seconds=seconds
            )
        except BackendError as exc:
            log.warning("watch of %s ended: %s", cluster.slug, exc)
            return f"ended: {exc}"
    return (
        f"{stats.events} events, {stats.emitted} changes applied, {stats.expired} re-lists, "
        f"{stats.reconnects} reconnects"
    )


@shared_task(name="quanta.cluster.kubernetes_resync", acks_late=True)
def resync() -> dict[str, Any]:
    """The safety net behind the watcher: every Kubernetes cluster reconciled in full."""
    done: dict[str, Any] = {}
    for cluster in kubernetes_clusters():
        try:
            done[cluster.slug] = resync_cluster(cluster)
        except BackendError as exc:
            log.warning("resync of %s failed: %s", cluster.slug, exc)
            done[cluster.slug] = f"failed: {exc}"
    return done


def resync_cluster(cluster: Cluster) -> dict[str, int]:
    _kubernetes(cluster)
    counts = loop.reconcile(cluster)
    return {**counts, "admitted": services.admit_queued(cluster)}


@shared_task(name="quanta.serving.schedules", acks_late=True)
def serving_schedules() -> int:
    """Endpoints to their schedule's minimum, idle ones to zero (``autoscale.apply_schedules``)."""
    return autoscale.apply_schedules()
