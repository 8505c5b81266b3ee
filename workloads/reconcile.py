"""The one loop between the database and a cluster, for every backend.

Desired state is the database (what holds resources on the cluster: Starting, Running,
Stopping); actual state is what the backend observes. :func:`reconcile` compares the two and
fixes the difference:

- **follows** what changed: Starting → Running, ends (succeeded, failed — a job is retried
  while it has retries left — stopped outside the portal, lost);
- **adds** what is missing: a workload admitted but never handed to its backend (the worker
  died between the two) is handed over again after :data:`SUBMIT_GRACE`;
- **drives Stopping**: a stop the backend has not confirmed within :data:`STOP_GRACE` is sent
  again, until the backend reports the workload gone; only then is it ``Stopped`` and are its
  quota and allocations given back (once, by ``lifecycle.transition``);
- **removes** what is stale: work the backend runs that the database does not hold (an orphan)
  is stopped — except what was admitted or submitted after the database was read, which is
  looked up again before anything is stopped.

The same :func:`apply_observation` serves the Kubernetes watcher's events one at a time
(:func:`follow`). :func:`submit` and :func:`stop_on_backend` are the backend calls the tasks
make after commit.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable

from django.utils import timezone

from scheduling.backends.base import BackendError, Handle, Observation, Phase
from scheduling.backends.registry import get_backend
from scheduling.models import Cluster
from workloads import reasons as R
from workloads.activity import advance_activity
from workloads.choices import ACTIVE, HOLDING, State, WorkloadKind
from workloads.lifecycle import note, transition
from workloads.models import Workload
from workloads.specs import handle_for, spec_for

logger = logging.getLogger(__name__)

# A submit is idempotent per (workload, attempt): handing over again one whose task is only
# late costs nothing, so the grace is short enough to recover within a minute.
SUBMIT_GRACE = dt.timedelta(seconds=30)
STOP_GRACE = dt.timedelta(seconds=30)

_FOLLOWED = ("grant", "flavor", "owner", "tenant")


# --- Backend calls (from the tasks, after commit) ------------------------------------------------


def submit(workload_id: str) -> None:
    """Hand a Starting workload to its backend (idempotent: a retry starts it once)."""
    workload = Workload.objects.select_related(
        "cluster", "flavor", "template", "image", "owner", "tenant"
    ).get(pk=workload_id)
    if workload.state != State.STARTING:
        return
    try:
        handle = get_backend(workload.cluster).submit(spec_for(workload))
    except BackendError as exc:
        if exc.transient:
            raise
        transition(workload, State.FAILED, reason=exc.reason or str(exc))
        return
    Workload.objects.filter(pk=workload.pk, state=State.STARTING).update(backend_state=handle.state)


def stop_on_backend(workload_id: str) -> None:
    """Send the stop of a Stopping workload, then look once whether it is gone."""
    workload = Workload.objects.select_related("cluster", *_FOLLOWED).get(pk=workload_id)
    if workload.state != State.STOPPING:
        return
    get_backend(workload.cluster).stop(handle_for(workload))
    reconcile(workload.cluster, only=[workload])


# --- The loop ------------------------------------------------------------------------------------


def reconcile(cluster: Cluster, *, only: Iterable[Workload] | None = None) -> dict[str, int]:
    """Compare what the database holds on ``cluster`` with what its backend observes and fix
    the difference. With ``only``, just those workloads (no orphan sweep). Counts of what was
    observed, stopped as orphans and re-sent as stops."""
    backend = get_backend(cluster)
    holding = (
        list(only)
        if only is not None
        else list(
            Workload.objects.filter(cluster=cluster, state__in=HOLDING).select_related(*_FOLLOWED)
        )
    )
    observed = backend.observe([handle_for(w) for w in holding]) if holding else {}
    resent = 0
    for workload in holding:
        observation = observed.get(str(workload.pk))
        if observation is None:
            continue
        if _stop_unconfirmed(workload, observation):
            resent += _resend_stop(cluster, workload)
        else:
            apply_observation(workload, observation)
    orphans: set[str] = set()
    if only is None:
        orphans = backend.running() - {str(w.pk) for w in holding}
        # Admitted or submitted since ``holding`` was read: not orphans. Read after the
        # backend's list, so anything the backend runs with a live row here is seen.
        orphans -= {
            str(pk)
            for pk in Workload.objects.filter(pk__in=orphans, state__in=ACTIVE).values_list(
                "pk", flat=True
            )
        }
        for orphan in sorted(orphans):
            logger.warning("stopping orphan workload %s on %s", orphan, cluster.slug)
            backend.stop(Handle(orphan, {}))
    return {"observed": len(observed), "orphans": len(orphans), "resent": resent}


def _stop_unconfirmed(workload: Workload, obs: Observation) -> bool:
    """Stopping, and the backend still runs it: the stop was lost or has not taken yet."""
    return workload.state == State.STOPPING and obs.phase in (
        Phase.PENDING,
        Phase.STARTING,
        Phase.RUNNING,
    )


def _resend_stop(cluster: Cluster, workload: Workload) -> int:
    """Send the stop again once it has gone unconfirmed for ``STOP_GRACE``; 1 if sent."""
    if timezone.now() - workload.updated_at < STOP_GRACE or not _claim(workload):
        return 0
    logger.info("re-sending the stop of %s on %s", workload.pk, cluster.slug)
    try:
        get_backend(cluster).stop(handle_for(workload))
    except BackendError as exc:
        logger.warning("stop of %s on %s failed: %s", workload.pk, cluster.slug, exc)
        return 0
    return 1


def _claim(workload: Workload) -> bool:
    """Take the next try at a backend call for ``workload`` (a conditional update of its
    ``updated_at``, so two loops running at once make it once; the grace counts anew)."""
    now = timezone.now()
    claimed = Workload.objects.filter(
        pk=workload.pk, state=workload.state, updated_at=workload.updated_at
    ).update(updated_at=now)
    if claimed:
        workload.updated_at = now
    return bool(claimed)


def follow(cluster: Cluster, observation: Observation) -> None:
    """Apply one observation (a watcher's event) to its workload, if it still holds
    resources on ``cluster``; an orphan is left to the next full reconcile."""
    workload = (
        Workload.objects.filter(pk=observation.workload_id, cluster=cluster)
        .select_related(*_FOLLOWED)
        .first()
    )
    if workload is None or workload.state not in HOLDING:
        return
    apply_observation(workload, observation)


def apply_observation(workload: Workload, obs: Observation) -> None:
    """Move ``workload`` as its backend's observation says."""
    if obs.phase != Phase.UNKNOWN and obs.attempt < workload.attempt:
        return  # a previous attempt's last words: the portal has moved on
    state = workload.state
    if obs.last_activity and (
        workload.last_activity_at is None or obs.last_activity > workload.last_activity_at
    ):
        # Only forward: the proxy and the SSH gateway record activity too (workloads.activity).
        advance_activity(workload.pk, obs.last_activity)
        workload.last_activity_at = obs.last_activity
    if obs.phase == Phase.RUNNING and state == State.STARTING:
        deadline = None
        if workload.kind == WorkloadKind.NOTEBOOK and workload.grant:
            deadline = timezone.now() + dt.timedelta(minutes=workload.grant.max_duration_minutes)
        transition(workload, State.RUNNING, reason=obs.reason or R.RUNNING(), deadline_at=deadline)
    elif obs.phase in (Phase.PENDING, Phase.STARTING) and obs.reason:
        _starting_reason(workload, obs)
    elif obs.phase == Phase.SUCCEEDED:
        transition(
            workload, State.SUCCEEDED, reason=obs.reason or R.FINISHED(), exit_code=obs.exit_code
        )
    elif obs.phase == Phase.FAILED and state == State.STOPPING:
        # Asked to stop, and it ended: killed by the stop (a signal's exit code), or failing
        # on its own as the stop came. Either way what the person asked for happened.
        transition(workload, State.STOPPED, reason=R.reason_of(workload) or "")
    elif obs.phase == Phase.FAILED:
        if workload.kind == WorkloadKind.JOB and workload.attempt < workload.max_retries:
            _retry(workload, obs)
        else:
            transition(
                workload, State.FAILED, reason=obs.reason or R.FAILED(), exit_code=obs.exit_code
            )
    elif obs.phase == Phase.STOPPED:
        transition(
            workload,
            State.STOPPED,
            reason=(R.reason_of(workload) or "")
            if state == State.STOPPING
            else R.STOPPED_OUTSIDE(),
        )
    elif obs.phase == Phase.UNKNOWN and state == State.STARTING:
        # Admitted but never handed over (a worker died between the two): hand it over again.
        if timezone.now() - workload.updated_at > SUBMIT_GRACE and _claim(workload):
            logger.info("handing %s to its backend again", workload.pk)
            try:
                submit(str(workload.pk))
            except BackendError as exc:  # transient: the next round tries again
                logger.warning("submit of %s failed: %s", workload.pk, exc)
    elif obs.phase == Phase.UNKNOWN:
        if state == State.STOPPING:
            transition(workload, State.STOPPED, reason=R.reason_of(workload) or "")
        else:
            transition(workload, State.FAILED, reason=R.LOST())


def _starting_reason(workload: Workload, obs: Observation) -> None:
    """What a starting workload waits for now (the cluster's queue, an image pull), and a
    running one that its backend restarts in place (``retries_by: volcano``)."""
    reason = obs.reason
    if reason is None:
        return
    restarting = workload.state == State.RUNNING and reason.code.startswith("restarting")
    if (workload.state == State.STARTING and workload.reason != reason.text()) or restarting:
        transition(workload, State.STARTING, reason=reason)


def _retry(workload: Workload, obs: Observation) -> None:
    """A new attempt of a failed job: back to Starting (the dispatcher submits it)."""
    attempt = workload.attempt + 1
    reason = R.RESTARTING_AFTER_FAILURE(
        why=obs.reason or R.FAILED(), a=attempt + 1, b=workload.max_retries + 1
    )
    was = workload.state
    if transition(workload, State.STARTING, reason=reason, attempt=attempt) and (
        was == State.STARTING
    ):  # no state change, but the restart belongs in the timeline
        note(workload, reason)
