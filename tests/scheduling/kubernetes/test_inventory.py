"""GPU inventory sync: nodes and devices from the cluster into the portal's rows, with writes
proportional to what changed (counted here; times are in bench/k8s_sync.md)."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling.backends.kubernetes.config import KubernetesConfig
from scheduling.backends.kubernetes.nodes import inventory
from scheduling.inventory import sync_inventory
from scheduling.models import Allocation, Cluster, GpuDevice, Node
from tests.scheduling.kubernetes import synthetic

pytestmark = pytest.mark.django_db

CONFIG = KubernetesConfig(gpu_products={"V100M32": "Tesla-V100-SXM2-32GB"})
WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)


@pytest.fixture
def cluster() -> Cluster:
    return Cluster.objects.create(name="Campus", slug="campus", backend="kubernetes")


def writes(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if WRITE.match(q["sql"])]


def test_a_node_reads_its_gpus_labels_taints_and_what_others_request() -> None:
    nodes, pods = synthetic.cluster(nodes=3, pods=30)
    first, _, shared = inventory(nodes, pods, CONFIG)
    assert [(g.index, g.model, g.memory_mib) for g in first.gpus][-1] == (7, "V100M32", 32768)
    assert first.sharing == "exclusive" and shared.sharing == "fractional"
    assert [g.memory_mib for g in shared.gpus] == [15360] * 4
    assert first.taints == ({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},)
    assert "nvidia.com/gfd.timestamp" not in first.labels
    assert first.cpu_milli == first.allocatable_cpu_milli - first.foreign.cpu_milli
    assert first.requested.cpu_milli > first.foreign.cpu_milli > 0


def test_1000_nodes_and_10000_pods_sync_in_one_pass_then_ten_changes_write_ten_rows(
    cluster: Cluster,
) -> None:
    nodes, pods = synthetic.cluster(nodes=1000, pods=10_000)
    with CaptureQueriesContext(connection) as first:
        result = sync_inventory(cluster, inventory(nodes, pods, CONFIG))
    assert (result.nodes_created, result.devices_created) == (1000, 334 * 8 + 333 * 8 + 333 * 4)
    assert Node.objects.filter(cluster=cluster).count() == 1000
    # Bulk inserts: ~100-150 rows per statement on SQLite (999 parameters), more on PostgreSQL.
    assert len(writes(first)) <= 60

    with CaptureQueriesContext(connection) as again:
        result = sync_inventory(cluster, inventory(nodes, pods, CONFIG))
    assert result.rows_written == 0
    assert writes(again) == []

    changed_nodes, changed_pods = synthetic.ten_changes(nodes, pods)
    with CaptureQueriesContext(connection) as second:
        result = sync_inventory(cluster, inventory(changed_nodes, changed_pods, CONFIG))
    assert result.rows_written == 10
    assert (result.nodes_updated, result.nodes_gone) == (9, 1)
    assert len(writes(second)) == 2  # one bulk UPDATE of the nine, one UPDATE marking gone
    assert Node.objects.get(cluster=cluster, name="gpu-0000").cordoned
    assert Node.objects.get(cluster=cluster, name="gpu-0005").cordoned  # not Ready
    assert Node.objects.get(cluster=cluster, name="gpu-0003").gone_at is not None


def test_a_node_that_comes_back_is_no_longer_gone(cluster: Cluster) -> None:
    nodes, pods = synthetic.cluster(nodes=2, pods=0)
    sync_inventory(cluster, inventory(nodes, pods, CONFIG))
    sync_inventory(cluster, inventory(nodes[:1], pods, CONFIG))
    assert Node.objects.get(name="gpu-0001").gone_at is not None
    result = sync_inventory(cluster, inventory(nodes, pods, CONFIG))
    assert (result.nodes_updated, result.rows_written) == (1, 1)
    assert Node.objects.get(name="gpu-0001").gone_at is None


def test_devices_a_workload_holds_survive_a_device_plugin_restart(
    cluster: Cluster, world: object
) -> None:
    nodes, pods = synthetic.cluster(nodes=1, pods=0)
    sync_inventory(cluster, inventory(nodes, pods, CONFIG))
    held = GpuDevice.objects.get(index=0)
    Allocation.objects.create(workload=_workload(cluster, world), node=held.node, device=held)
    del nodes[0]["status"]["allocatable"]["nvidia.com/gpu"]  # the plugin restarts
    del nodes[0]["metadata"]["labels"]["nvidia.com/gpu.count"]
    result = sync_inventory(cluster, inventory(nodes, pods, CONFIG))
    assert (result.devices_deleted, result.devices_kept) == (7, 1)
    assert list(GpuDevice.objects.values_list("index", flat=True)) == [0]
    assert Allocation.objects.count() == 1


def _workload(cluster: Cluster, world: object) -> object:
    from workloads.models import Flavor, Workload

    flavor = Flavor.objects.create(
        name="1 GPU", slug="gpu-1", cpu_milli=1000, memory_mib=1024, gpus=1
    )
    return Workload.objects.create(
        kind="job",
        name="train",
        owner=world.bob,  # type: ignore[attr-defined]
        tenant=world.class_a,  # type: ignore[attr-defined]
        cluster=cluster,
        flavor=flavor,
    )
