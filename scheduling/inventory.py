"""The portal's rows for a Kubernetes cluster, both ways.

In: nodes and GPUs as the cluster reports them (capacity, allocatable, GPU product and memory
labels, taints, cordon, what pods outside Quanta request) become Node and GpuDevice rows:
created, updated or marked gone, with database writes proportional to what changed, so the
periodic sync of a 1,000-node cluster where nothing happened writes nothing.

Out: what the cluster should hold for the portal's configuration: a namespace (with a
ResourceQuota and, where the cluster provisions it, a home claim) per tenant, a Volcano Queue
per portal queue, a PriorityClass per portal priority.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Count, Sum
from django.utils import timezone

from scheduling.backends.kubernetes import manifests
from scheduling.backends.kubernetes.config import KubernetesConfig
from scheduling.backends.kubernetes.nodes import NodeInventory
from scheduling.backends.registry import get_backend
from scheduling.choices import GpuSharing
from scheduling.models import Allocation, Cluster, GpuDevice, Node, PriorityClass, Queue
from scheduling.placement import FreeDevice, FreeNode
from tenants.models import Tenant

log = logging.getLogger(__name__)

BATCH = 500
NODE_FIELDS = ("cpu_milli", "memory_mib", "labels", "taints", "cordoned", "gone_at")
DEVICE_FIELDS = ("model", "memory_mib", "uuid", "sharing")


@dataclass
class SyncResult:
    nodes_created: int = 0
    nodes_updated: int = 0
    nodes_gone: int = 0
    devices_created: int = 0
    devices_updated: int = 0
    devices_deleted: int = 0
    devices_kept: int = 0  # reported gone, but still allocated to a workload: kept for now

    @property
    def rows_written(self) -> int:
        return (
            self.nodes_created
            + self.nodes_updated
            + self.nodes_gone
            + self.devices_created
            + self.devices_updated
            + self.devices_deleted
        )


def sync_inventory(
    cluster: Cluster,
    nodes: Sequence[NodeInventory],
    *,
    now: dt.datetime | None = None,
    admin_cordons: bool = False,
) -> SyncResult:
    """Make the cluster's Node and GpuDevice rows say what ``nodes`` say, touching only rows
    that differ (bulk statements, a few per pass whatever the cluster's size).

    ``admin_cordons``: the cluster does not report cordons and taints (local, simulated);
    the admins' own settings on the rows are kept."""
    now = now or timezone.now()
    overcommit = float((cluster.config or {}).get("cpu_overcommit", 1))
    result = SyncResult()
    with transaction.atomic():
        existing = {node.name: node for node in Node.objects.filter(cluster=cluster)}
        devices: dict[int, dict[int, GpuDevice]] = defaultdict(dict)
        for device in GpuDevice.objects.filter(node__cluster=cluster):
            devices[device.node_id][device.index] = device
        created: list[Node] = []
        changed: list[Node] = []
        for report in nodes:
            wanted = {
                "cpu_milli": int(report.cpu_milli * overcommit),
                "memory_mib": report.memory_mib,
                "labels": dict(report.labels),
                "taints": [dict(t) for t in report.taints],
                "cordoned": report.cordoned,
                "gone_at": None,
            }
            if admin_cordons:
                del wanted["taints"], wanted["cordoned"]
            node = existing.get(report.name)
            if node is None:
                created.append(Node(cluster=cluster, name=report.name, **wanted))
                continue
            if _set_changed(node, wanted):
                node.updated_at = now
                changed.append(node)
        Node.objects.bulk_create(created, batch_size=BATCH)
        Node.objects.bulk_update(changed, [*NODE_FIELDS, "updated_at"], batch_size=BATCH)
        result.nodes_created, result.nodes_updated = len(created), len(changed)

        reported = {report.name for report in nodes}
        gone = [n.pk for n in existing.values() if n.name not in reported and n.gone_at is None]
        for start in range(0, len(gone), BATCH):
            result.nodes_gone += Node.objects.filter(pk__in=gone[start : start + BATCH]).update(
                gone_at=now, updated_at=now
            )

        by_name = {**existing, **{node.name: node for node in created}}
        _sync_devices(nodes, by_name, devices, result)
    return result


def _sync_devices(
    nodes: Sequence[NodeInventory],
    by_name: dict[str, Node],
    devices: dict[int, dict[int, GpuDevice]],
    result: SyncResult,
) -> None:
    create: list[GpuDevice] = []
    update: list[GpuDevice] = []
    extra: list[int] = []
    for report in nodes:
        node = by_name[report.name]
        have = devices.get(node.pk, {})
        sharing = GpuSharing.FRACTIONAL if report.sharing == "fractional" else GpuSharing.EXCLUSIVE
        for gpu in report.gpus:
            wanted = {
                "model": gpu.model[:64],
                "memory_mib": gpu.memory_mib,
                "uuid": gpu.uuid,
                "sharing": sharing,
            }
            device = have.get(gpu.index)
            if device is None:
                create.append(GpuDevice(node=node, index=gpu.index, **wanted))
                continue
            if _set_changed(device, wanted):
                update.append(device)
        indices = {gpu.index for gpu in report.gpus}
        extra += [device.pk for index, device in have.items() if index not in indices]
    GpuDevice.objects.bulk_create(create, batch_size=BATCH)
    GpuDevice.objects.bulk_update(update, DEVICE_FIELDS, batch_size=BATCH)
    result.devices_created, result.devices_updated = len(create), len(update)
    if extra:
        # A device plugin restarting reports no GPUs for a moment: a device a workload still
        # holds stays (deleting it would delete the allocation, and the quota accounting).
        held = set(
            GpuDevice.objects.filter(pk__in=extra)
            .annotate(n=Count("allocations"))
            .filter(n__gt=0)
            .values_list("pk", flat=True)
        )
        free = [pk for pk in extra if pk not in held]
        result.devices_kept = len(held)
        if free:
            result.devices_deleted, _ = GpuDevice.objects.filter(pk__in=free).delete()


# --- what the cluster should hold ---------------------------------------------------------------


def kubernetes_config(cluster: Cluster) -> KubernetesConfig:
    return KubernetesConfig.from_mapping(cluster.config)


def tenant_spec(tenant: Tenant) -> manifests.TenantSpec:
    quota = getattr(tenant, "quota", None)
    if quota is None:
        return manifests.TenantSpec(slug=tenant.slug)
    return manifests.TenantSpec(
        slug=tenant.slug,
        gpus=quota.gpus,
        gpu_memory_mib=quota.gpu_memory_mib,
        cpu_cores=quota.cpu_cores,
        memory_mib=quota.memory_mib,
        environments=quota.environments,
        jobs=quota.jobs,
    )


def queue_spec(queue: Queue) -> manifests.QueueSpec:
    return manifests.QueueSpec(
        name=queue.name,
        weight=queue.weight,
        capability={k: int(v) for k, v in (queue.capability or {}).items()},
        reclaimable=queue.reclaimable,
        parent=queue.parent.name if queue.parent is not None else "",
        is_open=queue.is_open,
    )


def desired_objects(cluster: Cluster) -> list[dict[str, Any]]:
    """Namespaces (+ quotas, home claims), queues and priority classes, in apply order."""
    config = kubernetes_config(cluster)
    objects: list[dict[str, Any]] = []
    for tenant in Tenant.objects.filter(is_active=True).select_related("quota"):
        objects += manifests.tenant_objects(tenant_spec(tenant), config)
    queues = Queue.objects.filter(cluster=cluster).select_related("parent")
    objects += [manifests.volcano_queue(queue_spec(q)) for q in _parents_first(queues)]
    objects += [
        manifests.priority_class(
            manifests.PriorityClassSpec(p.name, p.value, p.preempting, p.description)
        )
        for p in PriorityClass.objects.all()
    ]
    return objects


def queue_for(cluster: Cluster, tenant: Tenant) -> str:
    """The cluster's queue for a tenant's workloads: the one naming the tenant or its nearest
    ancestor; "" (the cluster's default queue) when none does."""
    return queue_resolver(cluster)(tenant)


def queue_resolver(cluster: Cluster) -> Callable[[Tenant], str]:
    """``queue_for`` for many tenants: one query for the cluster's queue mapping, then each
    tenant is resolved in memory."""
    named: dict[int, str] = {}
    for name, tenant_id in (
        Queue.objects.filter(cluster=cluster, tenants__isnull=False)
        .order_by("name")
        .values_list("name", "tenants")
    ):
        named.setdefault(tenant_id, name)

    def resolve(tenant: Tenant) -> str:
        for tenant_id in reversed(tenant.ancestor_ids):  # the tenant itself first
            if tenant_id in named:
                return named[tenant_id]
        return ""

    return resolve


def _parents_first(queues: Iterable[Queue]) -> list[Queue]:
    """Volcano wants a queue's parent to exist before the queue."""
    pending = sorted(queues, key=lambda q: q.name)
    placed: list[Queue] = []
    seen: set[int] = set()
    while pending:
        rest = []
        for queue in pending:
            if queue.parent_id is None or queue.parent_id in seen:
                placed.append(queue)
                seen.add(queue.pk)
            else:
                rest.append(queue)
        if len(rest) == len(pending):  # a parent on another cluster (or a cycle): keep going
            placed += rest
            break
        pending = rest
    return placed


def _set_changed(row: Any, wanted: dict[str, Any]) -> bool:
    """Set the fields of ``row`` that differ from ``wanted``; True if any did."""
    differs = [name for name, value in wanted.items() if getattr(row, name) != value]
    for name in differs:
        setattr(row, name, wanted[name])
    return bool(differs)


# --- The portal-scheduled clusters (local, simulated) -------------------------------------------


def sync_backend_nodes(cluster: Cluster) -> None:
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


def free_nodes(
    cluster: Cluster, *, lock: bool, only: Iterable[int] | None = None
) -> list[FreeNode]:
    """The cluster's nodes with what is free on each (``only``: just the nodes of these ids).
    With ``lock``, the node rows stay locked until the transaction ends: admission's commit
    locks the nodes it allocates on, so two commits never allocate the same resources."""
    nodes_qs = Node.objects.filter(cluster=cluster, gone_at__isnull=True).order_by("pk")
    if only is not None:
        nodes_qs = nodes_qs.filter(pk__in=list(only))
    if lock:
        nodes_qs = nodes_qs.select_for_update()
    # Plain values, not model instances: a 1,000-node cluster has 8,000 devices to read.
    nodes = list(nodes_qs.values_list("pk", "name", "cpu_milli", "memory_mib", "cordoned"))
    ids = [pk for pk, *_rest in nodes]
    node_use = {
        node: (cpu or 0, mem or 0)
        for node, cpu, mem in Allocation.objects.filter(node__in=ids)
        .values("node")
        .annotate(cpu=Sum("cpu_milli"), mem=Sum("memory_mib"))
        .values_list("node", "cpu", "mem")
    }
    device_use = {
        device: (milli or 0, mem or 0)
        for device, milli, mem in Allocation.objects.filter(node__in=ids, device__isnull=False)
        .values("device")
        .annotate(milli=Sum("gpu_milli"), mem=Sum("gpu_memory_mib"))
        .values_list("device", "milli", "mem")
    }
    devices: dict[int, list[FreeDevice]] = defaultdict(list)
    for pk, node_id, index, model, memory, sharing in (
        GpuDevice.objects.filter(node__in=ids)
        .order_by("node", "index")
        .values_list("pk", "node_id", "index", "model", "memory_mib", "sharing")
    ):
        milli, mem = device_use.get(pk, (0, 0))
        devices[node_id].append(
            FreeDevice(pk, index, model, memory, 1000 - milli, memory - mem, sharing)
        )
    free = []
    for pk, name, cpu_milli, memory_mib, cordoned in nodes:
        cpu, mem = node_use.get(pk, (0, 0))
        free.append(
            FreeNode(
                pk,
                name,
                cpu_milli,
                memory_mib,
                cpu_milli - cpu,
                memory_mib - mem,
                schedulable=not cordoned,
                devices=devices[pk],
            )
        )
    return free
