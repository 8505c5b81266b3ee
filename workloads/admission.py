"""Admission on the portal-scheduled clusters (local, simulated): one scheduling session of
the scheduler core over a cluster's whole waiting line.

A session runs with the cluster's node rows locked (sessions on one cluster run one at a time)
and sees what runs there and what waits, the cluster's queues (weight, capability,
reclaimable) and each workload's priority. It decides, as Volcano would, what starts, what
is evicted for it (preemption within a queue, reclaim across queues) and why the rest waits.
Before the session, what can be decided alone is decided: a workload bigger than any node or
from an expired grant is rejected, one outside its grant's window or over its quota waits.
After it, each start is charged to the quota chain (locked rows, so concurrent sessions can
never exceed a quota) and its allocations written. Work placed on resources that evicted
workloads still hold waits until they have stopped: nothing is ever double-booked.

A session writes only its own decisions (Rejected, Queued with the reason, Starting with the
allocations) and returns what it decided (:class:`Decisions`); stopping the evicted work is
the caller's (``services.admit``), and the backend is handed each start by the lifecycle's
listener after commit (``workloads.dispatch``).
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from scheduling.backends.base import Resources
from scheduling.backends.registry import get_backend
from scheduling.choices import BackendKind
from scheduling.core.model import Eviction as CoreEviction
from scheduling.core.model import Job, Queue, Running, Taint, TaskRequest
from scheduling.core.model import Node as CoreNode
from scheduling.core.model import Resources as CoreResources
from scheduling.core.scheduler import Snapshot
from scheduling.core.scheduler import schedule as run_session
from scheduling.inventory import free_nodes, queue_resolver
from scheduling.models import Allocation, Cluster, Node
from scheduling.models import Queue as QueueRow
from scheduling.placement import FreeDevice, FreeNode, place, share_milli, too_big
from tenants import services as tenant_services
from tenants.models import Tenant
from workloads import reasons as R
from workloads import windows
from workloads.choices import HOLDING, WAITING, State
from workloads.lifecycle import transition
from workloads.models import Workload
from workloads.specs import quota_request_for, resources_for

logger = logging.getLogger(__name__)

DEFAULT_QUEUE = "default"


@dataclass
class Eviction:
    """Running work the session takes resources back from, and what its owner reads."""

    workload: Workload
    reason: R.Reason


@dataclass
class Decisions:
    """What one session decided, beyond the states it wrote."""

    started: list[str] = field(default_factory=list)  # workload ids now Starting
    evictions: list[Eviction] = field(default_factory=list)


def clusters_with_waiting_work() -> list[Cluster]:
    """The portal-scheduled clusters whose line is not empty."""
    return list(
        Cluster.objects.exclude(backend=BackendKind.KUBERNETES)
        .filter(workloads__state__in=WAITING)
        .distinct()
    )


@dataclass
class _Candidate:
    workload: Workload
    queue: str
    milli: int  # per device: 1000 for whole GPUs, the charged share for a fraction


def schedule(cluster: Cluster) -> Decisions:
    """One session over ``cluster``'s waiting line, in one transaction."""
    decisions = Decisions()
    with transaction.atomic():
        nodes = free_nodes(cluster, lock=True)
        waiting = list(
            Workload.objects.select_for_update(of=("self",))
            .filter(cluster=cluster, state__in=WAITING)
            .select_related("flavor", "grant", "template", "tenant", "owner")
            .order_by("created_at")
        )
        if not waiting:
            return decisions
        queues = _queues(cluster)
        queue_of = queue_resolver(cluster)
        candidates = []
        for workload in waiting:
            if _screen(workload, cluster, nodes):
                candidate = _candidate(workload, nodes, queues, queue_of)
                if candidate is not None:
                    candidates.append(candidate)
        if not candidates:
            return decisions
        running = _running(cluster, queues, queue_of)
        snapshot = Snapshot(
            nodes=_core_nodes(cluster),
            queues=[q for q, _open in queues.values()],
            jobs=[_job(c, order) for order, c in enumerate(candidates)],
            running=running,
            policy=cluster.placement_policy,
        )
        decision = run_session(snapshot)
        decisions.evictions = _evictions(decision.evictions)
        placed: dict[str, list[tuple[str, tuple[int, ...]]]] = defaultdict(list)
        for placement in decision.placements:
            placed[placement.job].append((placement.node, placement.devices))
        free = {n.name: n for n in nodes}
        for candidate in candidates:
            workload = candidate.workload
            key = str(workload.pk)
            if key in placed and _start(candidate, placed[key], free):
                if workload.state == State.STARTING:
                    decisions.started.append(key)
                continue
            if key in decision.rejected:
                transition(workload, State.REJECTED, reason=decision.rejected[key])
                continue
            reason = _why_waiting(
                candidate,
                nodes,
                decision.waiting.get(key),
                key in placed,
                resources_for(workload.flavor),
            )
            transition(workload, State.QUEUED, reason=reason)
        return decisions


