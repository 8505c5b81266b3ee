"""The plain values the scheduler core speaks: nodes, tasks, jobs, queues and decisions.

Everything here is immutable, so a snapshot handed to the scheduler cannot change under it and
the same snapshot always gives the same decision. GPU amounts are in milli-GPU (1000 = one
device); CPU in milli-cores; memory in MiB, as in the openb traces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from core.reasons import Reason

MILLI = 1000


@dataclass(frozen=True)
class Taint:
    """A node taint: only tasks that tolerate it may be placed there (effect NoSchedule)."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True)
class Toleration:
    """Tolerates taints with this key; value None tolerates any value, effect None any effect."""

    key: str
    value: str | None = None
    effect: str | None = None

    def tolerates(self, taint: Taint) -> bool:
        return (
            self.key == taint.key
            and (self.value is None or self.value == taint.value)
            and (self.effect is None or self.effect == taint.effect)
        )


@dataclass(frozen=True)
class Node:
    """One host: its capacity, its GPUs (all of one model) and what restricts placement on it."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int = 0
    gpu_model: str = ""
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False  # cordoned: running work stays, nothing new lands

    def __post_init__(self) -> None:
        if min(self.cpu_milli, self.memory_mib, self.gpu_count) < 0:
            raise ValueError(f"node {self.name}: negative capacity")
        if self.gpu_count and not self.gpu_model:
            raise ValueError(f"node {self.name}: {self.gpu_count} GPUs without a model")


@dataclass(frozen=True)
class TaskRequest:
    """What one task (pod) needs and where it may run.

    A sharing task (one GPU, gpu_milli < 1000) takes a slice of one device; a task with
    num_gpu = k takes k devices of one node, each with at least gpu_milli free (whole devices
    when gpu_milli is 1000). gpu_models empty means any model.
    """

    name: str
    cpu_milli: int = 0
    memory_mib: int = 0
    num_gpu: int = 0
    gpu_milli: int = 0
    gpu_models: frozenset[str] = frozenset()
    node_selector: Mapping[str, str] = field(default_factory=dict, hash=False)
    tolerations: tuple[Toleration, ...] = ()
    creation_time: float | None = None
    deletion_time: float | None = None
    scheduled_time: float | None = None

    def __post_init__(self) -> None:
        if min(self.cpu_milli, self.memory_mib, self.num_gpu, self.gpu_milli) < 0:
            raise ValueError(f"task {self.name}: negative request")
        if self.num_gpu and not 0 < self.gpu_milli <= MILLI:
            raise ValueError(f"task {self.name}: gpu_milli must be in 1..{MILLI} per GPU")
        if not self.num_gpu and self.gpu_milli:
            raise ValueError(f"task {self.name}: gpu_milli without num_gpu")

    @property
    def gpu_total_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    @property
    def is_sharing(self) -> bool:
        return self.num_gpu == 1 and self.gpu_milli < MILLI

    @cached_property
    def shape(self) -> Shape:
        """Everything placement depends on; tasks with equal shapes are interchangeable."""
        return Shape(
            self.cpu_milli,
            self.memory_mib,
            self.num_gpu,
            self.gpu_milli,
            self.gpu_models,
            tuple(sorted(self.node_selector.items())),
            self.tolerations,
        )


@dataclass(frozen=True)
class Shape:
    """The hashable placement-relevant part of a task (its name and times left out)."""

    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_models: frozenset[str]
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True)
class Resources:
    """An amount of the three resources queues and jobs are measured in."""

    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_milli: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu_milli + other.cpu_milli,
            self.memory_mib + other.memory_mib,
            self.gpu_milli + other.gpu_milli,
        )

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.cpu_milli, self.memory_mib, self.gpu_milli)

    @classmethod
    def of(cls, task: TaskRequest) -> Resources:
        return cls(task.cpu_milli, task.memory_mib, task.gpu_total_milli)


@dataclass(frozen=True)
class Queue:
    """A queue's share of the cluster: deserved by weight, never above capability.

    Reclaimable queues give back what they hold beyond their deserved share when another
    queue needs it.
    """

    name: str
    weight: int = 1
    capability: Resources | None = None
    reclaimable: bool = True

    def __post_init__(self) -> None:
        if self.weight <= 0:
            raise ValueError(f"queue {self.name}: weight must be positive")


@dataclass(frozen=True)
class Job:
    """A gang of tasks: it runs when at least min_available of them can run together."""

    name: str
    tasks: tuple[TaskRequest, ...]
    queue: str = "default"
    priority: int = 0
    min_available: int = 1
    order: int = 0  # submission order, the last tie-breaker

    def __post_init__(self) -> None:
        if not 1 <= self.min_available <= len(self.tasks):
            raise ValueError(f"job {self.name}: min_available must be in 1..{len(self.tasks)}")

    @property
    def min_request(self) -> Resources:
        """What the job needs to start: its min_available largest tasks."""
        ordered = sorted(self.tasks, key=lambda t: Resources.of(t).as_tuple()[::-1], reverse=True)
        total = Resources()
        for task in ordered[: self.min_available]:
            total = total + Resources.of(task)
        return total


@dataclass(frozen=True)
class Placement:
    """A task bound to a node and, for GPU tasks, to devices of that node."""

    task: str
    node: str
    devices: tuple[int, ...] = ()
    job: str = ""


@dataclass(frozen=True)
class Running:
    """A task already running, as the snapshot reports it."""

    job: Job
    task: TaskRequest
    node: str
    devices: tuple[int, ...] = ()


@dataclass(frozen=True)
class Eviction:
    """A running task the scheduler takes back, and why."""

    task: str
    job: str
    node: str
    reason: Reason
