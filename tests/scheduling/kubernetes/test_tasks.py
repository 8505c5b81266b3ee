"""The Celery side: the portal's submit through the registry, the watcher applying changes to
workloads (one watcher per cluster), the resync safety net, inventory and cluster objects, and
the portal staying up when the API server is not."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest

from core.reasons import plain
from scheduling import reasons as R
from scheduling import tasks
from scheduling.backends import registry
from scheduling.backends.base import BackendError, Observation, Phase
from scheduling.backends.kubernetes import manifests
from scheduling.locks import cluster_lock
from scheduling.models import Cluster, Node, PriorityClass, Queue
from tests.conftest import World
from tests.scheduling.kubernetes.emulator import ApiServer
from workloads import reconcile
from workloads import tasks as workload_tasks
from workloads.choices import State
from workloads.models import Flavor, Image, Workload
from workloads.specs import spec_for

pytestmark = pytest.mark.django_db
NAMESPACE = "quanta-ml-101"  # world.class_a


@pytest.fixture
def cluster(api: ApiServer) -> Iterator[Cluster]:
    cluster = Cluster.objects.create(
        name="Campus",
        slug="campus",
        backend="kubernetes",
        config={
            "host": api.url,
            "backoff_seconds": 0.01,
            "max_backoff_seconds": 0.02,
            "retries": 2,
            "watch_timeout_seconds": 5,
        },
    )
    yield cluster
    registry.forget()


@pytest.fixture
def make_workload(world: World, cluster: Cluster) -> Callable[..., Workload]:
    image = Image.objects.create(name="PyTorch", slug="pt", registry_ref="quanta/pytorch:2.13")
    flavor = Flavor.objects.create(
        name="1 GPU", slug="gpu-1", cpu_milli=4000, memory_mib=8192, gpus=1
    )

    def make(**fields: Any) -> Workload:
        values: dict[str, Any] = {
            "kind": "job",
            "name": "train",
            "owner": world.bob,
            "tenant": world.class_a,
            "cluster": cluster,
            "flavor": flavor,
            "image": image,
            "command": ["python", "train.py"],
            "workers": 2,
            "state": State.STARTING,
        }
        values.update(fields)
        return Workload.objects.create(**values)

    return make


def job_of(api: ApiServer, workload: Workload) -> dict[str, Any]:
    (job,) = [
        j
        for j in api.all("jobs")
        if j["metadata"]["labels"]["quanta.io/workload-id"] == str(workload.pk)
    ]
    return job


def set_job(api: ApiServer, job: dict[str, Any], phase: str, **status: Any) -> None:
    def change(obj: dict[str, Any]) -> None:
        obj["status"] = {"state": {"phase": phase}, **status}

    api.update("jobs", job["metadata"]["namespace"], job["metadata"]["name"], change)


def later(*steps: tuple[float, Callable[[], None]]) -> threading.Thread:
    """Change the cluster from another thread while the test's thread watches."""

    def run() -> None:
        for delay, step in steps:
            time.sleep(delay)
            step()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_the_portals_submit_reaches_the_cluster_through_the_registry(
    api: ApiServer, make_workload: Callable[..., Workload]
) -> None:
    workload = make_workload()
    reconcile.submit(str(workload.pk))
    reconcile.submit(str(workload.pk))  # a duplicate delivery of the task
    job = job_of(api, workload)
    assert job["spec"]["minAvailable"] == 2
    workload.refresh_from_db()
    assert workload.backend_state["name"] == job["metadata"]["name"]


def test_the_watch_task_moves_a_workload_through_its_lifecycle(
    api: ApiServer, cluster: Cluster, make_workload: Callable[..., Workload]
) -> None:
    workload = make_workload()
    reconcile.submit(str(workload.pk))
    job = job_of(api, workload)
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": f"{job['metadata']['name']}-{job['metadata']['uid']}",
            "namespace": NAMESPACE,
            "labels": job["metadata"]["labels"],
        },
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "Unschedulable",
                    "status": "True",
                    "message": "0/8 nodes are available: 8 Insufficient nvidia.com/gpu.",
                }
            ],
        },
    }
    changes = later(
        (0, lambda: api.wait_for_watches(4)),  # the watcher has listed and follows
        (0.1, lambda: api.put(group)),
        (0.2, lambda: set_job(api, job, "Running")),
        (0.2, lambda: set_job(api, job, "Completed", succeeded=2)),
    )
    outcome = workload_tasks.watch(cluster.pk, seconds=2.5)
    changes.join()
    workload.refresh_from_db()
    assert workload.state == State.SUCCEEDED, workload.reason
    assert workload.reason == "completed (2 tasks succeeded)"
    assert workload.started_at is not None
    steps = list(workload.events.values_list("to_state", "reason"))
    assert [s for s, _ in steps] == [State.RUNNING, State.SUCCEEDED]
    assert "changes applied" in outcome


def test_a_waiting_workload_shows_the_schedulers_reason(
    api: ApiServer, cluster: Cluster, make_workload: Callable[..., Workload]
) -> None:
    workload = make_workload()
    reconcile.submit(str(workload.pk))
    job = job_of(api, workload)
    api.put(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {
                "name": f"{job['metadata']['name']}-x",
                "namespace": NAMESPACE,
                "labels": job["metadata"]["labels"],
            },
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "Unschedulable", "status": "True", "message": "queue dl-201 is full"}
                ],
            },
        }
    )
    workload_tasks.watch(cluster.pk, seconds=1.0)
    workload.refresh_from_db()
    assert (workload.state, workload.reason) == (
        State.STARTING,
        "waiting for resources: queue dl-201 is full",
    )


