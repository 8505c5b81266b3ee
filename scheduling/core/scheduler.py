"""One scheduling session: a snapshot goes in, placements and evictions come out.

The actions follow Volcano's, in its order: enqueue (admit jobs whose queue has room), allocate
(place admitted jobs, fairest queue first), backfill (tasks that request nothing), reclaim
(take back from reclaimable queues above their deserved share for a queue below its own) and
preempt (evict lower-priority work of the same queue). The rules:

- gang: a job starts only when min_available of its tasks are placed together; otherwise
  every tentative placement (and eviction) of this session is rolled back;
- proportion: each queue deserves a share of the cluster by weight, capped by its capability
  and by what it asks for (water-filling); queues are served lowest share first and one at or
  above its deserved share in every resource waits while others ask;
- DRF: within a queue, higher priority first, then the job with the smallest dominant share;
- predicates: resources, GPU models, one device per fractional GPU, multi-GPU on one node,
  node selectors, taints and cordon (Placer and Cluster);
- a job with a task bigger than any node is rejected at once, with that reason.

Evicting a task that takes its job below min_available evicts the rest of that job too: a
gang never keeps running partially.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from core.reasons import Reason
from scheduling import reasons as R

from .cluster import Allocation, Cluster
from .model import Eviction, Job, Node, Placement, Queue, Resources, Running, TaskRequest
from .placement import Placer
from .policies import make_policy
from .predicates import node_admits, too_big_reason

Vec = npt.NDArray[np.float64]  # (cpu milli, memory MiB, gpu milli)
ACTIONS = ("enqueue", "allocate", "backfill", "reclaim", "preempt")
_EPS = 1e-9


def _vec(r: Resources) -> Vec:
    return np.array(r.as_tuple(), dtype=np.float64)


def _task_vec(task: TaskRequest) -> Vec:
    return _vec(Resources.of(task))


@dataclass(frozen=True)
class Snapshot:
    """Everything one session decides on."""

    nodes: Sequence[Node]
    queues: Sequence[Queue]
    jobs: Sequence[Job]  # every job with work pending; running ones too if they have tasks left
    running: Sequence[Running] = ()
    policy: str = "binpack"
    policy_options: Mapping[str, Any] = field(default_factory=dict)
    actions: Sequence[str] = ACTIONS
    overcommit: float = 1.2  # enqueue admits min requests up to this factor of idle resources
    seed: int = 0


@dataclass(frozen=True)
class Decision:
    """What the session decided: bind these, evict those, and why the rest waits."""

    placements: tuple[Placement, ...]
    evictions: tuple[Eviction, ...]
    admitted: tuple[str, ...]  # jobs enqueue admitted in this session
    waiting: Mapping[str, Reason]  # job -> why it is still queued
    rejected: Mapping[str, Reason]  # job -> why it can never run


def deserved_shares(
    total: Vec, queues: Sequence[Queue], requests: Mapping[str, Vec]
) -> dict[str, Vec]:
    """Volcano's proportion: split `total` by weight, each queue capped by its capability and
    its request, handing what a capped queue leaves to the others (water-filling)."""
    limit = {}
    for q in queues:
        cap = _vec(q.capability) if q.capability else np.full(3, np.inf)
        limit[q.name] = np.minimum(requests.get(q.name, np.zeros(3)), cap)
    deserved = {q.name: np.zeros(3) for q in queues}
    active = [q for q in queues if (limit[q.name] > _EPS).any()]
    for _ in range(200):
        remaining = total - sum(deserved.values(), np.zeros(3))
        weight = sum(q.weight for q in active)
        if not active or (remaining <= _EPS).all():
            break
        changed = False
        for q in active:
            grown = np.minimum(deserved[q.name] + remaining * q.weight / weight, limit[q.name])
            changed |= bool((grown > deserved[q.name] + _EPS).any())
            deserved[q.name] = grown
        active = [q for q in active if (deserved[q.name] < limit[q.name] - _EPS).any()]
        if not changed:
            break
    return deserved


def share(allocated: Vec, deserved: Vec) -> float:
    """The queue's share: its largest allocated / deserved ratio (anything over nothing is 1)."""
    ratios = [
        (a / d) if d > _EPS else (0.0 if a <= _EPS else 1.0)
        for a, d in zip(allocated, deserved, strict=True)
    ]
    return max(ratios)


