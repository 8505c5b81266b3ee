"""Launching, admitting, running, stopping and culling workloads.

Every change goes through here (and ``lifecycle.transition``). The flow:

    launch_environment / submit_job  → Pending, then ``admit`` after commit
    admit        → Rejected (never fits, not allowed), Queued (why, in plain words) or
                   Starting (quota charged, resources allocated), then ``submit`` after commit
    submit       → the backend starts it; ``reconcile`` follows it to Running and to its end
    stop         → Stopping, then the backend stops it; ``reconcile`` sees Stopped
    cull         → stops idle and over-time environments (with a warning first)
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import shlex
from collections import defaultdict
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q, QuerySet, Sum
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from scheduling.backends.base import (
    BackendError,
    Handle,
    Observation,
    Phase,
    Resources,
    TaskPlacement,
    WorkloadSpec,
)
from scheduling.backends.kubernetes.nodes import NodeInventory
from scheduling.backends.registry import get_backend
from scheduling.inventory import queue_for, sync_inventory
from scheduling.models import Allocation, Cluster, GpuDevice, Node
from scheduling.placement import FreeDevice, FreeNode
from tenants.models import Membership, Tenant
from tenants.quota import Request
from workloads import reasons as R
from workloads.choices import HOLDING, WAITING, State, WorkloadKind
from workloads.lifecycle import note, transition
from workloads.models import AppTemplate, Flavor, Grant, Workload

logger = logging.getLogger(__name__)

MAX_WORKERS = 64
RESERVED_ENV = {
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "NODE_RANK",
    "CUDA_VISIBLE_DEVICES",
}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
IDLE_WARNING = dt.timedelta(minutes=10)
SUBMIT_GRACE = dt.timedelta(minutes=2)


# --- What a person may launch ------------------------------------------------------------------


def member_tenants(user: Any) -> QuerySet[Tenant]:
    return Tenant.objects.filter(memberships__user=user, is_active=True)


def grants_for(user: Any, *, today: dt.date | None = None) -> QuerySet[Grant]:
    """Grants a person may launch from now: on their active classes, not expired."""
    today = today or timezone.localdate()
    return (
        Grant.objects.filter(tenant__in=member_tenants(user), template__is_active=True)
        .filter(Q(expires_on__isnull=True) | Q(expires_on__gte=today))
        .select_related("template", "template__image", "tenant", "cluster")
        .prefetch_related("flavors")
    )


def default_cluster() -> Cluster:
    cluster = Cluster.objects.filter(is_default=True).first() or Cluster.objects.first()
    if cluster is None:
        raise ValidationError({"cluster": _("no cluster is configured; ask an admin")})
    return cluster


def launch_environment(
    *, actor: Any, template: AppTemplate, flavor: Flavor | None = None, name: str = ""
) -> Workload:
    """Start a notebook / IDE from a template granted to ``actor``."""
    grants = [g for g in grants_for(actor) if g.template_id == template.pk]
    if not grants:
        raise ValidationError(
            {"template": _("%(template)s is not granted to you") % {"template": template.name}}
        )
    flavor = flavor or template.default_flavor
    grant = next((g for g in grants if flavor in g.flavors.all()), None)
    if grant is None:
        raise ValidationError(
            {
                "flavor": _("%(flavor)s is not allowed for %(template)s")
                % {"flavor": flavor.name, "template": template.name}
            }
        )
    running = Workload.objects.filter(owner=actor, grant=grant, state__in=WAITING + HOLDING)
    if running.count() >= grant.member_limit:
        raise ValidationError(
            {
                "template": _(
                    "you already run %(n)s of %(n)s allowed %(template)s environment(s); "
                    "stop one first"
                )
                % {"n": grant.member_limit, "template": template.name}
            }
        )
    with transaction.atomic():
        workload = Workload.objects.create(
            kind=WorkloadKind.NOTEBOOK,
            name=(name or template.name)[:100],
            owner=actor,
            tenant=grant.tenant,
            cluster=grant.cluster or default_cluster(),
            template=template,
            grant=grant,
            flavor=flavor,
            image=template.image,
            env=dict(template.environment),
            idle_timeout_minutes=grant.idle_timeout_minutes,
            priority=grant.priority_class.value if grant.priority_class else 0,
        )
        note(workload, R.LAUNCHED(template=template.name, flavor=flavor.name), actor=actor)
        _after_commit_admit(workload)
    return workload


def parse_command(command: str | Sequence[str]) -> list[str]:
    if isinstance(command, str):
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise ValidationError(
                {"command": _("cannot be read: %(error)s") % {"error": exc}}
            ) from None
    else:
        argv = list(command)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise ValidationError({"command": _("give the command to run, e.g. python train.py")})
    if len(argv) > 256 or any(len(a) > 4096 or "\x00" in a for a in argv):
        raise ValidationError({"command": _("is too long or contains a NUL character")})
    return argv


def check_env(env: Any) -> dict[str, str]:
    if env in (None, ""):
        return {}
    if not isinstance(env, dict):
        raise ValidationError({"env": _("must be an object of NAME: value")})
    for key, value in env.items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise ValidationError(
                {"env": _("%(name)r is not a valid variable name") % {"name": key}}
            )
        if key in RESERVED_ENV:
            raise ValidationError(
                {"env": _("%(name)s is set by Quanta for each worker") % {"name": key}}
            )
        if not isinstance(value, str | int | float) or len(str(value)) > 4096:
            raise ValidationError(
                {"env": _("the value of %(name)s must be a short string") % {"name": key}}
            )
    return {k: str(v) for k, v in env.items()}


def submit_job(
    *,
    actor: Any,
    tenant: Tenant,
    flavor: Flavor,
    command: str | Sequence[str],
    name: str = "",
    env: dict[str, Any] | None = None,
    workers: int = 1,
    max_retries: int = 0,
) -> Workload:
    """A training job: ``workers`` tasks started together (gang), each running ``command``."""
    argv = parse_command(command)
    variables = check_env(env)
    if not 1 <= workers <= MAX_WORKERS:
        raise ValidationError({"workers": _("must be between 1 and %(n)s") % {"n": MAX_WORKERS}})
    if not 0 <= max_retries <= 10:
        raise ValidationError({"max_retries": _("must be between 0 and 10")})
    if not Membership.objects.filter(user=actor, tenant=tenant, tenant__is_active=True).exists():
        raise ValidationError(
            {"tenant": _("you are not a member of %(slug)r") % {"slug": tenant.slug}}
        )
    grant = grants_for(actor).filter(tenant=tenant, flavors=flavor).first()
    if grant is None:
        raise ValidationError(
            {
                "flavor": _("%(flavor)s is not granted to %(tenant)s")
                % {"flavor": flavor.name, "tenant": tenant.name}
            }
        )
    with transaction.atomic():
        workload = Workload.objects.create(
            kind=WorkloadKind.JOB,
            name=(name or argv[0])[:100],
            owner=actor,
            tenant=tenant,
            cluster=grant.cluster or default_cluster(),
            grant=grant,
            flavor=flavor,
            image=grant.template.image,
            command=argv,
            env=variables,
            workers=workers,
            max_retries=max_retries,
            priority=grant.priority_class.value if grant.priority_class else 0,
        )
        note(workload, R.SUBMITTED(command=f"{shlex.join(argv)[:200]} × {workers}"), actor=actor)
        _after_commit_admit(workload)
    return workload


def _after_commit_admit(workload: Workload) -> None:
    from workloads import tasks

    workload_id = str(workload.pk)
    transaction.on_commit(lambda: tasks.admit.delay(workload_id))


# --- Admission ---------------------------------------------------------------------------------


def resources_for(flavor: Flavor) -> Resources:
    return Resources(
        cpu_milli=flavor.cpu_milli,
        memory_mib=flavor.memory_mib,
        gpus=flavor.gpus,
        gpu_milli=flavor.gpu_milli,
        gpu_memory_mib=flavor.gpu_memory_mib,
        gpu_models=tuple(flavor.gpu_models or ()),
    )


def quota_request_for(workload: Workload) -> Request:
    flavor, n = workload.flavor, workload.workers
    return Request(
        gpus=flavor.gpu_equivalents * n,
        gpu_memory_mib=flavor.gpu_memory_mib * n,
        cpu_cores=Decimal(flavor.cpu_milli) / 1000 * n,
        memory_mib=flavor.memory_mib * n,
        environments=1 if workload.kind == WorkloadKind.NOTEBOOK else 0,
        jobs=1 if workload.kind == WorkloadKind.JOB else 0,
    )


def free_nodes(cluster: Cluster, *, lock: bool) -> list[FreeNode]:
    """The cluster's nodes with what is free on each. With ``lock``, the node rows stay
    locked until the transaction ends: admissions to one cluster run one at a time."""
    nodes_qs = Node.objects.filter(cluster=cluster, gone_at__isnull=True).order_by("pk")
    if lock:
        nodes_qs = nodes_qs.select_for_update()
    nodes = list(nodes_qs)
    node_use = {
        row["node"]: row
        for row in Allocation.objects.filter(node__in=nodes)
        .values("node")
        .annotate(cpu=Sum("cpu_milli"), mem=Sum("memory_mib"))
    }
    device_use = {
        row["device"]: row
        for row in Allocation.objects.filter(node__in=nodes, device__isnull=False)
        .values("device")
        .annotate(milli=Sum("gpu_milli"), mem=Sum("gpu_memory_mib"))
    }
    devices: dict[int, list[FreeDevice]] = defaultdict(list)
    for d in GpuDevice.objects.filter(node__in=nodes).order_by("node", "index"):
        used = device_use.get(d.pk, {})
        devices[d.node_id].append(
            FreeDevice(
                d.pk,
                d.index,
                d.model,
                d.memory_mib,
                1000 - (used.get("milli") or 0),
                d.memory_mib - (used.get("mem") or 0),
            )
        )
    return [
        FreeNode(
            n.pk,
            n.name,
            n.cpu_milli,
            n.memory_mib,
            n.cpu_milli - (node_use.get(n.pk, {}).get("cpu") or 0),
            n.memory_mib - (node_use.get(n.pk, {}).get("mem") or 0),
            schedulable=not n.cordoned,
            devices=devices[n.pk],
        )
        for n in nodes
    ]


def admit(workload_id: str) -> str:
    """Decide a waiting workload: Rejected, Queued (with the reason) or Starting. Runs one
    scheduling session over its cluster's whole waiting line (``workloads.admission``)."""
    from workloads import admission

    # Reasons are stored in English whatever language the launching request was in (tasks
    # run in-process without Redis, inside that request); pages translate them.
    with translation.override("en"):
        return admission.admit(workload_id)


