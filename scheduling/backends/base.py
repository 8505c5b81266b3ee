"""The contract every cluster backend implements.

Plain dataclasses in and out, no Django: a backend can be tested, and reasoned about, without
a database. The portal keeps ``Handle.state`` as JSON on the workload row, so a restarted
portal re-attaches to what is running. Every call is idempotent: submitting the same
workload (and attempt) twice starts it once, stopping a stopped workload does nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from core.reasons import Reason


class Phase(StrEnum):
    """What a backend says about one workload. The portal maps it onto its lifecycle."""

    PENDING = "pending"  # accepted, not started yet (e.g. waiting for the cluster's scheduler)
    STARTING = "starting"  # processes / pods exist but are not serving or running yet
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"  # stopped on request
    UNKNOWN = "unknown"  # the backend knows nothing of it (never submitted, or lost)


TERMINAL_PHASES = (Phase.SUCCEEDED, Phase.FAILED, Phase.STOPPED)


@dataclass(frozen=True)
class Resources:
    """What each task (worker) of a workload needs."""

    cpu_milli: int = 1000
    memory_mib: int = 1024
    gpus: int = 0  # whole devices
    gpu_milli: int = 0  # a share of one device, 1..999 (0: none or whole devices)
    gpu_memory_mib: int = 0  # with gpu_milli: the device memory the share may use
    gpu_models: tuple[str, ...] = ()  # allowed models; empty: any


@dataclass(frozen=True)
class TaskPlacement:
    """Where one task runs, as decided by the portal's scheduler (local and simulated)."""

    node: str
    gpu_indices: tuple[int, ...] = ()


@dataclass(frozen=True)
class DatasetMount:
    """A dataset a workload sees read-only at ``target`` (``/datasets/<slug>``): the folder
    ``source`` on the host (local), or the claim ``claim`` (with ``sub_path``) on Kubernetes."""

    name: str
    target: str
    source: str = ""
    claim: str = ""
    sub_path: str = ""


@dataclass(frozen=True)
class ReplicaWindow:
    """A time of day when an endpoint keeps at least ``min_replicas`` (昼推夜训: serving by
    day, the GPUs back to training at night). ``days``: 0 = Monday … 6 = Sunday; a window
    whose start is after its end runs across midnight (its days are those it starts on)."""

    days: tuple[int, ...]
    start: dt.time
    end: dt.time
    min_replicas: int


@dataclass(frozen=True)
class ServingSpec:
    """What a serving workload serves and how it scales (``WorkloadSpec.serving``).

    The model server speaks the Open Inference Protocol v2 (``/v2/health/ready``,
    ``/v2/models/<model_name>/infer``) for ``model_name`` from the version's files: the folder
    ``model_dir`` on the host (local), or ``storage_uri`` (``pvc://claim/path``) on Kubernetes.
    Replicas stay between ``min_replicas`` and ``max_replicas``, aiming at
    ``target_concurrency`` requests in flight per replica; with ``min_replicas`` 0 an idle
    endpoint scales to zero after ``scale_to_zero_after_s`` and starts on the next request.
    ``schedule`` raises the minimum inside its windows (``scheduling.serving.min_replicas_at``)."""

    model_name: str
    framework: str  # "sklearn", "pytorch", "onnx", "custom", …
    model_dir: str = ""
    storage_uri: str = ""
    min_replicas: int = 1
    max_replicas: int = 1
    target_concurrency: int = 4
    scale_to_zero_after_s: int = 300
    schedule: tuple[ReplicaWindow, ...] = ()
    # Also scale on GPU utilisation (percent per replica) where it is known; 0: requests only.
    target_gpu_utilisation: int = 0


@dataclass(frozen=True)
class WorkloadSpec:
    workload_id: str  # a UUID; every name the backend makes derives from it
    kind: str  # "notebook", "job" or "serving"
    app: str  # template kind: "jupyter", "terminal", "vscode", …; "command" for jobs
    owner: str  # username
    command: tuple[str, ...] = ()  # jobs: argv of each task; notebooks: empty
    env: Mapping[str, str] = field(default_factory=dict)
    resources: Resources = field(default_factory=Resources)
    workers: int = 1  # gang size: all tasks start together or none do
    max_retries: int = 0  # a job is restarted whole at most this often after a failure
    attempt: int = 0  # submit is idempotent per (workload_id, attempt)
    image: str = ""  # container image (kubernetes); the local backend runs on the host
    base_url: str = ""  # path prefix the portal proxies (notebooks), e.g. "/nb/<id>/"
    working_dir: str = ""  # the owner's persistent directory
    placement: tuple[TaskPlacement, ...] = ()  # one per task; empty where the cluster places
    queue: str = ""  # scheduler queue (kubernetes)
    priority: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    program: tuple[str, ...] = ()  # desktops: the program (argv) the desktop starts
    datasets: tuple[DatasetMount, ...] = ()  # mounted read-only
    serving: ServingSpec | None = None  # kind "serving": the model and its scaling


@dataclass
class Handle:
    """What the portal keeps to find a workload again: JSON-serialisable ``state``."""

    workload_id: str
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Observation:
    workload_id: str
    phase: Phase
    reason: Reason | None = None  # scheduling.reasons: "worker 2 exited with code 1", …
    exit_code: int | None = None
    last_activity: dt.datetime | None = None  # notebooks: last kernel / terminal activity
    attempt: int = 0