@dataclass
class _Run:
    job: Job
    task: TaskRequest
    alloc: Allocation
    order: int  # when it started, for "most recent first" among equal victims


# Whether a running task may be evicted, given what is already chosen per queue.
Eligible = Callable[[_Run, dict[str, Vec]], bool]


def _never(run: _Run, minus: dict[str, Vec]) -> bool:
    return False


class Session:
    """The mutable working state of one schedule() call."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.cluster = Cluster(snap.nodes)
        self.queues = {q.name: q for q in snap.queues}
        workload = [t for j in snap.jobs for t in j.tasks] + [r.task for r in snap.running]
        policy = make_policy(snap.policy, workload=workload, **dict(snap.policy_options))
        self.placer = Placer(self.cluster, policy, np.random.default_rng(snap.seed))
        self.jobs = {j.name: j for j in snap.jobs}
        self.running: dict[tuple[str, str], _Run] = {}
        self.queue_alloc = {name: np.zeros(3) for name in self.queues}
        self.job_alloc: dict[str, Vec] = {}
        for i, r in enumerate(snap.running):
            self.jobs.setdefault(r.job.name, r.job)
            alloc = self.cluster.allocate(self.cluster.index[r.node], r.task, r.devices)
            self._add(r.job, r.task, alloc, order=-len(snap.running) + i)
        self.total = np.array(
            [
                self.cluster.cpu_cap[self.cluster.schedulable].sum(),
                self.cluster.mem_cap[self.cluster.schedulable].sum(),
                self.cluster.gpu_count[self.cluster.schedulable].sum() * 1000,
            ],
            dtype=np.float64,
        )
        self.rejected: dict[str, Reason] = {}
        self.screen()
        requests = {name: alloc.copy() for name, alloc in self.queue_alloc.items()}
        for job in snap.jobs:
            if job.queue in requests and job.name not in self.rejected:
                for task in self.pending_tasks(job):
                    requests[job.queue] += _task_vec(task)
        self.deserved = deserved_shares(self.total, snap.queues, requests)
        self.placements: dict[tuple[str, str], Placement] = {}
        self.evictions: list[Eviction] = []
        self.admitted: list[str] = []
        self.inqueue: list[str] = [j.name for j in snap.jobs if self.running_count(j)]
        self.waiting: dict[str, Reason] = {}
        self._clock = 0
        self._held: dict[tuple[str, int], Vec] | None = None  # running demand per queue, priority

    # --- bookkeeping ---------------------------------------------------------------------

    def _add(self, job: Job, task: TaskRequest, alloc: Allocation, order: int) -> None:
        self.running[(job.name, task.name)] = _Run(job, task, alloc, order)
        v = _task_vec(task)
        if job.queue in self.queue_alloc:
            self.queue_alloc[job.queue] += v
        self.job_alloc[job.name] = self.job_alloc.get(job.name, np.zeros(3)) + v

    def _remove(self, key: tuple[str, str]) -> _Run:
        run = self.running.pop(key)
        self.cluster.release(run.alloc)
        v = _task_vec(run.task)
        if run.job.queue in self.queue_alloc:
            self.queue_alloc[run.job.queue] -= v
        self.job_alloc[run.job.name] -= v
        return run

    def _start(self, job: Job, task: TaskRequest, node: int, devices: Sequence[int]) -> None:
        alloc = self.cluster.allocate(node, task, devices)
        self._clock += 1
        self._add(job, task, alloc, self._clock)
        self.placements[(job.name, task.name)] = Placement(
            task.name, self.cluster.nodes[node].name, alloc.devices, job.name
        )

    def _undo_start(self, job: Job, task: TaskRequest) -> None:
        self._remove((job.name, task.name))
        del self.placements[(job.name, task.name)]

    def running_count(self, job: Job) -> int:
        return sum(1 for t in job.tasks if (job.name, t.name) in self.running)

    def pending_tasks(self, job: Job) -> list[TaskRequest]:
        return [t for t in job.tasks if (job.name, t.name) not in self.running]

    def queue_share(self, queue: str) -> float:
        return share(self.queue_alloc[queue], self.deserved[queue])

    def overused(self, queue: str) -> bool:
        return bool((self.deserved[queue] <= self.queue_alloc[queue] + _EPS).all())

    def within_capability(self, queue: str, task: TaskRequest) -> bool:
        cap = self.queues[queue].capability
        return cap is None or bool(
            (self.queue_alloc[queue] + _task_vec(task) <= _vec(cap) + _EPS).all()
        )

    def dominant_share(self, job: Job) -> float:
        alloc = self.job_alloc.get(job.name, np.zeros(3))
        return max((a / t) if t > 0 else 0.0 for a, t in zip(alloc, self.total, strict=True))

    def job_order(self, job: Job) -> tuple[int, float, int, str]:
        """Priority first, then DRF (smallest dominant share), then submission order."""
        return (-job.priority, self.dominant_share(job), job.order, job.name)

    # --- actions -------------------------------------------------------------------------

    def screen(self) -> None:
        """Refuse at once what can never run: an unknown queue, a task bigger than any node."""
        for job in self.jobs.values():
            if not self.pending_tasks(job):
                continue
            if job.queue not in self.queues:
                self.rejected[job.name] = R.NO_QUEUE_NAMED(queue=repr(job.queue))
                continue
            too_big = [(t, r) for t in job.tasks if (r := too_big_reason(self.cluster, t))]
            if too_big:
                self.rejected[job.name] = R.TASK_TOO_BIG(task=too_big[0][0].name, why=too_big[0][1])

    def enqueue(self) -> None:
        """Admit pending jobs whose queue capability and the cluster's room allow.

        Room is the idle resources times the overcommit factor (Volcano's overcommit plugin),
        plus, when preempt or reclaim run, what they could take back for this job: otherwise a
        full cluster would never admit the job that preemption exists for.
        """
        idle = (
            np.array(
                [
                    self.cluster.cpu_free[self.cluster.schedulable].sum(),
                    self.cluster.mem_free[self.cluster.schedulable].sum(),
                    self.cluster.dev_free[self.cluster.schedulable].sum(),
                ],
                dtype=np.float64,
            )
            * self.snap.overcommit
        )
        claimed = {name: np.zeros(3) for name in self.queues}
        self._held = None
        evictable: dict[tuple[str, int], Vec] = {}
        for job in sorted(self.jobs.values(), key=self.job_order):
            if job.name in self.inqueue or job.name in self.rejected:
                continue
            need = _vec(job.min_request)
            cap = self.queues[job.queue].capability
            if (
                cap is not None
                and (
                    self.queue_alloc[job.queue] + claimed[job.queue] + need > _vec(cap) + _EPS
                ).any()
            ):
                self.waiting[job.name] = R.QUEUE_CAPABILITY(queue=job.queue)
                continue
            if (need > idle + _EPS).any():
                # What preemption and reclaim could free depends only on the job's queue and
                # priority while enqueue runs (nothing runs or stops meanwhile): once each.
                key = (job.queue, job.priority)
                if key not in evictable:
                    evictable[key] = self._evictable_for(job)
                if (need > idle + evictable[key] + _EPS).any():
                    self.waiting[job.name] = R.CLUSTER_FULL()
                    continue
            idle -= need
            claimed[job.queue] += need
            self.inqueue.append(job.name)
            self.admitted.append(job.name)

    def _evictable_for(self, job: Job) -> Vec:
        """What preempt and reclaim could free for the job (an upper bound).

        The running tasks are summed per queue and priority once per session (nothing runs or
        stops while enqueue asks), so each job costs a pass over those sums, not the tasks."""
        if self._held is None:
            self._held = {}
            for run in self.running.values():
                key = (run.job.queue, run.job.priority)
                self._held[key] = self._held.get(key, np.zeros(3)) + _task_vec(run.task)
        total = np.zeros(3)
        preempt = "preempt" in self.snap.actions
        reclaim = "reclaim" in self.snap.actions and not self.overused(job.queue)
        for (q, priority), held in self._held.items():
            lower = q == job.queue and priority < job.priority
            over = (
                reclaim
                and q != job.queue
                and q in self.queues
                and self.queues[q].reclaimable
                and not bool((self.queue_alloc[q] <= self.deserved[q] + _EPS).all())
            )
            if (lower and preempt) or over:
                total += held
        return total

    def _admitted_pending(self) -> list[Job]:
        return [
            self.jobs[name]
            for name in self.inqueue
            if self.pending_tasks(self.jobs[name]) and name not in self.rejected
        ]

    def allocate(self) -> None:
        """Place admitted jobs: lowest-share queue first, its best job by priority and DRF."""
        # A job's place in its queue (priority, dominant share, order) changes only when the
        # job itself is placed, and then it leaves the list: sort once, take from the front.
        todo = {
            name: sorted(
                (j for j in self._admitted_pending() if j.queue == name),
                key=self.job_order,
                reverse=True,
            )
            for name in self.queues
        }
        while True:
            ready = [q for q, jobs in todo.items() if jobs and not self.overused(q)]
            for q, jobs in todo.items():
                if jobs and q not in ready:
                    for job in jobs:
                        self.waiting.setdefault(job.name, R.QUEUE_DESERVED(queue=q))
                    jobs.clear()
            if not ready:
                return
            queue = min(ready, key=lambda q: (self.queue_share(q), q))
            job = todo[queue].pop()
            cap = self.queues[queue].capability
            if (
                cap is not None
                and (self.queue_alloc[queue] + _vec(job.min_request) > _vec(cap) + _EPS).any()
            ):
                self.waiting[job.name] = R.QUEUE_CAPABILITY(queue=queue)
            elif self._place_gang(job, _never) is None:
                self.waiting[job.name] = self._why_not(job)
            else:
                self.waiting.pop(job.name, None)

    def backfill(self) -> None:
        """Tasks that request nothing (best effort) go on any node their predicates allow."""
        for job in self._admitted_pending():
            best_effort = all(Resources.of(t) == Resources() for t in self.pending_tasks(job))
            if best_effort and self._place_gang(job, _never) is not None:
                self.waiting.pop(job.name, None)

    def reclaim(self) -> None:
        """For queues below their deserved share, evict work of reclaimable queues above it.

        As Volcano's proportion plugin: a queue gives victims while what it would still hold
        exceeds its deserved share in some resource.
        """
        for job in sorted(self._admitted_pending(), key=self.job_order):
            if self.overused(job.queue):
                continue

            def eligible(run: _Run, minus: dict[str, Vec], job: Job = job) -> bool:
                q = run.job.queue
                if q == job.queue or q not in self.queues or not self.queues[q].reclaimable:
                    return False
                held = self.queue_alloc[q] - minus.get(q, 0.0)
                return not bool((held <= self.deserved[q] + _EPS).all())

            if self._place_gang(job, eligible, "reclaimed") is not None:
                self.waiting.pop(job.name, None)

    def preempt(self) -> None:
        """Evict lower-priority work of the same queue for a job that cannot be placed."""
        for job in sorted(self._admitted_pending(), key=self.job_order):

            def eligible(run: _Run, minus: dict[str, Vec], job: Job = job) -> bool:
                return run.job.queue == job.queue and run.job.priority < job.priority

            if self._place_gang(job, eligible, "preempted") is not None:
                self.waiting.pop(job.name, None)

    # --- gang placement with optional evictions -------------------------------------------

    def _place_gang(self, job: Job, eligible: Eligible, verb: str = "") -> list[TaskRequest] | None:
        """Place the job's pending tasks, evicting eligible victims where allowed; all or
        nothing up to min_available. Returns the tasks placed, or None after rolling back."""
        need = max(1, job.min_available - self.running_count(job))
        placed: list[TaskRequest] = []
        evicted: list[_Run] = []
        for task in self.pending_tasks(job):
            if not self.within_capability(job.queue, task):
                break
            choice = self.placer.choose(task)
            if choice is None and verb:
                victims = self._victims_for(task, eligible)
                if victims:
                    evicted += [self._remove(key) for key in victims]
                    choice = self.placer.choose(task)
            if choice is not None:
                self._start(job, task, *choice)
                placed.append(task)
        if len(placed) < need:
            for task in placed:
                self._undo_start(job, task)
            for run in reversed(evicted):
                alloc = self.cluster.allocate(run.alloc.node, run.task, run.alloc.devices)
                self._add(run.job, run.task, alloc, run.order)
            return None
        for run in evicted:
            code = R.PREEMPTED_FOR if verb == "preempted" else R.RECLAIMED_FOR
            self._record_eviction(run, code(job=job.name))
        self._break_gangs(evicted, job)
        return placed

    def _victims_for(self, task: TaskRequest, eligible: Eligible) -> list[tuple[str, str]]:
        """The cheapest set of eligible running tasks on one node whose eviction lets the task
        fit there: fewest victims, then the lowest top priority; lowest priority and most
        recent go first. Empty when no node works. Leaves the cluster as it found it."""
        by_node: dict[int, list[tuple[tuple[str, str], _Run]]] = {}
        for key, run in self.running.items():
            by_node.setdefault(run.alloc.node, []).append((key, run))
        best: tuple[tuple[int, int], list[tuple[str, str]]] | None = None
        for node, runs in sorted(by_node.items()):
            if not node_admits(self.cluster.nodes[node], task):
                continue
            runs.sort(key=lambda kr: (kr[1].job.priority, -kr[1].order))
            minus: dict[str, Vec] = {}
            chosen: list[tuple[tuple[str, str], _Run]] = []
            fits = False
            for key, run in runs:
                if not eligible(run, minus):
                    continue
                self.cluster.release(run.alloc)
                chosen.append((key, run))
                minus[run.job.queue] = minus.get(run.job.queue, np.zeros(3)) + _task_vec(run.task)
                if self.cluster.fits(task, np.array([node]))[0]:
                    fits = True
                    break
            for _, run in chosen:
                self.cluster.allocate(run.alloc.node, run.task, run.alloc.devices)
            if fits:
                cost = (len(chosen), max(run.job.priority for _, run in chosen))
                if best is None or cost < best[0]:
                    best = (cost, [key for key, _ in chosen])
        return [] if best is None else best[1]

    def _record_eviction(self, run: _Run, reason: Reason) -> None:
        """Report the eviction; a task placed earlier in this session just loses its place."""
        key = (run.job.name, run.task.name)
        if self.placements.pop(key, None) is not None:
            self.waiting[run.job.name] = R.LOST_PLACEMENT(why=reason)
            return
        self.evictions.append(
            Eviction(run.task.name, run.job.name, self.cluster.nodes[run.alloc.node].name, reason)
        )

    def _break_gangs(self, evicted: list[_Run], preemptor: Job) -> None:
        """A victim job left below min_available loses the rest of its tasks too."""
        for name in dict.fromkeys(run.job.name for run in evicted):
            victim = self.jobs[name]
            if 0 < self.running_count(victim) < victim.min_available:
                for task in victim.tasks:
                    key = (victim.name, task.name)
                    if key in self.running:
                        run = self._remove(key)
                        self._record_eviction(
                            run, R.GANG_BROKEN(job=victim.name, preemptor=preemptor.name)
                        )

    def _why_not(self, job: Job) -> Reason:
        """A human-readable reason the job could not be placed now."""
        need = max(1, job.min_available - self.running_count(job))
        pending = self.pending_tasks(job)
        fit = [t for t in pending if self.placer.choose(t) is not None]
        if len(fit) == len(pending) or (fit and len(fit) < need):
            return R.GANG_NOT_ALL_FIT(n=need)
        task = next(t for t in pending if t not in fit)
        free_gpu = int(self.cluster.dev_free[self.cluster.schedulable].sum())
        if task.num_gpu and free_gpu >= task.gpu_total_milli:
            return R.FRAGMENTATION(
                free=f"{free_gpu / 1000:g}", gpus=task.num_gpu, milli=task.gpu_milli, task=task.name
            )
        return R.NO_NODE_FITS_TASK(task=task.name)

    def decision(self) -> Decision:
        for job in self.jobs.values():
            if job.name not in self.rejected and self.pending_tasks(job):
                if self.running_count(job) >= job.min_available:
                    self.waiting.pop(job.name, None)
                else:
                    self.waiting.setdefault(job.name, R.NOT_ADMITTED())
            else:
                self.waiting.pop(job.name, None)
        return Decision(
            placements=tuple(self.placements.values()),
            evictions=tuple(self.evictions),
            admitted=tuple(self.admitted),
            waiting=dict(self.waiting),
            rejected=dict(self.rejected),
        )


def schedule(snapshot: Snapshot) -> Decision:
    """Run one session over the snapshot with the snapshot's actions, in Volcano's order."""
    unknown = set(snapshot.actions) - set(ACTIONS)
    if unknown:
        raise ValueError(f"unknown actions: {', '.join(sorted(unknown))}")
    session = Session(snapshot)
    if "enqueue" not in snapshot.actions:  # no admission control: every job is admitted
        session.inqueue += [name for name in session.jobs if name not in session.inqueue]
    for action in ACTIONS:
        if action in snapshot.actions:
            getattr(session, action)()
    return session.decision()
