"""scheduling.services: every change to the inventory, queues and priority classes is one
transaction with an audit row naming the actor; the API and the console pages call the same
functions and leave the same trace."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from core.models import AuditEvent
from scheduling import services
from scheduling.models import Cluster, GpuDevice, Node, PriorityClass, Queue
from workloads.choices import State
from workloads.models import AppTemplate, Flavor, Grant, Image, Workload

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(world) -> Cluster:
    cluster = Cluster.objects.create(name="Lab", slug="lab", backend="local")
    node = Node.objects.create(cluster=cluster, name="gpu-1", cpu_milli=32000, memory_mib=262144)
    GpuDevice.objects.create(node=node, index=0, model="A100", memory_mib=40960)
    return cluster


def only_event(action: str) -> AuditEvent:
    return AuditEvent.objects.get(action=action)


def test_cordon_and_uncordon_write_one_audit_row_each_with_the_actor(world, cluster) -> None:
    node = Node.objects.get()
    services.cordon(actor=world.root, node=node)
    assert Node.objects.get().cordoned and node.cordoned
    event = only_event("node.cordon")
    assert event.actor == world.root and event.target_id == str(node.pk)
    services.uncordon(actor=world.root, node=node)
    assert not Node.objects.get().cordoned
    assert only_event("node.uncordon").actor == world.root


def test_cordon_through_the_api_and_the_console_page_leaves_the_same_trace(
    world, cluster, api, client
) -> None:
    node = Node.objects.get()
    assert api(world.root).post(f"/api/v1/nodes/{node.pk}/cordon/").status_code == 200
    from_api = list(
        AuditEvent.objects.filter(action="node.cordon").values_list("actor", "target_id")
    )
    AuditEvent.objects.all().delete()
    Node.objects.update(cordoned=False)

    client.force_login(world.root)
    assert client.post(f"/console/hosts/{node.pk}/cordon/").status_code == 302
    from_page = list(
        AuditEvent.objects.filter(action="node.cordon").values_list("actor", "target_id")
    )
    assert from_api == from_page == [(world.root.pk, str(node.pk))]
    assert Node.objects.get().cordoned


def test_outsiders_cordon_nothing_through_the_api_or_the_page(world, cluster, api, client) -> None:
    node = Node.objects.get()
    for user in (world.charlie, world.dean):
        assert api(user).post(f"/api/v1/nodes/{node.pk}/cordon/").status_code == 403
        client.force_login(user)
        assert client.post(f"/console/hosts/{node.pk}/cordon/").status_code == 403
    assert not Node.objects.get().cordoned
    assert not AuditEvent.objects.filter(action__startswith="node.").exists()


def test_labels_and_taints_are_checked_and_audited_with_the_fields(world, cluster) -> None:
    node = Node.objects.get()
    services.update_node(
        actor=world.root,
        node=node,
        labels={"zone": "a"},
        taints=[{"key": "gpu", "effect": "NoSchedule"}],
    )
    node.refresh_from_db()
    assert node.labels == {"zone": "a"} and node.taints[0]["key"] == "gpu"
    event = only_event("node.update")
    assert event.actor == world.root and event.data == {"fields": ["labels", "taints"]}


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"labels": {"zone": 3}}, "labels"),
        ({"labels": {"zone": "a"}, "taints": [{"key": "gpu", "effect": "Sometimes"}]}, "taints"),
        ({"name": "renamed"}, "name"),
    ],
)
def test_a_bad_node_change_names_the_field_and_writes_nothing(
    world, cluster, changes, field
) -> None:
    node = Node.objects.get()
    with pytest.raises(ValidationError) as raised:
        services.update_node(actor=world.root, node=node, **changes)
    assert field in raised.value.message_dict
    node.refresh_from_db()
    assert node.labels == {} and node.name == "gpu-1"
    assert not AuditEvent.objects.filter(action="node.update").exists()


def test_a_gpus_sharing_is_changed_through_the_service(world, cluster, api) -> None:
    device = GpuDevice.objects.get()
    response = api(world.root).patch(
        f"/api/v1/gpus/{device.pk}/", {"sharing": "exclusive"}, format="json"
    )
    assert response.status_code == 200, response.content
    assert GpuDevice.objects.get().sharing == "exclusive"
    event = only_event("gpudevice.update")
    assert event.actor == world.root and event.data == {"fields": ["sharing"]}
    with pytest.raises(ValidationError):
        services.update_gpu_device(actor=world.root, device=device, model="H100")


def test_queues_are_created_updated_and_deleted_with_audit_rows(world, cluster) -> None:
    queue = services.create_queue(
        actor=world.root, cluster=cluster, name="teaching", weight=3, tenants=[world.class_a]
    )
    assert Queue.objects.get().tenants.get() == world.class_a
    services.update_queue(actor=world.root, queue=queue, weight=5, tenants=[])
    queue.refresh_from_db()
    assert queue.weight == 5 and not queue.tenants.exists()
    assert only_event("queue.update").data == {"fields": ["tenants", "weight"]}
    services.delete_queue(actor=world.root, queue=queue)
    assert not Queue.objects.exists()
    actions = list(AuditEvent.objects.filter(actor=world.root).values_list("action", flat=True))
    assert {"queue.create", "queue.update", "queue.delete"} <= set(actions)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"weight": 0}, "weight"),
        ({"capability": {"tpus": 4}}, "capability"),
        ({"capability": {"gpus": -1}}, "capability"),
    ],
)
def test_a_bad_queue_names_the_field_and_creates_nothing(world, cluster, fields, field) -> None:
    with pytest.raises(ValidationError) as raised:
        services.create_queue(actor=world.root, cluster=cluster, name="q", **fields)
    assert field in raised.value.message_dict
    assert not Queue.objects.exists() and not AuditEvent.objects.filter(action="queue.create")


def test_a_queue_under_its_child_is_refused_and_nothing_changes(world, cluster) -> None:
    parent = services.create_queue(actor=world.root, cluster=cluster, name="parent")
    child = services.create_queue(actor=world.root, cluster=cluster, name="child", parent=parent)
    with pytest.raises(ValidationError) as raised:
        services.update_queue(actor=world.root, queue=parent, parent=child, weight=7)
    assert "parent" in raised.value.message_dict
    parent.refresh_from_db()
    assert parent.parent is None and parent.weight == 1
    assert not AuditEvent.objects.filter(action="queue.update").exists()


def test_priority_classes_go_through_the_service_from_the_api(world, api) -> None:
    response = api(world.root).post(
        "/api/v1/priority-classes/", {"name": "exam", "value": 1000}, format="json"
    )
    assert response.status_code == 201
    exam = PriorityClass.objects.get()
    assert only_event("priorityclass.create").actor == world.root
    services.update_priority_class(actor=world.root, priority_class=exam, value=2000)
    assert PriorityClass.objects.get().value == 2000
    with pytest.raises(ValidationError) as raised:
        services.update_priority_class(actor=world.root, priority_class=exam, value=2_000_000_000)
    assert "value" in raised.value.message_dict
    assert PriorityClass.objects.get().value == 2000
    bad = api(world.root).post(
        "/api/v1/priority-classes/", {"name": "huge", "value": -2_000_000}, format="json"
    )
    assert bad.status_code == 400 and "value" in bad.json()
    assert api(world.charlie).delete(f"/api/v1/priority-classes/{exam.pk}/").status_code == 403
    assert api(world.root).delete(f"/api/v1/priority-classes/{exam.pk}/").status_code == 204
    assert only_event("priorityclass.delete").actor == world.root


def test_cluster_changes_are_checked_and_audited(world, cluster) -> None:
    config: dict[str, Any] = {"gpus": [{"index": 0, "model": "A100", "memory_mib": 40960}]}
    services.update_cluster(actor=world.root, cluster=cluster, config=config)
    assert Cluster.objects.get().config == config
    assert only_event("cluster.update").data == {"fields": ["config"]}
    with pytest.raises(ValidationError) as raised:
        services.update_cluster(actor=world.root, cluster=cluster, config={"cpu_overcommit": 0})
    assert "config" in raised.value.message_dict
    assert Cluster.objects.get().config == config
    other = services.create_cluster(actor=world.root, name="Sim", slug="sim", backend="simulated")
    services.delete_cluster(actor=world.root, cluster=other)
    assert list(Cluster.objects.values_list("slug", flat=True)) == ["lab"]
    assert {"cluster.create", "cluster.delete"} <= set(
        AuditEvent.objects.filter(actor=world.root).values_list("action", flat=True)
    )


# --- Deleting a queue or a priority class that something still uses ---------------------------


def unfinished_workload(world, cluster: Cluster, **fields: Any) -> Workload:
    flavor, _ = Flavor.objects.get_or_create(
        slug="cpu-1", defaults={"name": "1 CPU", "cpu_milli": 1000, "memory_mib": 1024}
    )
    values: dict[str, Any] = {
        "kind": "job",
        "name": "train",
        "owner": world.bob,
        "tenant": world.class_a,
        "cluster": cluster,
        "flavor": flavor,
        "state": State.RUNNING,
    }
    return Workload.objects.create(**{**values, **fields})


def test_an_unused_queue_is_deleted_with_an_audit_row(world, cluster) -> None:
    queue = services.create_queue(
        actor=world.root, cluster=cluster, name="teaching", tenants=[world.class_b]
    )
    unfinished_workload(world, cluster)  # class A's: it goes to the default queue
    unfinished_workload(world, cluster, tenant=world.class_b, state=State.SUCCEEDED)
    services.delete_queue(actor=world.root, queue=queue)
    assert not Queue.objects.exists()
    assert only_event("queue.delete").actor == world.root


@pytest.mark.parametrize("state", [State.QUEUED, State.RUNNING, State.STOPPING])
def test_a_queue_with_unfinished_work_is_refused_and_kept(world, cluster, state) -> None:
    # The queue names the department: class A's work (below it) goes there.
    queue = services.create_queue(
        actor=world.root, cluster=cluster, name="teaching", tenants=[world.dept]
    )
    unfinished_workload(world, cluster, state=state)
    with pytest.raises(ValidationError) as raised:
        services.delete_queue(actor=world.root, queue=queue)
    assert raised.value.messages == [
        "Queue teaching has 1 workload that has not finished: wait for it to end or stop it first."
    ]
    assert Queue.objects.filter(pk=queue.pk).exists()
    assert not AuditEvent.objects.filter(action="queue.delete").exists()


def test_the_default_queue_and_a_parent_queue_are_refused(world, cluster) -> None:
    default = services.create_queue(actor=world.root, cluster=cluster, name="default")
    with pytest.raises(ValidationError, match="is the cluster's default queue"):
        services.delete_queue(actor=world.root, queue=default)
    parent = services.create_queue(actor=world.root, cluster=cluster, name="research")
    services.create_queue(actor=world.root, cluster=cluster, name="nlp", parent=parent)
    with pytest.raises(ValidationError) as raised:
        services.delete_queue(actor=world.root, queue=parent)
    assert raised.value.messages == [
        "Queue research is the parent of nlp: move or delete those first."
    ]
    assert Queue.objects.count() == 3
    assert not AuditEvent.objects.filter(action="queue.delete").exists()


def test_the_api_refuses_a_queue_in_use_with_the_reason_and_keeps_it(world, cluster, api) -> None:
    parent = services.create_queue(actor=world.root, cluster=cluster, name="research")
    child = services.create_queue(actor=world.root, cluster=cluster, name="nlp", parent=parent)
    response = api(world.root).delete(f"/api/v1/queues/{parent.pk}/")
    assert response.status_code == 400
    assert response.json() == {
        "detail": ["Queue research is the parent of nlp: move or delete those first."]
    }
    assert api(world.charlie).delete(f"/api/v1/queues/{child.pk}/").status_code == 403
    assert api(world.dean).delete(f"/api/v1/queues/{child.pk}/").status_code == 403
    assert Queue.objects.count() == 2
    assert api(world.root).delete(f"/api/v1/queues/{child.pk}/").status_code == 204
    assert list(Queue.objects.values_list("name", flat=True)) == ["research"]


def test_a_priority_class_a_grant_gives_is_refused(world, cluster, api) -> None:
    exam = services.create_priority_class(actor=world.root, name="exam", value=1000)
    flavor = Flavor.objects.create(name="1 CPU", slug="cpu-1", cpu_milli=1000, memory_mib=1024)
    image = Image.objects.create(name="PyTorch", slug="pt")
    template = AppTemplate.objects.create(
        name="Jupyter", slug="jupyter", kind="jupyter", image=image, default_flavor=flavor
    )
    grant = Grant.objects.create(template=template, tenant=world.class_a, priority_class=exam)
    response = api(world.root).delete(f"/api/v1/priority-classes/{exam.pk}/")
    assert response.status_code == 400
    assert response.json() == {
        "detail": ["Priority class exam is given by 1 grant: choose another for it first."]
    }
    grant.refresh_from_db()
    assert grant.priority_class == exam
    assert not AuditEvent.objects.filter(action="priorityclass.delete").exists()


def test_a_priority_class_of_waiting_work_is_refused_unless_another_has_its_value(
    world, cluster
) -> None:
    exam = services.create_priority_class(actor=world.root, name="exam", value=1000)
    unfinished_workload(world, cluster, state=State.PENDING, priority=1000)
    with pytest.raises(ValidationError) as raised:
        services.delete_priority_class(actor=world.root, priority_class=exam)
    assert raised.value.messages == [
        "Priority class exam is the priority of 1 waiting or running workload: wait for it to "
        "end first."
    ]
    assert PriorityClass.objects.filter(pk=exam.pk).exists()
    # Another class with the same value still names that priority on the cluster.
    services.create_priority_class(actor=world.root, name="exam-2", value=1000)
    services.delete_priority_class(actor=world.root, priority_class=exam)
    assert list(PriorityClass.objects.values_list("name", flat=True)) == ["exam-2"]
    assert only_event("priorityclass.delete").actor == world.root