def test_only_one_worker_watches_a_cluster(cluster: Cluster) -> None:
    with cluster_lock(f"quanta:kubernetes-watch:{cluster.pk}", 60) as held:
        assert held
        assert workload_tasks.watch(cluster.pk, seconds=5) == "already watched"
    with cluster_lock(f"quanta:kubernetes-watch:{cluster.pk}", 60) as held:
        assert held  # released


def test_an_earlier_attempts_last_words_change_nothing(
    make_workload: Callable[..., Workload],
) -> None:
    workload = make_workload(attempt=1, max_retries=2)
    failed = Observation(str(workload.pk), Phase.FAILED, plain("exit 1"), attempt=0)
    reconcile.apply_observation(workload, failed)
    workload.refresh_from_db()
    assert (workload.state, workload.attempt) == (State.STARTING, 1)


def test_an_in_place_restart_of_a_running_job_shows(make_workload: Callable[..., Workload]) -> None:
    workload = make_workload(state=State.RUNNING)
    reason = R.RESTARTING_AFTER(
        why=R.WITH_DETAIL(reason=R.POD_EVICTED(task="worker-1"), detail="preempted"), n=1, most=3
    )
    reconcile.apply_observation(workload, Observation(str(workload.pk), Phase.STARTING, reason))
    workload.refresh_from_db()
    assert (workload.state, workload.reason) == (
        State.STARTING,
        "restarting after worker-1 was evicted: preempted (restart 1 of 3)",
    )


def test_the_resync_follows_workloads_and_stops_orphans(
    api: ApiServer, cluster: Cluster, make_workload: Callable[..., Workload]
) -> None:
    workload = make_workload(state=State.RUNNING)
    backend = registry.get_backend(cluster)
    handle = backend.submit(spec_for(workload))
    Workload.objects.filter(pk=workload.pk).update(backend_state=handle.state)
    set_job(api, job_of(api, workload), "Completed", succeeded=2)
    orphan = make_workload(state=State.FAILED)
    orphan_handle = backend.submit(spec_for(orphan))
    set_job(api, job_of(api, orphan), "Running")
    assert workload_tasks.resync() == {
        "campus": {"observed": 1, "orphans": 1, "resent": 0, "admitted": 0}
    }
    workload.refresh_from_db()
    assert workload.state == State.SUCCEEDED
    (command,) = api.all("commands")
    assert command["target"]["name"] == orphan_handle.state["name"]


def test_the_portal_keeps_serving_when_the_api_server_is_down(
    cluster: Cluster, make_workload: Callable[..., Workload]
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cluster.config = {**cluster.config, "host": f"http://127.0.0.1:{port}"}
    cluster.save()
    workload = make_workload()
    with pytest.raises(BackendError) as caught:
        reconcile.submit(str(workload.pk))
    assert caught.value.transient  # the Celery task retries it later
    workload.refresh_from_db()
    assert workload.state == State.STARTING
    result = workload_tasks.resync()
    assert result["campus"].startswith("failed: the cluster's API server cannot be reached")
    assert tasks.inventory()["campus"].startswith("failed")
    assert workload_tasks.watch(cluster.pk, seconds=2).startswith("ended: stopped watching")


def test_a_template_the_cluster_rejects_fails_the_workload_with_its_message(
    api: ApiServer, make_workload: Callable[..., Workload]
) -> None:
    message = 'admission webhook "images.campus.example" denied the request: registry not allowed'
    api.admission.append(lambda verb, plural, obj: (403, "Forbidden", message))
    workload = make_workload()
    reconcile.submit(str(workload.pk))
    reconcile.submit(str(workload.pk))
    workload.refresh_from_db()
    assert workload.state == State.FAILED
    assert message in workload.reason
    assert api.all("jobs") == []


def test_the_objects_task_mirrors_tenants_queues_and_priorities(
    api: ApiServer, cluster: Cluster, world: World
) -> None:
    world.quota(world.class_a, gpus=Decimal(4), cpu_cores=Decimal(32), jobs=8, environments=4)
    parent = Queue.objects.create(cluster=cluster, name="cs", weight=2)
    child = Queue.objects.create(
        cluster=cluster, name="ml-101", weight=1, parent=parent, capability={"gpus": 4}
    )
    child.tenants.add(world.class_a)
    PriorityClass.objects.create(name="exam", value=1000)
    first = tasks.cluster_objects()["campus"]
    assert first >= 5 + 1 + 2 + 1  # namespaces, a quota, queues, a priority class
    assert tasks.cluster_objects() == {"campus": 0}
    quota = api.get("resourcequotas", NAMESPACE, manifests.QUOTA_NAME)
    assert quota is not None and quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "4"
    assert api.get("queues", "", "ml-101")["spec"]["parent"] == "cs"  # type: ignore[index]
    assert api.get("priorityclasses", "", "quanta-exam")["value"] == 1000  # type: ignore[index]
    from scheduling.inventory import queue_for

    assert queue_for(cluster, world.class_a) == "ml-101"
    assert queue_for(cluster, world.class_b) == ""


def test_the_inventory_task_syncs_the_clusters_nodes(api: ApiServer, cluster: Cluster) -> None:
    from tests.scheduling.kubernetes import synthetic

    nodes, pods = synthetic.cluster(nodes=3, pods=12)
    for obj in nodes + pods:
        api.put(obj)
    assert tasks.inventory()["campus"] == 3 + 8 + 8 + 4
    assert tasks.inventory()["campus"] == 0
    assert sorted(Node.objects.values_list("name", flat=True)) == [
        "gpu-0000",
        "gpu-0001",
        "gpu-0002",
    ]
