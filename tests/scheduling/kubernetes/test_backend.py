"""The backend against the emulated API server: idempotent submit, retries, refusals, stop,
observe, endpoints, logs, inventory and cluster objects."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable
from typing import Any

import pytest

from scheduling.backends.base import BackendError, Handle, Phase
from scheduling.backends.kubernetes import KubernetesBackend, manifests, names, status
from scheduling.backends.kubernetes.config import KubernetesConfig
from tests.scheduling.kubernetes.conftest import NAMESPACE, spec, with_gpus
from tests.scheduling.kubernetes.emulator import ApiServer

JOBS = "jobs"


def set_phase(api: ApiServer, name: str, phase: str, namespace: str = NAMESPACE) -> None:
    def change(job: dict[str, Any]) -> None:
        job.setdefault("status", {})["state"] = {"phase": phase}

    api.update(JOBS, namespace, name, change)


# --- submit -------------------------------------------------------------------------------------


def test_a_retried_submit_creates_one_job(api: ApiServer, backend: KubernetesBackend) -> None:
    # The first create is carried out, but the connection drops before the answer: the client
    # retries, meets 409, and adopts the Job its first try made.
    api.fail(method="POST", path="/jobs$", status=0, after=True)
    workload = spec(workers=2)
    handle = backend.submit(workload)
    jobs = api.all(JOBS)
    assert len(jobs) == 1
    assert api.posts(JOBS) == 2
    assert handle.state["uid"] == jobs[0]["metadata"]["uid"]
    assert backend.submit(workload).state == handle.state  # and again: still one
    assert len(api.all(JOBS)) == 1


def test_500_and_429_are_retried_with_backoff(
    api: ApiServer, backend: KubernetesBackend, sleeps: list[float]
) -> None:
    api.fail(method="POST", path="/jobs$", status=500)
    api.fail(method="POST", path="/jobs$", status=429, retry_after=0.03)
    backend.submit(spec())
    assert len(api.all(JOBS)) == 1
    assert sleeps == [0.01, 0.03]  # exponential backoff, stretched to the server's Retry-After


def test_an_api_server_that_is_down_is_a_transient_error_after_bounded_retries(
    make_backend: Callable[..., KubernetesBackend], sleeps: list[float]
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    backend = make_backend(host=f"http://127.0.0.1:{port}")
    with pytest.raises(BackendError, match="cannot be reached") as caught:
        backend.submit(spec())
    assert caught.value.transient
    assert len(sleeps) == 3  # ``retries``: then the Celery task's own retries take over


def test_an_admission_refusal_fails_the_submit_with_the_api_servers_message(
    api: ApiServer, backend: KubernetesBackend, sleeps: list[float]
) -> None:
    message = (
        'admission webhook "validatejob.volcano.sh" denied the request: '
        "spec.tasks[0].template.spec.containers[0].image: Invalid value: "
        '"quanta/pytorch::bad": invalid reference format'
    )
    api.admission.append(
        lambda verb, plural, obj: (422, "Invalid", message) if plural == JOBS else None
    )
    workload = spec(image="quanta/pytorch::bad")
    with pytest.raises(BackendError) as caught:
        backend.submit(workload)
    assert not caught.value.transient
    name = names.workload_name(workload.workload_id)
    assert str(caught.value) == f"the cluster refused to create Job {NAMESPACE}/{name}: {message}"
    assert sleeps == []  # not retried
    assert api.all(JOBS) == []


def test_a_namespace_quota_that_refuses_the_object_is_a_permanent_refusal(
    api: ApiServer, backend: KubernetesBackend
) -> None:
    message = (
        'jobs.batch.volcano.sh "q-1" is forbidden: exceeded quota: quanta-quota, requested: '
        "count/jobs.batch.volcano.sh=1, used: count/jobs.batch.volcano.sh=20, limited: "
        "count/jobs.batch.volcano.sh=20"
    )
    api.admission.append(lambda verb, plural, obj: (403, "Forbidden", message))
    with pytest.raises(BackendError, match="exceeded quota: quanta-quota") as caught:
        backend.submit(spec())
    assert not caught.value.transient


def test_an_unknown_gpu_model_is_refused_before_anything_is_sent(
    api: ApiServer, make_backend: Callable[..., KubernetesBackend]
) -> None:
    backend = make_backend(gpu_products={"A100": "NVIDIA-A100-SXM4-80GB"})
    workload = with_gpus(spec(), gpus=1, gpu_models=("K80",))
    with pytest.raises(BackendError, match="'K80' is not known on this cluster") as caught:
        backend.submit(workload)
    assert not caught.value.transient
    assert api.posts(JOBS) == 0


def test_submit_never_adopts_an_object_of_another_workload(
    api: ApiServer, backend: KubernetesBackend
) -> None:
    mine = spec()
    other = manifests.training_job(spec(), backend.config)
    other["metadata"]["name"] = names.workload_name(mine.workload_id)
    api.put(other)
    with pytest.raises(BackendError, match="belongs to workload") as caught:
        backend.submit(mine)
    assert not caught.value.transient


def test_a_tenants_first_workload_creates_its_namespace(
    api: ApiServer, backend: KubernetesBackend
) -> None:
    api.remove("namespaces", "", NAMESPACE)
    backend.submit(spec())
    namespace = api.get("namespaces", "", NAMESPACE)
    assert namespace is not None
    assert namespace["metadata"]["labels"][names.MANAGED_BY] == "quanta"


def test_a_notebook_gets_its_service_and_token_owned_by_its_job(
    api: ApiServer, backend: KubernetesBackend
) -> None:
    workload = spec("notebook")
    handle = backend.submit(workload)
    job = api.all(JOBS)[0]
    for plural in ("services", "secrets"):
        (obj,) = api.all(plural, NAMESPACE)
        assert obj["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert handle.state["token"] and handle.state["base_url"] == workload.base_url
    assert backend.submit(workload).state["token"] == handle.state["token"]  # adopted


def test_a_new_attempt_replaces_the_earlier_one(api: ApiServer, backend: KubernetesBackend) -> None:
    first = spec(max_retries=1)
    backend.submit(first)
    second = dataclasses.replace(first, attempt=1)
    handle = backend.submit(second)
    assert [j["metadata"]["name"] for j in api.all(JOBS)] == [handle.state["name"]]
    assert handle.state["name"].endswith("-1")
    assert ("jobs", NAMESPACE, names.workload_name(first.workload_id), "Foreground") in api.deletes


def test_a_priority_is_the_clusters_quanta_priority_class_of_that_value(
    api: ApiServer, backend: KubernetesBackend
) -> None:
    api.put(manifests.priority_class(manifests.PriorityClassSpec("exam", 1000)))
    backend.submit(spec(priority=1000))
    assert api.all(JOBS)[0]["spec"]["priorityClassName"] == "quanta-exam"
    with pytest.raises(BackendError, match="no Quanta PriorityClass with value 7"):
        backend.submit(spec(priority=7))


# --- stop ---------------------------------------------------------------------------------------


def test_stop_asks_volcano_to_terminate_the_job_once(
    api: ApiServer, backend: KubernetesBackend
) -> None:
    handle = backend.submit(spec())
    set_phase(api, handle.state["name"], "Running")
    backend.stop(handle)
    backend.stop(handle)
    (command,) = api.all("commands", NAMESPACE)
    assert command["action"] == "TerminateJob"
    assert command["target"]["uid"] == handle.state["uid"]
    job = api.get(JOBS, NAMESPACE, handle.state["name"])
    assert job is not None and status.STOP_ANNOTATION in job["metadata"]["annotations"]


def test_stop_leaves_a_finished_job_alone(api: ApiServer, backend: KubernetesBackend) -> None:
    handle = backend.submit(spec())
    set_phase(api, handle.state["name"], "Completed")
    backend.stop(handle)
    assert api.all("commands") == []


def test_stop_can_delete_jobs_in_the_foreground_instead(
    api: ApiServer, make_backend: Callable[..., KubernetesBackend]
) -> None:
    backend = make_backend(stop_with="delete")
    handle = backend.submit(spec())
    backend.stop(handle)
    assert api.all(JOBS) == []
    assert (JOBS, NAMESPACE, handle.state["name"], "Foreground") in api.deletes


def test_stopping_a_model_server_deletes_it_and_what_it_owns(
    api: ApiServer, backend: KubernetesBackend
) -> None:
    handle = backend.submit(spec("serving", workers=2))
    assert len(api.all("services", NAMESPACE)) == len(api.all("horizontalpodautoscalers")) == 1
    backend.stop(handle)
    assert api.all("deployments") == api.all("services", NAMESPACE) == []
    assert api.all("horizontalpodautoscalers") == []
    assert ("deployments", NAMESPACE, handle.state["name"], "Foreground") in api.deletes
    assert backend.observe([handle])[handle.workload_id].phase == Phase.UNKNOWN


def test_stopping_an_unknown_workload_does_nothing(backend: KubernetesBackend) -> None:
    backend.stop(Handle("9c8a3d4e-0000-4000-8000-000000000000"))


# --- observe, endpoint, logs, running -----------------------------------------------------------


def test_observe_needs_a_few_lists_for_many_workloads(
    api: ApiServer, backend: KubernetesBackend
) -> None:
    handles = [backend.submit(spec()) for _ in range(60)]
    set_phase(api, handles[7].state["name"], "Running")
    before = len(api.requests)
    observed = backend.observe(handles)
    assert observed[handles[7].workload_id].phase == Phase.RUNNING
    assert observed[handles[8].workload_id].phase == Phase.PENDING
    lists = len(api.requests) - before
    # Two chunks of ≤ 50 ids: Jobs, Deployments, pods and PodGroups each, plus the events of
    # Jobs that wait without pods (their quota reason).
    assert lists <= 2 * 4 + 59


def test_observe_reports_a_namespace_quota_from_the_jobs_events(
    api: ApiServer, backend: KubernetesBackend
) -> None:
    handle = backend.submit(spec())
    api.put(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "e1", "namespace": NAMESPACE},
            "involvedObject": {"kind": "Job", "name": handle.state["name"]},
            "type": "Warning",
            "reason": "FailedCreate",
            "message": "pods is forbidden: exceeded quota: quanta-quota, requested: "
            "requests.nvidia.com/gpu=4",
        }
    )
    observation = backend.observe([handle])[handle.workload_id]
    assert observation.phase == Phase.PENDING
    assert str(observation.reason).startswith("waiting: the namespace quota is exceeded")


def test_an_unknown_workload_is_observed_as_unknown(backend: KubernetesBackend) -> None:
    workload_id = "9c8a3d4e-0000-4000-8000-000000000001"
    assert backend.observe([Handle(workload_id)])[workload_id].phase == Phase.UNKNOWN


@pytest.mark.parametrize("app", ["jupyter", "vscode", "desktop"])
def test_a_notebooks_endpoint_is_its_service_once_the_server_is_ready(
    api: ApiServer, backend: KubernetesBackend, app: str
) -> None:
    workload = spec("notebook", app=app, program=("xterm",) if app == "desktop" else ())
    handle = backend.submit(workload)
    assert backend.endpoint(handle) is None
    set_phase(api, handle.state["name"], "Running")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{handle.state['name']}-notebook-0",
            "namespace": NAMESPACE,
            "labels": manifests.workload_labels(workload, "notebook"),
        },
        "spec": {"nodeName": "gpu-01", "containers": [{"name": "main", "image": "x"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]},
    }
    api.put(pod)
    assert backend.endpoint(handle) is None
    pod["status"]["conditions"][0]["status"] = "True"
    api.put(pod)
    endpoint = backend.endpoint(handle)
    assert endpoint is not None
    # JupyterLab keeps the /nb/<id>/ prefix; VS Code and desktops serve at the Service's root.
    path = f"/nb/{workload.workload_id}/" if app == "jupyter" else "/"
    assert endpoint.url == f"http://{handle.state['name']}.{NAMESPACE}.svc:80{path}"
    assert endpoint.headers == {"Authorization": f"token {handle.state['token']}"}


def test_logs_are_read_from_an_offset_task_by_task(
    api: ApiServer, backend: KubernetesBackend
) -> None:
    workload = spec(workers=2)
    handle = backend.submit(workload)
    for task in ("worker-0", "master-0"):
        name = f"{handle.state['name']}-{task}"
        api.put(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": NAMESPACE,
                    "labels": manifests.workload_labels(workload, "job"),
                },
                "spec": {"containers": [{"name": "main", "image": "x"}]},
            }
        )
        api.logs[(NAMESPACE, name)] = f"hello from {task}\n".encode()
    first = backend.logs(handle, task=0, offset=0, limit=6)
    assert (first.text, first.next_offset, first.tasks) == ("hello ", 6, 2)
    assert backend.logs(handle, task=0, offset=6).text == "from master-0\n"
    assert backend.logs(handle, task=1).text == "hello from worker-0\n"
    assert backend.logs(handle, task=5).text == ""


def test_running_lists_workloads_with_live_jobs_or_deployments(
    api: ApiServer, backend: KubernetesBackend
) -> None:
    live, done, served = (
        backend.submit(spec()),
        backend.submit(spec()),
        backend.submit(spec("serving")),
    )
    set_phase(api, done.state["name"], "Completed")
    assert backend.running() == {live.workload_id, served.workload_id}


# --- inventory and cluster objects --------------------------------------------------------------


def node(name: str, gpus: int = 8, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "nvidia.com/gpu.product": "Tesla-V100-SXM2-32GB",
                "nvidia.com/gpu.memory": "32768",
                **labels,
            },
        },
        "spec": {},
        "status": {
            "allocatable": {"cpu": "63500m", "memory": "257669Mi", "nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_the_inventory_reads_nodes_and_live_pods_page_by_page(
    api: ApiServer, make_backend: Callable[..., KubernetesBackend]
) -> None:
    backend = make_backend(page_size=2, gpu_products={"V100M32": "Tesla-V100-SXM2-32GB"})
    for i in range(5):
        api.put(node(f"gpu-{i:02d}"))
    for phase, cpu in (("Running", "1500m"), ("Succeeded", "8")):
        api.put(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"daemon-{phase}", "namespace": "kube-system"},
                "spec": {
                    "nodeName": "gpu-00",
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
                },
                "status": {"phase": phase},
            }
        )
    inventory = {n.name: n for n in backend.inventory()}
    assert len(inventory) == 5
    assert sum("/nodes" in path for _, path in api.requests) == 3
    first = inventory["gpu-00"]
    assert (first.cpu_milli, first.allocatable_cpu_milli) == (62000, 63500)
    assert [(g.index, g.model, g.memory_mib) for g in first.gpus][:2] == [
        (0, "V100M32", 32768),
        (1, "V100M32", 32768),
    ]
    assert backend.nodes()[0].name == "gpu-00"


def test_cluster_objects_are_written_only_where_they_differ(
    api: ApiServer, backend: KubernetesBackend
) -> None:
    tenant = manifests.TenantSpec(slug="ml-101", memory_mib=1024, cpu_cores=None)
    queue = manifests.QueueSpec("ml-101", weight=2, capability={"gpus": 4})
    desired = [*manifests.tenant_objects(tenant, backend.config), manifests.volcano_queue(queue)]
    assert backend.apply(desired) == 3
    assert backend.apply(desired) == 0
    changed = manifests.tenant_objects(
        manifests.TenantSpec(slug="ml-101", cpu_cores=None, memory_mib=None, gpu_memory_mib=512),
        backend.config,
    )
    assert backend.apply(changed) == 1
    quota = api.get("resourcequotas", NAMESPACE, manifests.QUOTA_NAME)
    assert quota is not None
    assert quota["spec"]["hard"] == {"requests.volcano.sh/vgpu-memory": "512"}


def test_pycharm_is_not_offered_where_the_desktop_image_lacks_it(
    make_backend: Callable[..., KubernetesBackend],
) -> None:
    assert make_backend().apps is None  # by default the images run every app
    without = KubernetesBackend(KubernetesConfig.from_mapping({"pycharm_in_image": False}))
    assert without.apps is not None and "pycharm-desktop" not in without.apps
    assert {"jupyter", "vscode", "desktop"} <= without.apps
    assert str(without.unavailable["pycharm-desktop"]).startswith(
        "PyCharm is not in this cluster's desktop image"
    )
