"""Thin Celery tasks: take ids, call services. Idempotent, acks_late; only transient backend
errors are retried. Without REDIS_URL they run in-process (task_always_eager)."""

from __future__ import annotations

from celery import shared_task

from scheduling.backends.base import BackendError
from scheduling.models import Cluster
from workloads import services
from workloads.choices import State
from workloads.models import Workload


@shared_task(name="quanta.workloads.admit", acks_late=True)
def admit(workload_id: str) -> str:
    return services.admit(workload_id)


@shared_task(name="quanta.cluster.submit", acks_late=True, bind=True, max_retries=5)
def submit(self, workload_id: str) -> None:  # type: ignore[no-untyped-def]
    try:
        services.submit(workload_id)
    except BackendError as exc:
        if not exc.transient:
            raise
        raise self.retry(exc=exc, countdown=min(2**self.request.retries, 60)) from exc
    if not self.request.is_eager:  # in-process mode: the embedded beat follows instead
        follow.apply_async((workload_id,), countdown=0.25)


@shared_task(name="quanta.cluster.stop", acks_late=True, bind=True, max_retries=5)
def stop(self, workload_id: str) -> None:  # type: ignore[no-untyped-def]
    try:
        services.stop_on_backend(workload_id)
    except BackendError as exc:
        if not exc.transient:
            raise
        raise self.retry(exc=exc, countdown=min(2**self.request.retries, 60)) from exc
    if not self.request.is_eager:
        follow.apply_async((workload_id,), countdown=0.25)


@shared_task(name="quanta.cluster.reconcile", acks_late=True)
def reconcile() -> None:
    """Follow every portal-scheduled cluster: transitions, orphans, then the waiting line."""
    for cluster in Cluster.objects.exclude(backend="kubernetes"):
        services.reconcile(cluster)
        services.admit_queued(cluster)


@shared_task(name="quanta.workloads.cull", acks_late=True)
def cull() -> list[str]:
    return services.cull()


@shared_task(name="quanta.workloads.expire_grants", acks_late=True)
def expire_grants() -> int:
    return services.expire_grants()


@shared_task(name="quanta.cluster.sync_nodes", acks_late=True)
def sync_nodes() -> None:
    for cluster in Cluster.objects.exclude(backend="kubernetes"):
        services.sync_nodes(cluster)


@shared_task(name="quanta.cluster.follow", acks_late=True)
def follow(workload_id: str, polls: int = 0) -> None:
    """Watch one starting (or stopping) workload closely so its next state shows within a
    second; the periodic reconcile is the safety net."""
    workload = (
        Workload.objects.select_related("cluster", "grant", "flavor").filter(pk=workload_id).first()
    )
    if workload is None or workload.state not in (State.STARTING, State.STOPPING):
        return
    services.reconcile(workload.cluster, only=[workload])
    if polls < 240:
        follow.apply_async((workload_id, polls + 1), countdown=0.25)