def admit_queued(cluster: Cluster | None = None) -> int:
    """Try the waiting workloads again (capacity or quota may have freed); how many started."""
    from workloads import admission

    with translation.override("en"):
        return admission.admit_queued(cluster)


# --- Running on the backend --------------------------------------------------------------------


def home_dir(user: Any) -> str:
    return str(settings.DATA_DIR / "home" / user.username)


def spec_for(workload: Workload) -> WorkloadSpec:
    allocations = list(workload.allocations.select_related("node", "device").order_by("task"))
    by_task: dict[int, list[Allocation]] = defaultdict(list)
    for allocation in allocations:
        by_task[allocation.task].append(allocation)
    placement = tuple(
        TaskPlacement(
            node=rows[0].node.name, gpu_indices=tuple(a.device.index for a in rows if a.device)
        )
        for _task, rows in sorted(by_task.items())
    )
    template = workload.template
    return WorkloadSpec(
        workload_id=str(workload.pk),
        kind=workload.kind,
        app=template.kind if template else "command",
        owner=workload.owner.username,
        command=tuple(workload.command),
        env={**(template.environment if template else {}), **workload.env},
        resources=resources_for(workload.flavor),
        workers=workload.workers,
        max_retries=workload.max_retries,
        attempt=workload.attempt,
        image=workload.image.registry_ref if workload.image else "",
        base_url=workload.open_path,
        working_dir=home_dir(workload.owner),
        placement=placement,
        queue=queue_for(workload.cluster, workload.tenant),
        labels={"quanta.workload-id": str(workload.pk), "quanta.tenant": workload.tenant.slug},
    )


