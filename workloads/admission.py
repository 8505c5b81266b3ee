"""Admission on the portal-scheduled clusters (local, simulated): one scheduling session of
the scheduler core over a cluster's whole waiting line.

A session sees what runs there and what waits, the cluster's queues (weight, capability,
reclaimable) and each workload's priority. It decides, as Volcano would, what starts, what
is evicted for it (preemption within a queue, reclaim across queues) and why the rest waits.
Before the session, what can be decided alone is decided: a workload bigger than any node or
from an expired grant is rejected, one outside its grant's window or over its quota waits.

It runs in two phases, so that its cost follows what changed rather than the length of the
line, and no lock is held while it thinks:

- **compute** (``_compute``): reads a snapshot without locks (the free view, the line, the
  quota chains of the whole line in a few queries), runs the core session, and decides each
  workload. What is per session is computed once (node shapes, the backend's apps) and what
  depends only on a flavor once per flavor (too big, no such GPU, where it would go now).
- **commit** (``_commit``): stops what was evicted, writes the rejections, then for the starts
  locks the nodes they allocate on, their own rows and their quota chains (root-first), and
  re-checks that what each takes is still free and still its own: one that no longer fits
  (another session took it meanwhile) is left for the next session. Last, the Queued reasons
  that changed are written in bulk; an unchanged one costs nothing. Work placed on resources
  that evicted workloads still hold waits until they have stopped: nothing is double-booked,
  and no quota is exceeded, however many sessions run at once.

A session writes only its own decisions (Rejected, Queued with the reason, Starting with the
allocations) and returns what it decided (:class:`Decisions`); stopping the evicted work is
the caller's (``services.admit_queued`` passes ``evict``), and the backend is handed each start by
the lifecycle's listener after commit (``workloads.dispatch``).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from core.metrics import ADMISSION_SECONDS
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
from scheduling.models import DEFAULT_QUEUE, Allocation, Cluster, Node
from scheduling.models import Queue as QueueRow
from scheduling.placement import (
    FreeDevice,
    FreeNode,
    Placement,
    empty_shapes,
    place,
    resolve_policy,
    share_milli,
    too_big,
)
from tenants import services as tenant_services
from tenants.models import Tenant
from workloads import reasons as R
from workloads import windows
from workloads.admission_checks import refusal_for
from workloads.choices import HOLDING, WAITING, State
from workloads.lifecycle import queue_all, transition
from workloads.models import Grant, Workload
from workloads.reasons import stored
from workloads.specs import quota_request_for, resources_for

logger = logging.getLogger(__name__)


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
    contended: bool = False  # a start was no longer free at commit: another session may help


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
    res: Resources


@dataclass
class _Start:
    candidate: _Candidate
    slots: list[tuple[str, tuple[int, ...]]]  # per task: node name, device indices


@dataclass
class _Plan:
    """What the compute phase decided, for the commit phase to write."""

    rejected: list[tuple[Workload, R.Reason]] = field(default_factory=list)
    starts: list[_Start] = field(default_factory=list)
    queued: dict[object, tuple[Workload, R.Reason | None]] = field(default_factory=dict)
    evictions: list[Eviction] = field(default_factory=list)
    node_ids: dict[str, int] = field(default_factory=dict)  # node name → row id

    def queue(self, workload: Workload, reason: R.Reason | None) -> None:
        self.queued[workload.pk] = (workload, reason)


class _Session:
    """What one session computes once and reuses for every workload of the line: the free
    view and its node shapes, the backend's apps, the quota chains of the whole line, and
    per distinct flavor (and gang size) the answers that depend only on it."""

    def __init__(self, cluster: Cluster, nodes: list[FreeNode], waiting: list[Workload]):
        self.cluster = cluster
        self.nodes = nodes
        # "auto" resolved once per session, over the view just read (no query).
        self.policy = resolve_policy(cluster.placement_policy, nodes)
        self.shapes = empty_shapes(nodes)
        backend = get_backend(cluster)
        self.apps = backend.apps
        # Why the apps it lacks are missing, where the backend says (the local backend).
        self.unavailable: dict[str, R.Reason] = getattr(backend, "unavailable", None) or {}
        self.today = timezone.localdate()
        self.quotas = tenant_services.quota_snapshot((w.tenant, w.owner_id) for w in waiting)
        self._resources: dict[int, Resources] = {}
        self._too_big: dict[Resources, R.Reason | None] = {}
        self._no_such_gpu: dict[Resources, R.Reason | None] = {}
        self._milli: dict[Resources, int] = {}
        self._windows: dict[int, bool] = {}
        self._placements: dict[tuple[Resources, int], Placement] = {}
        self.checks: dict[str, Any] = {}  # the registered checks' memo (admission_checks)

    def resources(self, workload: Workload) -> Resources:
        flavor = workload.flavor
        if flavor.pk not in self._resources:
            self._resources[flavor.pk] = resources_for(flavor)
        return self._resources[flavor.pk]

    def too_big(self, res: Resources) -> R.Reason | None:
        if res not in self._too_big:
            self._too_big[res] = too_big(self.shapes, res)
        return self._too_big[res]

    def no_such_gpu(self, res: Resources) -> R.Reason | None:
        """Why it waits if the cluster has no such GPU at all right now (GPUs may be added)."""
        if res not in self._no_such_gpu:
            reason = None
            if (res.gpus or res.gpu_milli) and not any(
                not res.gpu_models or d.model in res.gpu_models
                for n in self.shapes
                for d in n.devices
            ):
                reason = place(self.shapes, res, 1).reason
            self._no_such_gpu[res] = reason
        return self._no_such_gpu[res]

    def window_open(self, grant: Grant) -> bool:
        if grant.pk not in self._windows:
            self._windows[grant.pk] = windows.is_open(grant.windows)
        return self._windows[grant.pk]

    def milli(self, res: Resources) -> int:
        if res not in self._milli:
            self._milli[res] = share_milli(res, self.nodes) if res.gpu_milli else 1000
        return self._milli[res]

    def placement(self, res: Resources, workers: int) -> Placement:
        """Where ``workers`` tasks of ``res`` would go on the free view as it is now; one core
        cluster and placer per distinct shape until the view changes (``changed``)."""
        key = (res, workers)
        if key not in self._placements:
            self._placements[key] = place(self.nodes, res, workers, self.policy)
        return self._placements[key]

    def changed(self) -> None:
        self._placements.clear()


def schedule(cluster: Cluster, evict: Callable[[Eviction], object] | None = None) -> Decisions:
    """One session over ``cluster``'s waiting line: computed from a snapshot read without
    locks, then committed in short transactions (``evict`` stops what it evicts first).
    Timed in ``quanta_admission_session_duration_seconds`` (an empty line too: it is a query)."""
    with ADMISSION_SECONDS.labels(cluster=cluster.slug).time():
        plan = _compute(cluster)
        if plan is None:
            return Decisions()
        return _commit(cluster, plan, evict)


# --- the compute phase: reads, no locks, no writes ----------------------------------------------


def _compute(cluster: Cluster) -> _Plan | None:
    waiting = list(
        Workload.objects.filter(cluster=cluster, state__in=WAITING)
        .select_related("flavor", "grant", "grant__template", "template", "tenant", "owner")
        .order_by("created_at")
    )
    if not waiting:
        return None
    nodes = free_nodes(cluster, lock=False)
    session = _Session(cluster, nodes, waiting)
    plan = _Plan()
    queues = _queues(cluster)
    queue_of = queue_resolver(cluster)
    candidates = []
    for workload in waiting:
        if _screen(workload, session, plan):
            candidate = _candidate(workload, session, plan, queues, queue_of)
            if candidate is not None:
                candidates.append(candidate)
    if not candidates:
        return plan
    running = _running(cluster, queues, queue_of)
    snapshot = Snapshot(
        nodes=_core_nodes(cluster, nodes),
        queues=[q for q, _open in queues.values()],
        jobs=[_job(c, order) for order, c in enumerate(candidates)],
        running=running,
        policy=session.policy,
    )
    decision = run_session(snapshot)
    plan.evictions = _evictions(decision.evictions)
    placed: dict[str, list[tuple[str, tuple[int, ...]]]] = defaultdict(list)
    for placement in decision.placements:
        placed[placement.job].append((placement.node, placement.devices))
    free = {n.name: n for n in nodes}
    plan.node_ids = {n.name: n.node_id for n in nodes}
    for candidate in candidates:
        workload = candidate.workload
        key = str(workload.pk)
        if key in placed and _fits(candidate, placed[key], free):
            request = quota_request_for(workload)
            refusal = session.quotas.check(workload.tenant, workload.owner_id, request)
            if refusal is not None:  # the line's earlier starts took the room
                plan.queue(workload, R.WAITING_FOR_QUOTA(why=refusal.reason))
                continue
            session.quotas.charge(workload.tenant, workload.owner_id, request)
            _take(candidate, placed[key], free)
            session.changed()
            plan.starts.append(_Start(candidate, placed[key]))
            continue
        if key in decision.rejected:
            plan.rejected.append((workload, decision.rejected[key]))
            continue
        plan.queue(
            workload, _why_waiting(candidate, session, decision.waiting.get(key), key in placed)
        )
    return plan


def _screen(workload: Workload, session: _Session, plan: _Plan) -> bool:
    """Decide what needs no session; True if the workload goes into the session."""
    grant, template = workload.grant, workload.template
    apps = session.apps
    if template and apps is not None and template.kind not in apps:
        cannot = session.unavailable.get(template.kind) or R.NEEDS_KUBERNETES(
            app=template.kind, cluster=session.cluster.name
        )
        plan.rejected.append((workload, cannot))
        return False
    if grant is not None and grant.expires_on and grant.expires_on < session.today:
        plan.rejected.append(
            (
                workload,
                R.GRANT_FOR_EXPIRED(template=str(grant.template), date=str(grant.expires_on)),
            )
        )
        return False
    refused = refusal_for(workload, session.checks)  # a payer's budget used up, say
    if refused is not None:
        plan.rejected.append((workload, refused))
        return False
    res = session.resources(workload)
    reason = session.too_big(res)
    if reason:
        plan.rejected.append((workload, reason))
        return False
    reason = session.no_such_gpu(res)
    if reason:  # no such GPU at all right now: GPUs may be added, so wait (the core would refuse)
        plan.queue(workload, reason)
        return False
    if grant is not None and not session.window_open(grant):
        plan.queue(workload, R.WAITING_FOR_WINDOW(windows=R.windows(grant.windows)))
        return False
    refusal = session.quotas.check(workload.tenant, workload.owner_id, quota_request_for(workload))
    if refusal is not None:
        plan.queue(workload, R.WAITING_FOR_QUOTA(why=refusal.reason))
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
    session: _Session,
    plan: _Plan,
    queues: dict[str, tuple[Queue, bool]],
    queue_of: Callable[[Tenant], str],
) -> _Candidate | None:
    name = queue_of(workload.tenant) or DEFAULT_QUEUE
    if not queues.get(name, (None, True))[1]:
        plan.queue(workload, R.WAITING(why=R.QUEUE_CLOSED(queue=name)))
        return None
    res = session.resources(workload)
    return _Candidate(workload, name, session.milli(res), res)


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


def _core_nodes(cluster: Cluster, nodes: list[FreeNode]) -> list[CoreNode]:
    """The scheduler core's nodes: the free view's devices, the rows' labels and taints."""
    by_name = {n.name: n for n in nodes}
    core = []
    for name, cpu_milli, memory_mib, labels, taints, cordoned in (
        Node.objects.filter(cluster=cluster, gone_at__isnull=True)
        .order_by("pk")
        .values_list("name", "cpu_milli", "memory_mib", "labels", "taints", "cordoned")
    ):
        free = by_name.get(name)
        devices = free.devices if free is not None else []
        core.append(
            CoreNode(
                name,
                cpu_milli,
                memory_mib,
                gpu_count=len(devices),
                gpu_model=devices[0].model if devices else "",
                labels=dict(labels or {}),
                taints=tuple(
                    Taint(t["key"], t.get("value", ""), t.get("effect", "NoSchedule"))
                    for t in taints or ()
                ),
                unschedulable=cordoned,
            )
        )
    return core