@dataclass(frozen=True)
class Endpoint:
    """How the portal's proxy reaches a notebook. ``headers`` carry its credentials and are
    added upstream only: they never reach the browser."""

    url: str  # e.g. "http://127.0.0.1:41234/nb/<id>/"
    headers: Mapping[str, str] = field(default_factory=dict)
    # HTTP and WebSocket go over this UNIX socket instead of TCP (``url`` then only names the
    # path prefix and the Host): other workloads share the network, not the socket.
    unix_socket: str = ""
    # A desktop: the VNC server's raw RFB socket. The proxy serves noVNC's files from
    # ``static_dir`` under /nb/<id>/ and bridges noVNC's WebSocket (/nb/<id>/websockify) to it.
    rfb_socket: str = ""
    static_dir: str = ""


@dataclass(frozen=True)
class GpuInfo:
    index: int
    model: str
    memory_mib: int
    uuid: str = ""


@dataclass(frozen=True)
class NodeInfo:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: tuple[GpuInfo, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    schedulable: bool = True


@dataclass(frozen=True)
class GpuReading:
    """One device's utilisation now, as the backend's source reports it (``UtilisationBackend``).

    ``utilisation``: percent of the last sample period the device was busy (NVML's ``gpu``
    rate, DCGM's ``DCGM_FI_DEV_GPU_UTIL``); ``memory_used_mib``: framebuffer in use.
    ``workload_ids``: the workloads the source itself says use the device (DCGM's pod labels
    on Kubernetes); empty where the portal's allocations say it instead (local, simulated)."""

    node: str
    index: int
    utilisation: int
    memory_used_mib: int = 0
    workload_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class LogChunk:
    text: str
    next_offset: int  # pass back as ``offset`` to read on
    tasks: int  # how many tasks have logs


class BackendError(Exception):
    """A call failed. ``transient`` errors are retried; others fail the workload with
    ``str(error)`` as the reason."""

    def __init__(
        self, message: str, *, transient: bool = False, reason: Reason | None = None
    ) -> None:
        super().__init__(message)
        self.transient = transient
        self.reason = reason  # the same, as a reason code (translatable), where there is one


class Backend(Protocol):
    kind: str
    # The template kinds (``WorkloadSpec.app``) it can run; None: every kind. Admission
    # refuses the others at once, with the reason, instead of failing them at submit.
    apps: frozenset[str] | None

    def submit(self, spec: WorkloadSpec) -> Handle:
        """Start the workload (all tasks, or none). Idempotent by (workload_id, attempt)."""
        ...

    def stop(self, handle: Handle) -> None:
        """Stop every task. Idempotent; returns once the stop is under way."""
        ...

    def observe(self, handles: Sequence[Handle]) -> dict[str, Observation]:
        """The current phase of each workload, by workload id."""
        ...

    def endpoint(self, handle: Handle) -> Endpoint | None:
        """Where a notebook serves, once it does."""
        ...

    def logs(self, handle: Handle, task: int = 0, offset: int = 0, limit: int = 65536) -> LogChunk:
        """A task's output from ``offset`` on."""
        ...

    def nodes(self) -> tuple[NodeInfo, ...]:
        """The nodes and GPUs this backend can run on."""
        ...

    def running(self) -> set[str]:
        """Ids of the workloads this backend has alive now (to find orphans after a crash)."""
        ...


@dataclass(frozen=True)
class ReplicaStatus:
    """A serving workload's replicas now: how many it should have, the ones that answer
    (each reached like a notebook, ``Endpoint``), and those still starting."""

    desired: int
    ready: tuple[Endpoint, ...] = ()
    starting: int = 0
    # Percent, the mean over the ready replicas' GPUs; None where it is not known.
    gpu_utilisation: int | None = None


@runtime_checkable
class ScalingBackend(Protocol):
    """An optional capability: change a serving workload's replica count between its
    ``min_replicas`` and ``max_replicas`` (the portal's autoscaler decides), and list the
    replicas that answer (the gateway spreads requests over them)."""

    supports_scaling: bool

    def scale(self, handle: Handle, replicas: int) -> None:
        """Aim at ``replicas`` (0 allowed); idempotent, returns once the change is under way."""
        ...

    def replicas(self, handle: Handle) -> ReplicaStatus:
        """The replicas as they are now."""
        ...


@runtime_checkable
class UtilisationBackend(Protocol):
    """An optional capability: read the GPUs' utilisation now (NVML on the local backend,
    DCGM exporter series through Prometheus on Kubernetes, made-up values on the simulated
    one). Never raises for a missing source: no driver, no library, no Prometheus or a
    broken answer is ``()``, "no reading", and nothing is culled on GPU grounds."""

    def gpu_readings(self) -> tuple[GpuReading, ...]:
        """A reading per device the source knows of now; ``()`` without a source."""
        ...


@runtime_checkable
class ExecBackend(Protocol):
    """An optional capability: run commands inside a running workload (the SSH gateway,
    docs/ssh.md). The local backend has it; the Kubernetes backend not yet (the pod exec API
    would be the way), nor the simulated one, whose workloads run nothing."""

    supports_exec: bool

    def exec_argv(
        self, handle: Handle, argv: Sequence[str]
    ) -> tuple[list[str], dict[str, str], str]:
        """(argv, env, cwd) that run ``argv`` inside the workload, as its owner's tasks run.
        BackendError when it does not run."""
        ...

    def listening_ports(self, handle: Handle) -> set[int]:
        """TCP ports on the loopback that the workload's processes listen on: where the SSH
        gateway may forward a connection."""
        ...