def handle_for(workload: Workload) -> Handle:
    return Handle(str(workload.pk), dict(workload.backend_state or {}))


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
        transition(workload, State.FAILED, reason=str(exc))
        return
    Workload.objects.filter(pk=workload.pk, state=State.STARTING).update(backend_state=handle.state)


def stop(*, actor: Any, workload: Workload, reason: R.Reason | str = "") -> bool:
    """Stop a workload: a waiting one at once, a running one through its backend."""
    reason = reason or R.stopped_by(actor)
    if workload.state in WAITING:
        return transition(workload, State.STOPPED, actor=actor, reason=reason)
    if not transition(workload, State.STOPPING, actor=actor, reason=reason):
        return False
    from workloads import tasks

    workload_id = str(workload.pk)
    transaction.on_commit(lambda: tasks.stop.delay(workload_id))
    return True


def stop_on_backend(workload_id: str) -> None:
    workload = Workload.objects.select_related("cluster").get(pk=workload_id)
    if workload.state != State.STOPPING:
        return
    get_backend(workload.cluster).stop(handle_for(workload))
    reconcile(workload.cluster, only=[workload])


def extend(*, actor: Any, workload: Workload) -> dt.datetime:
    """Push a running environment's deadline out by the grant's maximum duration."""
    grant = workload.grant
    if workload.owner_id != actor.pk:
        raise ValidationError({"workload": _("only its owner can extend an environment")})
    if workload.state != State.RUNNING or grant is None:
        raise ValidationError({"workload": _("only a running environment can be extended")})
    if workload.extensions >= grant.max_extensions:
        raise ValidationError(
            {
                "workload": _("already extended %(n)s time(s), the most the grant allows")
                % {"n": workload.extensions}
            }
        )
    deadline = timezone.now() + dt.timedelta(minutes=grant.max_duration_minutes)
    Workload.objects.filter(pk=workload.pk).update(
        deadline_at=deadline, extensions=workload.extensions + 1
    )
    workload.deadline_at, workload.extensions = deadline, workload.extensions + 1
    note(workload, R.EXTENDED_UNTIL(time=f"{timezone.localtime(deadline):%H:%M}"), actor=actor)
    return deadline