def _screen(workload: Workload, cluster: Cluster, nodes: list[FreeNode]) -> bool:
    """Decide what needs no session; True if the workload goes into the session."""
    grant, template = workload.grant, workload.template
    apps = get_backend(cluster).apps
    if template and apps is not None and template.kind not in apps:
        transition(
            workload,
            State.REJECTED,
            reason=R.NEEDS_KUBERNETES(app=template.kind, cluster=cluster.name),
        )
        return False
    if grant is not None and grant.expires_on and grant.expires_on < timezone.localdate():
        transition(
            workload,
            State.REJECTED,
            reason=R.GRANT_FOR_EXPIRED(template=str(grant.template), date=str(grant.expires_on)),
        )
        return False
    res = resources_for(workload.flavor)
    reason = too_big(nodes, res)
    if reason:
        transition(workload, State.REJECTED, reason=reason)
        return False
    if (res.gpus or res.gpu_milli) and not any(
        not res.gpu_models or d.model in res.gpu_models for n in nodes for d in n.devices
    ):  # no such GPU at all right now: GPUs may be added, so wait (the core would refuse)
        transition(workload, State.QUEUED, reason=place(nodes, res, 1).reason)
        return False
    if grant is not None and not windows.is_open(grant.windows):
        transition(
            workload,
            State.QUEUED,
            reason=R.WAITING_FOR_WINDOW(windows=R.windows(grant.windows)),
        )
        return False
    refusal = tenant_services.check_quota(
        tenant=workload.tenant, user=workload.owner, request=quota_request_for(workload)
    )
    if refusal is not None:
        transition(workload, State.QUEUED, reason=R.WAITING_FOR_QUOTA(why=refusal.reason))
        return False
    return True


def _queues(cluster: Cluster) -> dict[str, tuple[Queue, bool]]:
    """The cluster's queues for the core, and whether each is open; always a default one."""
    found: dict[str, tuple[Queue, bool]] = {}
    for row in QueueRow.objects.filter(cluster=cluster):
        cap = row.capability or {}
        capability = None
        if cap:
            capability = CoreResources(
                int(cap.get("cpu_milli", 10**12)),
                int(cap.get("memory_mib", 10**12)),
                int(float(cap.get("gpus", 10**6)) * 1000),
            )
        found[row.name] = (Queue(row.name, row.weight, capability, row.reclaimable), row.is_open)
    found.setdefault(DEFAULT_QUEUE, (Queue(DEFAULT_QUEUE), True))
    return found


def _candidate(
    workload: Workload,
    nodes: list[FreeNode],
    queues: dict[str, tuple[Queue, bool]],
    queue_of: Callable[[Tenant], str],
) -> _Candidate | None:
    name = queue_of(workload.tenant) or DEFAULT_QUEUE
    if not queues.get(name, (None, True))[1]:
        transition(workload, State.QUEUED, reason=R.WAITING(why=R.QUEUE_CLOSED(queue=name)))
        return None
    res = resources_for(workload.flavor)
    milli = share_milli(res, nodes) if res.gpu_milli else 1000
    return _Candidate(workload, name, milli)


def _task(name: str, workload: Workload, milli: int) -> TaskRequest:
    flavor = workload.flavor
    gpus = flavor.gpus or (1 if flavor.gpu_milli else 0)
    return TaskRequest(
        name,
        cpu_milli=flavor.cpu_milli,
        memory_mib=flavor.memory_mib,
        num_gpu=gpus,
        gpu_milli=milli if gpus else 0,
        gpu_models=frozenset(flavor.gpu_models or ()),
    )


def _job(candidate: _Candidate, order: int) -> Job:
    workload = candidate.workload
    tasks = tuple(
        _task(f"{workload.pk}/{i}", workload, candidate.milli) for i in range(workload.workers)
    )
    return Job(
        str(workload.pk),
        tasks,
        queue=candidate.queue,
        priority=workload.priority,
        min_available=workload.workers,
        order=order,
    )


def _core_nodes(cluster: Cluster) -> list[CoreNode]:
    nodes = []
    for node in (
        Node.objects.filter(cluster=cluster, gone_at__isnull=True)
        .prefetch_related("gpus")
        .order_by("pk")
    ):
        gpus = list(node.gpus.all())
        taints = tuple(
            Taint(t["key"], t.get("value", ""), t.get("effect", "NoSchedule"))
            for t in node.taints or ()
        )
        nodes.append(
            CoreNode(
                node.name,
                node.cpu_milli,
                node.memory_mib,
                gpu_count=len(gpus),
                gpu_model=gpus[0].model if gpus else "",
                labels=dict(node.labels or {}),
                taints=taints,
                unschedulable=node.cordoned,
            )
        )
    return nodes