def _running(
    cluster: Cluster,
    queues: dict[str, tuple[Queue, bool]],
    queue_of: Callable[[Tenant], str],
) -> list[Running]:
    """What holds resources now, as the core sees it (from the allocation rows, read as plain
    values: a full 1,000-node cluster holds thousands)."""
    holding: dict[object, tuple[int, int]] = {}
    tenants: dict[int, Tenant] = {}
    for pk, priority, tenant_id, path in Workload.objects.filter(
        cluster=cluster, state__in=HOLDING
    ).values_list("pk", "priority", "tenant_id", "tenant__path"):
        holding[pk] = (priority, tenant_id)
        if tenant_id not in tenants:
            tenants[tenant_id] = Tenant(pk=tenant_id, path=path)
    rows: dict[tuple[object, int], list[tuple[int, int, int, int | None, str]]] = defaultdict(list)
    for held_id, task, cpu, memory, milli, index, node in (
        Allocation.objects.filter(workload__cluster=cluster, workload__state__in=HOLDING)
        .order_by("workload", "task", "pk")
        .values_list(
            "workload_id",
            "task",
            "cpu_milli",
            "memory_mib",
            "gpu_milli",
            "device__index",
            "node__name",
        )
    ):
        if held_id in holding:
            rows[(held_id, task)].append((cpu, memory, milli, index, node))
    by_workload: dict[object, list[tuple[TaskRequest, str, tuple[int, ...]]]] = defaultdict(list)
    for (part_of, task), parts in rows.items():
        devices = tuple(p[3] for p in parts if p[3] is not None)
        milli = next((p[2] for p in parts if p[3] is not None), 0)
        request = TaskRequest(
            f"{part_of}/{task}",
            cpu_milli=sum(p[0] for p in parts),
            memory_mib=sum(p[1] for p in parts),
            num_gpu=len(devices),
            gpu_milli=milli if devices else 0,
        )
        by_workload[part_of].append((request, parts[0][4], devices))
    running: list[Running] = []
    for job_id, tasks in by_workload.items():
        priority, tenant_id = holding[job_id]
        queue = queue_of(tenants[tenant_id]) or DEFAULT_QUEUE
        queue = queue if queue in queues else DEFAULT_QUEUE
        job = Job(
            str(job_id),
            tuple(t for t, _, _ in tasks),
            queue=queue,
            priority=priority,
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


def _fits(
    candidate: _Candidate, slots: list[tuple[str, tuple[int, ...]]], free: dict[str, FreeNode]
) -> bool:
    """Is what the session placed free right now in ``free``?"""
    flavor = candidate.workload.flavor
    needs: dict[str, tuple[int, int]] = defaultdict(lambda: (0, 0))
    for node_name, _devices in slots:
        cpu, memory = needs[node_name]
        needs[node_name] = (cpu + flavor.cpu_milli, memory + flavor.memory_mib)
    for node_name, (cpu, memory) in needs.items():
        node = free.get(node_name)
        if node is None or node.free_cpu_milli < cpu or node.free_memory_mib < memory:
            return False
    for node_name, devices in slots:
        by_index = {d.index: d for d in free[node_name].devices}
        if any(i not in by_index or by_index[i].free_milli < candidate.milli for i in devices):
            return False  # still held by work being evicted: wait until it has stopped
    return True


def _take(
    candidate: _Candidate, slots: list[tuple[str, tuple[int, ...]]], free: dict[str, FreeNode]
) -> list[Allocation]:
    """Take what the session placed from ``free``; the allocation rows that say so."""
    workload = candidate.workload
    flavor = workload.flavor
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
    return rows


def _why_waiting(
    candidate: _Candidate,
    session: _Session,
    session_reason: R.Reason | None,
    evicting: bool,
) -> R.Reason | None:
    if evicting:
        return R.WAITING_FOR_PREEMPTED()
    if session_reason is not None and session_reason.code.startswith("queue_"):
        return R.WAITING(why=session_reason)
    placement = session.placement(candidate.res, candidate.workload.workers)
    if not placement.placed:
        return placement.reason
    return R.WAITING(why=session_reason) if session_reason else R.WAITING_FOR_TURN()


# --- the commit phase: short transactions, locks only on what is written ------------------------


def _commit(cluster: Cluster, plan: _Plan, evict: Callable[[Eviction], object] | None) -> Decisions:
    """Write the plan. Starts re-check under locks (the nodes they allocate on, their own
    rows, the quota chains) that what they take is still free and still theirs; one that no
    longer fits is left for the next session (``Decisions.contended``)."""
    decisions = Decisions(evictions=plan.evictions)
    with transaction.atomic():
        if evict is not None:
            for eviction in plan.evictions:
                evict(eviction)
        for workload, reason in plan.rejected:
            transition(workload, State.REJECTED, reason=reason)
        if plan.starts:
            decisions.contended = not _start_all(cluster, plan, decisions)
    changed = [
        (workload, reason or "")
        for workload, reason in plan.queued.values()
        if workload.state != State.QUEUED
        or stored(reason) != (workload.reason_code, workload.reason_params, workload.reason)
    ]
    if changed:
        queue_all(changed)
    return decisions


def _start_all(cluster: Cluster, plan: _Plan, decisions: Decisions) -> bool:
    """Charge and allocate the planned starts; False if any could not be as planned."""
    as_planned = True
    node_ids = sorted({plan.node_ids[name] for s in plan.starts for name, _devices in s.slots})
    nodes = {n.name: n for n in free_nodes(cluster, lock=True, only=node_ids)}
    still_waiting = set(
        Workload.objects.select_for_update(of=("self",))
        .filter(pk__in=[s.candidate.workload.pk for s in plan.starts], state__in=WAITING)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    tenant_services.lock_chains(s.candidate.workload.tenant for s in plan.starts)
    for start in plan.starts:
        candidate = start.candidate
        workload = candidate.workload
        if workload.pk not in still_waiting or not _fits(candidate, start.slots, nodes):
            as_planned = False  # taken meanwhile by another session: the next one decides
            continue
        request = quota_request_for(workload)
        try:
            tenant_services.reserve(tenant=workload.tenant, user=workload.owner, request=request)
        except tenant_services.QuotaExceeded as exc:
            transition(workload, State.QUEUED, reason=R.WAITING_FOR_QUOTA(why=exc.refusal.reason))
            as_planned = False
            continue
        Allocation.objects.bulk_create(_take(candidate, start.slots, nodes))
        charged = {k: str(v) for k, v in vars(request).items()}
        where = ", ".join(sorted({node for node, _ in start.slots}))
        transition(
            workload,
            State.STARTING,
            reason=R.STARTING_ON(nodes=where),
            quota_request=charged,
            charged=True,
        )
        if workload.state == State.STARTING:
            decisions.started.append(str(workload.pk))
    return as_planned


def _eviction_reason(session_reason: R.Reason) -> R.Reason:
    """What the evicted person reads (the session names the other job by its id)."""
    if session_reason.code == "preempted_for":
        return R.PREEMPTED()
    if session_reason.code == "reclaimed_for":
        return R.RECLAIMED()
    return session_reason