# --- Following the backend ---------------------------------------------------------------------


def reconcile(cluster: Cluster, *, only: Iterable[Workload] | None = None) -> None:
    """Compare what the database says runs with what the backend says, and fix the
    difference: follow transitions, restart or fail jobs, stop orphans."""
    backend = get_backend(cluster)
    holding = (
        list(only)
        if only is not None
        else list(
            Workload.objects.filter(cluster=cluster, state__in=HOLDING).select_related(
                "grant", "flavor"
            )
        )
    )
    observed = backend.observe([handle_for(w) for w in holding]) if holding else {}
    for workload in holding:
        observation = observed.get(str(workload.pk))
        if observation is not None:
            apply_observation(workload, observation)
    if only is None:
        known = {str(w.pk) for w in holding}
        for orphan in backend.running() - known:
            logger.warning("stopping orphan workload %s on %s", orphan, cluster.slug)
            backend.stop(Handle(orphan, {}))


def apply_observation(workload: Workload, obs: Observation) -> None:
    state = workload.state
    if obs.last_activity and obs.last_activity != workload.last_activity_at:
        Workload.objects.filter(pk=workload.pk).update(last_activity_at=obs.last_activity)
        workload.last_activity_at = obs.last_activity
    if obs.phase == Phase.RUNNING and state == State.STARTING:
        deadline = None
        if workload.kind == WorkloadKind.NOTEBOOK and workload.grant:
            deadline = timezone.now() + dt.timedelta(minutes=workload.grant.max_duration_minutes)
        transition(workload, State.RUNNING, reason=obs.reason or R.RUNNING(), deadline_at=deadline)
    elif obs.phase == Phase.SUCCEEDED:
        transition(
            workload, State.SUCCEEDED, reason=obs.reason or R.FINISHED(), exit_code=obs.exit_code
        )
    elif obs.phase == Phase.FAILED:
        if (
            workload.kind == WorkloadKind.JOB
            and state != State.STOPPING
            and workload.attempt < workload.max_retries
        ):
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
        if timezone.now() - workload.updated_at > SUBMIT_GRACE:
            from workloads import tasks

            Workload.objects.filter(pk=workload.pk).update(updated_at=timezone.now())
            tasks.submit.delay(str(workload.pk))
    elif obs.phase == Phase.UNKNOWN:
        if state == State.STOPPING:
            transition(workload, State.STOPPED, reason=R.reason_of(workload) or "")
        else:
            transition(workload, State.FAILED, reason=R.LOST())


def _retry(workload: Workload, obs: Observation) -> None:
    attempt = workload.attempt + 1
    reason = R.RESTARTING_AFTER_FAILURE(
        why=obs.reason or R.FAILED(), a=attempt + 1, b=workload.max_retries + 1
    )
    was = workload.state
    if transition(workload, State.STARTING, reason=reason, attempt=attempt):
        if was == State.STARTING:  # no state change, but the restart belongs in the timeline
            note(workload, reason)
        from workloads import tasks

        workload_id = str(workload.pk)
        transaction.on_commit(lambda: tasks.submit.delay(workload_id))


def cull(now: dt.datetime | None = None) -> list[str]:
    """Stop environments past their deadline or idle past the grant's limit (warn first)."""
    now = now or timezone.now()
    stopped = []
    running = Workload.objects.filter(state=State.RUNNING, kind=WorkloadKind.NOTEBOOK)
    for workload in running.select_related("grant"):
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
    return stopped


def expire_grants(today: dt.date | None = None) -> int:
    """Waiting workloads of expired grants are rejected; running ones are stopped."""
    today = today or timezone.localdate()
    ended = 0
    for workload in Workload.objects.filter(
        state__in=(*WAITING, State.STARTING, State.RUNNING), grant__expires_on__lt=today
    ):
        reason = R.GRANT_EXPIRED(date=str(workload.grant.expires_on))  # type: ignore[union-attr]
        if workload.state in WAITING:
            ended += transition(workload, State.REJECTED, reason=reason)
        else:
            ended += stop(actor=None, workload=workload, reason=reason)
    return ended


def sync_nodes(cluster: Cluster) -> None:
    """Bring the cluster's node and GPU rows in line with what its backend reports, writing
    only what changed (``scheduling.inventory.sync_inventory``). Cordons and taints on these
    clusters are the admins' and stay as they are."""
    reports = [
        NodeInventory(
            info.name,
            info.cpu_milli,
            info.memory_mib,
            labels=dict(info.labels),
            gpus=info.gpus,
            sharing="fractional",
        )
        for info in get_backend(cluster).nodes()
    ]
    sync_inventory(cluster, reports, admin_cordons=True)
