"""What people and the portal do to workloads: the write API of this app.

Every function here is one transaction with the actor passed explicitly; the lifecycle
(``lifecycle.transition``) writes the state, its event and gives back quota; the lifecycle's
listeners enqueue the backend work after commit (``workloads.dispatch``). The flow:

    launch_environment / submit_job  → Pending (``workloads.launch``); admitted after commit
    admit_queued → Rejected (never fits, not allowed), Queued (why, in plain words) or
                   Starting (quota charged, resources allocated); evicted work is stopped
    (dispatch)   → the backend starts what is Starting; ``reconcile`` follows it to its end
    stop         → Stopping; the backend stops it; ``reconcile`` sees it gone (and re-sends a
                   stop that was not confirmed in time)
    cull         → stops idle and over-time environments (with a warning first)

Pages, the API, tasks and commands call these; none of them writes a workload themselves.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from core.audit import record
from core.models import Notice
from core.notices import notify
from scheduling.models import Cluster
from tenants.models import Tenant
from tenants.permissions import Access
from workloads import admission, utilisation
from workloads import reasons as R
from workloads.choices import HOLDING, TERMINAL, WAITING, State, WorkloadKind
from workloads.launch import (
    check_env,
    default_cluster,
    environment_grants,
    grants_for,
    launch_environment,
    member_tenants,
    parse_command,
    submit_job,
)
from workloads.lifecycle import note, transition
from workloads.models import Workload

__all__ = [
    "admit_queued",
    "check_env",
    "cull",
    "default_cluster",
    "delete_finished",
    "environment_grants",
    "expire_grants",
    "extend",
    "grants_for",
    "keep_gpu",
    "launch_environment",
    "member_tenants",
    "parse_command",
    "run_again",
    "stop",
    "submit_job",
]

IDLE_WARNING = dt.timedelta(minutes=10)


# --- Admission ---------------------------------------------------------------------------------


def admit_queued(cluster: Cluster | None = None) -> int:
    """Try the waiting workloads again (capacity or quota may have freed): one session per
    portal-scheduled cluster with waiting work; how many workloads started."""
    clusters = [cluster] if cluster is not None else admission.clusters_with_waiting_work()
    return sum(_session(c) for c in clusters)


SESSION_RETRIES = 3


def _session(cluster: Cluster) -> int:
    """One admission session (``admission.schedule``): computed without locks, committed in
    short transactions; the work it evicts is stopped in its commit. A start another session
    took first is left over, so the session runs again (a few times at most) while that
    happens: what was committed meanwhile is then part of what it reads."""
    started = 0
    # Reasons are stored in English whatever language the launching request was in (tasks
    # run in-process without Redis, inside that request); pages translate them.
    with translation.override("en"):
        for _attempt in range(SESSION_RETRIES):
            decisions = admission.schedule(
                cluster,
                evict=lambda e: stop(actor=None, workload=e.workload, reason=e.reason),
            )
            started += len(decisions.started)
            if not decisions.contended:
                break
    return started


# --- Stopping and extending --------------------------------------------------------------------


def stop(*, actor: Any, workload: Workload, reason: R.Reason | str = "") -> bool:
    """Stop a workload: a waiting one at once, a running one through its backend (the stop is
    sent after commit, and re-sent by ``reconcile`` until the backend confirms it). A stop by
    someone other than the owner (class staff, an admin) is written to the audit log."""
    reason = reason or R.stopped_by(actor)
    with transaction.atomic():
        if workload.state in WAITING:
            moved = transition(workload, State.STOPPED, actor=actor, reason=reason)
        else:
            moved = transition(workload, State.STOPPING, actor=actor, reason=reason)
        if moved and getattr(actor, "pk", None) and actor.pk != workload.owner_id:
            record(
                "workload.stop",
                actor=actor,
                target=workload,
                tenant=workload.tenant,
                owner=workload.owner.username,
                reason=str(reason),
            )
    return moved


def extend(*, actor: Any, workload: Workload) -> dt.datetime:
    """Push a running environment's deadline out by the grant's maximum duration, counted
    from its current end (the row locked, so two clicks spend one extension each, never the
    same one twice, and each adds the full time). An extension that would add no time (no
    deadline) is refused and not spent."""
    if workload.owner_id != actor.pk:
        raise ValidationError({"workload": _("only its owner can extend an environment")})
    with transaction.atomic():
        current = (
            Workload.objects.select_for_update(of=("self",))
            .select_related("grant")
            .get(pk=workload.pk)
        )
        grant = current.grant
        if current.state != State.RUNNING or grant is None:
            raise ValidationError({"workload": _("only a running environment can be extended")})
        if current.extensions >= grant.max_extensions:
            raise ValidationError(
                {
                    "workload": _("already extended %(n)s time(s), the most the grant allows")
                    % {"n": current.extensions}
                }
            )
        if current.deadline_at is None or not grant.max_duration_minutes:
            # Spending an extension that adds no time would only use it up.
            raise ValidationError({"workload": _("this environment has no time limit to extend")})
        # From the current end, not from now: two extensions add twice the time.
        deadline = max(current.deadline_at, timezone.now()) + dt.timedelta(
            minutes=grant.max_duration_minutes
        )
        extensions = current.extensions + 1
        # An extension is also a "still using it": the GPU idle window starts again.
        now = timezone.now()
        Workload.objects.filter(pk=current.pk).update(
            deadline_at=deadline, extensions=extensions, gpu_kept_at=now, gpu_warned_at=None
        )
        workload.deadline_at, workload.extensions = deadline, extensions
        workload.gpu_kept_at, workload.gpu_warned_at = now, None
        note(workload, R.EXTENDED_UNTIL(time=f"{timezone.localtime(deadline):%H:%M}"), actor=actor)
        record(
            "workload.extend",
            actor=actor,
            target=workload,
            tenant=workload.tenant,
            deadline=deadline.isoformat(),
            extensions=extensions,
        )
    return deadline


def keep_gpu(*, actor: Any, workload: Workload) -> dt.datetime:
    """The owner says a workload warned for low GPU use is still needed: its GPU idle window
    starts again now (the warning is withdrawn), without spending an extension."""
    if workload.owner_id != actor.pk:
        raise ValidationError({"workload": _("only its owner can keep a workload")})
    now = timezone.now()
    with transaction.atomic():
        current = Workload.objects.select_for_update().get(pk=workload.pk)
        if current.state != State.RUNNING:
            raise ValidationError({"workload": _("only a running workload can be kept")})
        Workload.objects.filter(pk=current.pk).update(gpu_kept_at=now, gpu_warned_at=None)
        workload.gpu_kept_at, workload.gpu_warned_at = now, None
        note(workload, R.GPU_KEPT(), actor=actor)
        record("workload.keep_gpu", actor=actor, target=workload, tenant=workload.tenant)
    return now


# --- Running it again -------------------------------------------------------------------------


def run_again(*, actor: Any, workload: Workload) -> Workload:
    """A finished job submitted again, or a stopped environment launched again: a new
    workload with the same template or command, size, class, workers, variables and
    datasets, through ``submit_job`` / ``launch_environment`` and so with all their checks
    (grants, quota, budget, datasets still visible). Only its owner may, and only once it has
    ended (a running one is already running)."""
    if workload.owner_id != getattr(actor, "pk", None):
        raise ValidationError({"workload": _("only its owner can run it again")})
    if workload.state not in TERMINAL:
        raise ValidationError(
            {"workload": _("it is still %(state)s: stop it first") % {"state": workload.state}}
        )
    datasets = list(workload.datasets.values_list("slug", flat=True))
    if workload.kind == WorkloadKind.JOB:
        return submit_job(
            actor=actor,
            tenant=workload.tenant,
            flavor=workload.flavor,
            command=list(workload.command or []),
            name=workload.name,
            env=dict(workload.env or {}),
            workers=workload.workers,
            max_retries=workload.max_retries,
            datasets=datasets,
        )
    if workload.kind == WorkloadKind.NOTEBOOK and workload.template is not None:
        return launch_environment(
            actor=actor,
            template=workload.template,
            flavor=workload.flavor,
            name=workload.name,
            datasets=datasets,
        )
    raise ValidationError({"workload": _("only jobs and environments can be run again")})


# --- Culling and expiry ------------------------------------------------------------------------


def cull(now: dt.datetime | None = None) -> list[str]:
    """Stop environments past their deadline or idle past the grant's limit (warn first)."""
    now = now or timezone.now()
    stopped = []
    running = Workload.objects.filter(state=State.RUNNING, kind=WorkloadKind.NOTEBOOK)
    for workload in running.select_related("grant", "owner", "tenant"):
        if workload.deadline_at and workload.deadline_at <= now:
            minutes = workload.grant.max_duration_minutes if workload.grant else 0
            if stop(
                actor=None,
                workload=workload,
                reason=R.MAX_DURATION(n=minutes),
            ):
                stopped.append(str(workload.pk))
            continue
        if not workload.idle_timeout_minutes:
            continue
        limit = dt.timedelta(minutes=workload.idle_timeout_minutes)
        last = workload.last_activity_at or workload.started_at or workload.created_at
        idle = now - last
        if idle >= limit:
            if stop(
                actor=None,
                workload=workload,
                reason=R.IDLE_FOR(n=workload.idle_timeout_minutes),
            ):
                stopped.append(str(workload.pk))
        elif idle >= limit - IDLE_WARNING and (
            workload.idle_warned_at is None or workload.idle_warned_at < last
        ):
            left = max(1, int((limit - idle).total_seconds() // 60))
            Workload.objects.filter(pk=workload.pk).update(idle_warned_at=now)
            note(workload, R.IDLE_WARNING(n=left))
    stopped += cull_idle_gpus(now)
    return stopped


def cull_idle_gpus(now: dt.datetime | None = None) -> list[str]:
    """GPU-aware culling: a running workload holding a GPU whose readings stayed below its
    threshold for its minutes is warned (an event, a notice to its owner), and stopped
    ``GPU_CULL_GRACE_MINUTES`` after the warning unless it got busy again or its owner kept
    or extended it meanwhile. Without readings nothing happens. The ids stopped."""
    now = now or timezone.now()
    grace = dt.timedelta(minutes=settings.GPU_CULL_GRACE_MINUTES)
    stopped = []
    candidates = list(
        Workload.objects.filter(state=State.RUNNING, gpu_idle_percent__gt=0)
        .filter(Q(flavor__gpus__gt=0) | Q(flavor__gpu_milli__gt=0))
        .select_related("owner", "tenant")
    )
    idle = utilisation.idle_since_many(candidates, now=now)  # each below its own percent
    for workload in candidates:
        percent, minutes = workload.gpu_idle_percent, workload.gpu_idle_minutes
        since = idle.get(str(workload.pk))
        warned = workload.gpu_warned_at
        if warned is not None and (since is None or since > warned):
            # Busy again since the warning (or no longer read): the warning no longer holds.
            Workload.objects.filter(pk=workload.pk, gpu_warned_at=warned).update(gpu_warned_at=None)
            workload.gpu_warned_at = None
        if since is None or now - since < dt.timedelta(minutes=minutes):
            continue
        if workload.gpu_warned_at is None or workload.gpu_warned_at < since:
            _warn_gpu_idle(workload, now, percent=percent, minutes=minutes, grace=grace)
        elif now - workload.gpu_warned_at >= grace:
            reason = R.GPU_IDLE_FOR(percent=percent, n=minutes)
            with transaction.atomic():
                if stop(actor=None, workload=workload, reason=reason):
                    record(
                        "workload.gpu_cull",
                        actor=None,
                        target=workload,
                        tenant=workload.tenant,
                        owner=workload.owner.username,
                        percent=percent,
                        minutes=minutes,
                    )
                    stopped.append(str(workload.pk))
    return stopped


def _warn_gpu_idle(
    workload: Workload, now: dt.datetime, *, percent: int, minutes: int, grace: dt.timedelta
) -> None:
    reason = R.GPU_IDLE_WARNING(
        name=workload.name, percent=percent, n=minutes, grace=int(grace.total_seconds() // 60)
    )
    with transaction.atomic():
        moved = Workload.objects.filter(pk=workload.pk, gpu_warned_at=workload.gpu_warned_at)
        if not moved.update(gpu_warned_at=now):
            return  # another run warned it meanwhile
        workload.gpu_warned_at = now
        note(workload, reason)
        record(
            "workload.gpu_idle_warning",
            actor=None,
            target=workload,
            tenant=workload.tenant,
            percent=percent,
            minutes=minutes,
        )
        notify(
            [workload.owner],
            reason,
            level=Notice.Level.WARNING,
            dedupe_key=f"gpu-idle:{workload.pk}:{now.isoformat()}",
            link=reverse("workload", args=[workload.pk]),
        )


def expire_grants(today: dt.date | None = None) -> int:
    """Waiting workloads of expired grants are rejected; running ones are stopped."""
    today = today or timezone.localdate()
    ended = 0
    for workload in Workload.objects.filter(
        state__in=(*WAITING, *HOLDING), grant__expires_on__lt=today
    ).exclude(state=State.STOPPING):
        grant = workload.grant
        assert grant is not None  # the query takes workloads of an expired grant only
        reason = R.GRANT_EXPIRED(date=str(grant.expires_on))
        if workload.state in WAITING:
            ended += transition(workload, State.REJECTED, reason=reason)
        else:
            ended += stop(actor=None, workload=workload, reason=reason)
    return ended


# --- Housekeeping ------------------------------------------------------------------------------


def delete_finished(*, actor: Any, tenant: Tenant, finished_before: dt.datetime) -> int:
    """Forget ``tenant``'s own workloads that ended before ``finished_before``, with their
    events and samples; how many. The portal's housekeeping (``actor=None``: the demo load
    keeps its history bounded so) is not audited, or the audit log would grow by what this
    bounds; someone who administers the tenant may do it too, and that is audited."""
    if actor is not None and not Access.of(actor).can_administer(tenant):
        raise PermissionDenied(_("You do not administer %(name)s.") % {"name": tenant.name})
    old = Workload.objects.filter(
        tenant=tenant, state__in=TERMINAL, finished_at__lt=finished_before
    )
    with transaction.atomic():
        deleted = old.delete()[1].get(Workload._meta.label, 0)
        if deleted and actor is not None:
            record(
                "workload.delete_finished",
                actor=actor,
                target=tenant,
                tenant=tenant,
                finished_before=finished_before.isoformat(),
                deleted=deleted,
            )
    return deleted
