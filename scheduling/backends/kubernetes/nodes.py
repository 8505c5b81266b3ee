"""GPU inventory from Node and Pod objects: pure, so 1,000 nodes and 10,000 pods are plain
dict work, tested without a cluster.

What a node offers the portal is its allocatable CPU and memory less what pods Quanta did not
start (system daemons, other users of the cluster) request on it: Quanta's own workloads are
already counted by the portal's allocations. GPUs are the devices the node advertises, whole
(``nvidia.com/gpu``, NVIDIA's device plugin) or shared (``volcano.sh/vgpu-*``, Volcano's vGPU
device plugin), with the model and memory from GPU feature discovery's labels.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from scheduling.backends.base import GpuInfo, NodeInfo
from scheduling.backends.kubernetes import names
from scheduling.backends.kubernetes.config import KubernetesConfig
from scheduling.backends.kubernetes.manifests import GPU, VGPU_CORES, VGPU_MEMORY, VGPU_NUMBER

Obj = Mapping[str, Any]
MIB = Decimal(1024 * 1024)
TERMINAL_POD_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class Requests:
    cpu_milli: int = 0
    memory_mib: int = 0
    gpus: int = 0

    def __add__(self, other: Requests) -> Requests:
        return Requests(
            self.cpu_milli + other.cpu_milli,
            self.memory_mib + other.memory_mib,
            self.gpus + other.gpus,
        )


@dataclass(frozen=True)
class NodeInventory:
    name: str
    cpu_milli: int  # allocatable, less the requests of pods Quanta did not start
    memory_mib: int
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()
    cordoned: bool = False  # spec.unschedulable, or the node is not Ready
    gpus: tuple[GpuInfo, ...] = ()
    sharing: str = "exclusive"  # "fractional" where the vGPU device plugin shares the GPUs
    allocatable_cpu_milli: int = 0
    allocatable_memory_mib: int = 0
    requested: Requests = Requests()  # by every live pod on the node
    foreign: Requests = Requests()  # by the live pods Quanta did not start

    def node_info(self) -> NodeInfo:
        return NodeInfo(
            name=self.name,
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
            gpus=self.gpus,
            labels=dict(self.labels),
            schedulable=not self.cordoned,
        )


def inventory(
    nodes: Iterable[Obj], pods: Iterable[Obj], config: KubernetesConfig
) -> list[NodeInventory]:
    """Every node with its GPUs and what is requested on it."""
    requested: dict[str, Requests] = defaultdict(Requests)
    foreign: dict[str, Requests] = defaultdict(Requests)
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in TERMINAL_POD_PHASES:
            continue
        amount = pod_requests(pod)
        requested[node] = requested[node] + amount
        labels = pod.get("metadata", {}).get("labels") or {}
        if labels.get(names.MANAGED_BY) != names.MANAGER:
            foreign[node] = foreign[node] + amount
    return [
        node_inventory(node, config, requested=requested[_name(node)], foreign=foreign[_name(node)])
        for node in nodes
    ]


def node_inventory(
    node: Obj,
    config: KubernetesConfig,
    *,
    requested: Requests = Requests(),
    foreign: Requests = Requests(),
) -> NodeInventory:
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    allocatable = status.get("allocatable") or status.get("capacity") or {}
    labels = {
        k: v
        for k, v in (node.get("metadata", {}).get("labels") or {}).items()
        # GPU feature discovery stamps its labels every minute: not worth a write each time.
        if not k.endswith("timestamp")
    }
    cpu = _milli(allocatable.get("cpu", "0"))
    memory = _mib(allocatable.get("memory", "0"))
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    taints = tuple(
        {k: str(t[k]) for k in ("key", "value", "effect") if t.get(k) is not None}
        for t in spec.get("taints") or []
    )
    gpus, sharing = _gpus(allocatable, labels, config)
    return NodeInventory(
        name=_name(node),
        cpu_milli=max(cpu - foreign.cpu_milli, 0),
        memory_mib=max(memory - foreign.memory_mib, 0),
        labels=labels,
        taints=taints,
        cordoned=bool(spec.get("unschedulable")) or not ready,
        gpus=gpus,
        sharing=sharing,
        allocatable_cpu_milli=cpu,
        allocatable_memory_mib=memory,
        requested=requested,
        foreign=foreign,
    )


def pod_requests(pod: Obj) -> Requests:
    """What the scheduler reserves for a pod: the sum of its containers' requests, or its
    largest init container's if that is more (init containers run one at a time)."""
    spec = pod.get("spec") or {}
    main = _sum_containers(spec.get("containers") or [])
    init = [_sum_containers([c]) for c in spec.get("initContainers") or []]
    return Requests(
        max([main.cpu_milli, *(i.cpu_milli for i in init)]),
        max([main.memory_mib, *(i.memory_mib for i in init)]),
        max([main.gpus, *(i.gpus for i in init)]),
    )


def _sum_containers(containers: Iterable[Obj]) -> Requests:
    total = Requests()
    for container in containers:
        resources = container.get("resources") or {}
        requests = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        total = total + Requests(
            _milli(requests.get("cpu", "0")),
            _mib(requests.get("memory", "0")),
            int(_quantity(requests.get(GPU, "0"))),
        )
    return total


def _gpus(
    allocatable: Mapping[str, Any], labels: Mapping[str, str], config: KubernetesConfig
) -> tuple[tuple[GpuInfo, ...], str]:
    whole = int(_quantity(allocatable.get(GPU, "0")))
    shared_cores = int(_quantity(allocatable.get(VGPU_CORES, "0")))
    shared = int(_quantity(allocatable.get(VGPU_NUMBER, "0"))) > 0
    count = whole or shared_cores // 100 or _int(labels.get("nvidia.com/gpu.count"))
    if not count:
        return (), "exclusive"
    memory = _int(labels.get(config.gpu_memory_label))
    if not memory and shared:
        memory = int(_quantity(allocatable.get(VGPU_MEMORY, "0"))) // count
    product = labels.get(config.gpu_product_label, "")
    model = config.gpu_model(product) if product else "unknown"
    devices = tuple(GpuInfo(index=i, model=model, memory_mib=memory) for i in range(count))
    return devices, "fractional" if shared else "exclusive"


def _quantity(value: Any) -> Decimal:
    try:
        return Decimal(parse_quantity(value))  # type: ignore[no-untyped-call]
    except (ValueError, TypeError):
        return Decimal(0)


def _milli(value: Any) -> int:
    return int(_quantity(value) * 1000)


def _mib(value: Any) -> int:
    return int(_quantity(value) / MIB)


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


def _name(node: Obj) -> str:
    return str(node.get("metadata", {}).get("name", ""))