def _running(
    cluster: Cluster,
    queues: dict[str, tuple[Queue, bool]],
    queue_of: Callable[[Tenant], str],
) -> list[Running]:
    """What holds resources now, as the core sees it (from the allocation rows)."""
    holding = {
        w.pk: w
        for w in Workload.objects.filter(cluster=cluster, state__in=HOLDING).select_related(
            "tenant", "flavor"
        )
    }
    rows: dict[tuple[uuid.UUID, int], list[Allocation]] = defaultdict(list)
    for row in (
        Allocation.objects.filter(workload__in=list(holding))
        .select_related("node", "device")
        .order_by("workload", "task", "pk")
    ):
        rows[(row.workload_id, row.task)].append(row)
    by_workload: dict[uuid.UUID, list[tuple[TaskRequest, str, tuple[int, ...]]]] = defaultdict(list)
    for (workload_id, task), parts in rows.items():
        devices = tuple(p.device.index for p in parts if p.device)
        milli = next((p.gpu_milli for p in parts if p.device), 0)
        request = TaskRequest(
            f"{workload_id}/{task}",
            cpu_milli=sum(p.cpu_milli for p in parts),
            memory_mib=sum(p.memory_mib for p in parts),
            num_gpu=len(devices),
            gpu_milli=milli if devices else 0,
        )
        by_workload[workload_id].append((request, parts[0].node.name, devices))
    running: list[Running] = []
    for workload_id, tasks in by_workload.items():
        workload = holding[workload_id]
        queue = queue_of(workload.tenant) or DEFAULT_QUEUE
        queue = queue if queue in queues else DEFAULT_QUEUE
        job = Job(
            str(workload_id),
            tuple(t for t, _, _ in tasks),
            queue=queue,
            priority=workload.priority,
            min_available=len(tasks),
        )
        running.extend(Running(job, task, node, devices) for task, node, devices in tasks)
    return running


def _evictions(evictions: Iterable[CoreEviction]) -> list[Eviction]:
    """The workloads the session took resources back from (once per workload)."""
    found: dict[str, R.Reason] = {}
    for eviction in evictions:
        job, reason = eviction.job, eviction.reason
        found.setdefault(job, reason)
    victims = Workload.objects.filter(pk__in=list(found)).select_related("owner")
    return [Eviction(v, _eviction_reason(found[str(v.pk)])) for v in victims]


def _start(
    candidate: _Candidate, slots: list[tuple[str, tuple[int, ...]]], free: dict[str, FreeNode]
) -> bool:
    """Charge the quota and allocate what the session placed, if it is free right now."""
    workload = candidate.workload
    flavor = workload.flavor
    for node_name, devices in slots:
        node = free[node_name]
        if node.free_cpu_milli < flavor.cpu_milli or node.free_memory_mib < flavor.memory_mib:
            return False
        by_index = {d.index: d for d in node.devices}
        if any(by_index[i].free_milli < candidate.milli for i in devices):
            return False  # still held by work being evicted: wait until it has stopped
    request = quota_request_for(workload)
    try:
        tenant_services.reserve(tenant=workload.tenant, user=workload.owner, request=request)
    except tenant_services.QuotaExceeded as exc:
        transition(workload, State.QUEUED, reason=R.WAITING_FOR_QUOTA(why=exc.refusal.reason))
        return True  # decided
    rows = []
    for task, (node_name, devices) in enumerate(slots):
        node = free[node_name]
        node.free_cpu_milli -= flavor.cpu_milli
        node.free_memory_mib -= flavor.memory_mib
        if not devices:
            rows.append(
                Allocation(
                    workload=workload,
                    task=task,
                    node_id=node.node_id,
                    cpu_milli=flavor.cpu_milli,
                    memory_mib=flavor.memory_mib,
                )
            )
        for i, index in enumerate(devices):
            device: FreeDevice = next(d for d in node.devices if d.index == index)
            memory = flavor.gpu_memory_mib if flavor.gpu_milli else device.memory_mib
            device.free_milli -= candidate.milli
            device.free_memory_mib -= memory
            rows.append(
                Allocation(
                    workload=workload,
                    task=task,
                    node_id=node.node_id,
                    device_id=device.device_id,
                    gpu_milli=candidate.milli,
                    gpu_memory_mib=memory,
                    cpu_milli=flavor.cpu_milli if i == 0 else 0,
                    memory_mib=flavor.memory_mib if i == 0 else 0,
                )
            )
    Allocation.objects.bulk_create(rows)
    charged = {k: str(v) for k, v in vars(request).items()}
    where = ", ".join(sorted({node for node, _ in slots}))
    transition(
        workload,
        State.STARTING,
        reason=R.STARTING_ON(nodes=where),
        quota_request=charged,
        charged=True,
    )
    return True


def _why_waiting(
    candidate: _Candidate,
    nodes: list[FreeNode],
    session_reason: R.Reason | None,
    evicting: bool,
    res: Resources,
) -> R.Reason | None:
    if evicting:
        return R.WAITING_FOR_PREEMPTED()
    if session_reason is not None and session_reason.code.startswith("queue_"):
        return R.WAITING(why=session_reason)
    workload = candidate.workload
    placement = place(
        nodes,
        res,
        workload.workers,
        workload.cluster.placement_policy,
    )
    if not placement.placed:
        return placement.reason
    return R.WAITING(why=session_reason) if session_reason else R.WAITING_FOR_TURN()


def _eviction_reason(session_reason: R.Reason) -> R.Reason:
    """What the evicted person reads (the session names the other job by its id)."""
    if session_reason.code == "preempted_for":
        return R.PREEMPTED()
    if session_reason.code == "reclaimed_for":
        return R.RECLAIMED()
    return session_reason
