"""The admin API for clusters, nodes, GPUs, queues and priority classes."""

from __future__ import annotations

import pytest

from core.models import AuditEvent
from scheduling.models import Cluster, GpuDevice, Node, Queue

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(world) -> Cluster:
    cluster = Cluster.objects.create(name="Lab", slug="lab", backend="local")
    node = Node.objects.create(cluster=cluster, name="gpu-1", cpu_milli=32000, memory_mib=262144)
    for i in range(2):
        GpuDevice.objects.create(node=node, index=i, model="A100", memory_mib=40960)
    return cluster


def test_managers_read_the_inventory_students_do_not(world, cluster, api) -> None:
    nodes = api(world.alice).get("/api/v1/nodes/").json()["results"]
    assert nodes[0]["name"] == "gpu-1" and len(nodes[0]["gpus"]) == 2
    assert nodes[0]["allocated_cpu_milli"] == 0
    assert api(world.bob).get("/api/v1/nodes/").status_code == 403
    assert api(world.charlie).get("/api/v1/queues/").status_code == 403


def test_a_superuser_cordons_and_uncordons_a_node_and_it_is_audited(world, cluster, api):
    node = Node.objects.get()
    assert api(world.dean).post(f"/api/v1/nodes/{node.pk}/cordon/").status_code == 403
    response = api(world.root).post(f"/api/v1/nodes/{node.pk}/cordon/")
    assert response.status_code == 200 and response.json()["cordoned"] is True
    assert AuditEvent.objects.filter(action="node.cordon").exists()
    assert api(world.root).post(f"/api/v1/nodes/{node.pk}/uncordon/").json()["cordoned"] is False


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"labels": {"zone": 3}}, "labels"),
        ({"taints": [{"key": "gpu", "effect": "Sometimes"}]}, "taints"),
    ],
)
def test_bad_labels_or_taints_get_a_400(world, cluster, api, change, field) -> None:
    node = Node.objects.get()
    response = api(world.root).patch(f"/api/v1/nodes/{node.pk}/", change, format="json")
    assert response.status_code == 400 and field in response.json()


def test_queues_are_created_with_weights_and_caps(world, cluster, api) -> None:
    body = {
        "cluster": "lab",
        "name": "teaching",
        "weight": 3,
        "capability": {"gpus": 8},
        "tenants": ["ml-101"],
        "reclaimable": True,
    }
    response = api(world.root).post("/api/v1/queues/", body, format="json")
    assert response.status_code == 201, response.content
    assert Queue.objects.get().tenants.get().slug == "ml-101"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"weight": 0}, "weight"),
        ({"capability": {"tpus": 4}}, "capability"),
        ({"capability": {"gpus": -1}}, "capability"),
    ],
)
def test_bad_queues_get_a_400_naming_the_field(world, cluster, api, body, field) -> None:
    payload = {"cluster": "lab", "name": "q", **body}
    response = api(world.root).post("/api/v1/queues/", payload, format="json")
    assert response.status_code == 400 and field in response.json()


def test_a_queue_cannot_move_under_its_own_child(world, cluster, api) -> None:
    parent = Queue.objects.create(cluster=cluster, name="parent")
    child = Queue.objects.create(cluster=cluster, name="child", parent=parent)
    response = api(world.root).patch(
        f"/api/v1/queues/{parent.pk}/", {"parent": child.pk}, format="json"
    )
    assert response.status_code == 400 and "parent" in response.json()


def test_a_configured_gpu_inventory_is_checked(world, cluster, api) -> None:
    response = api(world.root).patch(
        "/api/v1/clusters/lab/", {"config": {"gpus": [{"index": 0, "model": ""}]}}, format="json"
    )
    assert response.status_code == 400 and "config" in response.json()
    good = {"config": {"gpus": [{"index": 0, "model": "A100", "memory_mib": 40960}]}}
    assert api(world.root).patch("/api/v1/clusters/lab/", good, format="json").status_code == 200


def test_priority_classes_are_ordered_by_value(world, api) -> None:
    for name, value in (("low", 10), ("exam", 1000)):
        assert (
            api(world.root)
            .post("/api/v1/priority-classes/", {"name": name, "value": value}, format="json")
            .status_code
            == 201
        )
    names = [p["name"] for p in api(world.dean).get("/api/v1/priority-classes/").json()["results"]]
    assert names == ["exam", "low"]
