"""Model serving on Kubernetes: the InferenceService (KServe) and the Deployment + Service + HPA
fallback built from a ServingSpec, and the backend submitting, observing, scaling and stopping
them on the emulated API server. (Schema validation against the CRD: test_schemas.py.)"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from scheduling.backends.base import BackendError, Phase, ServingSpec
from scheduling.backends.kubernetes import KubernetesBackend, manifests, names, schedulerconf
from scheduling.backends.kubernetes.config import KubernetesConfig
from scheduling.backends.kubernetes.manifests import ManifestError
from tests.scheduling.kubernetes.conftest import NAMESPACE, spec, with_gpus
from tests.scheduling.kubernetes.emulator import ApiServer
from tests.scheduling.kubernetes.test_watcher import Running

KSERVE = KubernetesConfig(serving="kserve")
DEPLOYMENT = KubernetesConfig()
IRIS = ServingSpec(
    "iris", "sklearn", storage_uri="pvc://models/alice/iris/3", min_replicas=0, max_replicas=3,
    target_concurrency=8, scale_to_zero_after_s=600,
)  # fmt: skip
ISVCS = "inferenceservices"


def server(serving: ServingSpec = IRIS, **fields: Any) -> Any:
    fields.setdefault("command", ())
    return spec("serving", serving=serving, **fields)


def predictor_of(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["predictor"]


# --- the InferenceService -------------------------------------------------------------------------


def test_with_kserve_a_model_server_is_one_inference_service() -> None:
    workload = server(queue="dl-201", priority=1000)
    (isvc,) = manifests.workload_objects(workload, KSERVE, priority_class="quanta-high")
    assert (isvc["apiVersion"], isvc["kind"]) == ("serving.kserve.io/v1beta1", "InferenceService")
    assert isvc["metadata"]["name"] == names.workload_name(workload.workload_id)
    assert isvc["metadata"]["namespace"] == NAMESPACE
    assert isvc["metadata"]["labels"][names.COMPONENT] == "serving"
    assert isvc["metadata"]["annotations"][names.OWNER] == "bob"
    predictor = predictor_of(isvc)
    assert predictor["model"]["modelFormat"] == {"name": "sklearn"}
    assert predictor["model"]["protocolVersion"] == "v2"
    assert predictor["model"]["storageUri"] == "pvc://models/alice/iris/3"
    # The runtime's own arguments, with the model's v2 name instead of the object's name.
    assert "--model_name=iris" in predictor["model"]["args"]
    assert predictor["model"]["runtime"] == "kserve-sklearnserver"  # the one these args fit
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (0, 3)
    assert (predictor["scaleMetric"], predictor["scaleTarget"]) == ("concurrency", 8)
    # Volcano places the predictor's pods in the queue; they carry the workload's labels, so
    # observe and stop find them as they find any workload's pods.
    assert predictor["schedulerName"] == "volcano"
    assert predictor["annotations"] == {manifests.QUEUE_ANNOTATION: "dl-201"}
    assert predictor["labels"][names.WORKLOAD_ID] == workload.workload_id
    assert predictor["priorityClassName"] == "quanta-high"
    # Scale to zero after the endpoint's idle period.
    annotations = isvc["metadata"]["annotations"]
    assert annotations[manifests.SCALE_TO_ZERO_RETENTION] == "600s"


def test_the_serving_queue_of_the_cluster_wins_over_the_tenants_queue() -> None:
    config = dataclasses.replace(KSERVE, serving_queue="serving")
    (isvc,) = manifests.workload_objects(server(queue="dl-201"), config)
    assert predictor_of(isvc)["annotations"][manifests.QUEUE_ANNOTATION] == "serving"
    deployment = manifests.serving_deployment(server(queue="dl-201"), config)
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations[manifests.QUEUE_ANNOTATION] == "serving"


def test_a_gpu_share_is_limited_as_for_notebooks_with_the_gpu_toleration() -> None:
    workload = with_gpus(server(), gpu_milli=250, gpu_memory_mib=4096)
    (isvc,) = manifests.workload_objects(workload, KSERVE)
    predictor = predictor_of(isvc)
    limits = predictor["model"]["resources"]["limits"]
    assert limits == {
        "memory": "4096Mi",
        manifests.VGPU_NUMBER: "1",
        manifests.VGPU_CORES: "25",
        manifests.VGPU_MEMORY: "4096",
    }
    assert predictor["model"]["resources"]["requests"]["cpu"] == "2000m"
    assert predictor["tolerations"] == [dict(t) for t in KSERVE.gpu_tolerations]
    notebook = manifests.notebook_job(
        with_gpus(spec("notebook"), gpu_milli=250, gpu_memory_mib=4096), KSERVE
    )
    pod = notebook["spec"]["tasks"][0]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"] == limits


def test_whole_gpus_of_a_model_become_the_node_affinity() -> None:
    config = dataclasses.replace(KSERVE, gpu_products={"A100": "NVIDIA-A100-SXM4-80GB"})
    workload = with_gpus(server(), gpus=1, gpu_models=("A100",))
    (isvc,) = manifests.workload_objects(workload, config)
    predictor = predictor_of(isvc)
    assert predictor["model"]["resources"]["limits"][manifests.GPU] == "1"
    terms = predictor["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [
        "NVIDIA-A100-SXM4-80GB"
    ]


def test_each_framework_maps_to_its_kserve_model_format() -> None:
    for framework, model_format in (
        ("sklearn", "sklearn"),
        ("pytorch", "pytorch"),
        ("onnx", "onnx"),
    ):
        serving = dataclasses.replace(IRIS, framework=framework)
        (isvc,) = manifests.workload_objects(server(serving), KSERVE)
        assert predictor_of(isvc)["model"]["modelFormat"] == {"name": model_format}


def test_a_custom_model_server_is_the_templates_container_with_the_storage_uri() -> None:
    serving = ServingSpec("echo", "custom", storage_uri="pvc://models/echo/1", min_replicas=1)
    workload = server(serving, command=("python", "-m", "echo_server"))
    (isvc,) = manifests.workload_objects(workload, KSERVE)
    predictor = predictor_of(isvc)
    assert "model" not in predictor
    (container,) = predictor["containers"]
    assert container["name"] == "kserve-container"
    assert container["image"] == workload.image
    assert container["command"] == ["python", "-m", "echo_server"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["STORAGE_URI"] == "pvc://models/echo/1"
    assert env["MODEL_NAME"] == "echo" and env["PROTOCOL"] == "v2"
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert manifests.SCALE_TO_ZERO_RETENTION not in predictor  # min 1: never to zero


def test_a_bad_framework_is_refused_with_a_clear_message() -> None:
    serving = dataclasses.replace(IRIS, framework="tensorflw")
    message = r"unknown model framework 'tensorflw' \(known: custom, onnx, pytorch, sklearn\)"
    with pytest.raises(ManifestError, match=message):
        manifests.workload_objects(server(serving), KSERVE)
    with pytest.raises(ManifestError, match=message):
        manifests.workload_objects(server(serving), DEPLOYMENT)


def test_a_model_without_files_on_the_cluster_is_refused() -> None:
    serving = dataclasses.replace(IRIS, storage_uri="")
    with pytest.raises(ManifestError, match="no files on this cluster"):
        manifests.workload_objects(server(serving), KSERVE)
    serving = dataclasses.replace(IRIS, storage_uri="s3://bucket/iris")
    with pytest.raises(ManifestError, match=r"pvc://claim/path"):
        manifests.workload_objects(server(serving), DEPLOYMENT)


# --- the Deployment fallback ----------------------------------------------------------------------


def test_without_kserve_a_model_server_is_a_deployment_a_service_and_an_autoscaler() -> None:
    serving = dataclasses.replace(IRIS, min_replicas=2, max_replicas=5)
    workload = server(serving, queue="dl-201")
    deployment, service, hpa = manifests.workload_objects(workload, DEPLOYMENT)
    assert [o["kind"] for o in (deployment, service, hpa)] == [
        "Deployment", "Service", "HorizontalPodAutoscaler",
    ]  # fmt: skip
    assert deployment["spec"]["replicas"] == 2
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 5)
    template = deployment["spec"]["template"]
    assert template["metadata"]["annotations"] == {manifests.QUEUE_ANNOTATION: "dl-201"}
    pod = template["spec"]
    assert pod["schedulerName"] == "volcano"
    (container,) = pod["containers"]
    # The v2 server of the template's image, told the model's name and folder.
    assert "command" not in container
    assert container["args"] == ["--model_name=iris", "--model_dir=/mnt/models", "--http_port=8080"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    # The version's files: its claim, read-only, the path in it as sub-path.
    model = next(v for v in pod["volumes"] if v["name"] == "model")
    assert model["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
    mount = next(m for m in container["volumeMounts"] if m["name"] == "model")
    assert mount == {
        "name": "model", "mountPath": "/mnt/models", "readOnly": True, "subPath": "alice/iris/3",
    }  # fmt: skip
    assert not any(v["name"] == "home" for v in pod["volumes"])  # a server needs no home
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_a_minimum_of_zero_starts_one_replica_as_an_hpa_cannot_go_lower() -> None:
    deployment, _, hpa = manifests.workload_objects(server(), DEPLOYMENT)
    assert deployment["spec"]["replicas"] == 1
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 3)


# --- the backend on the emulated API server -------------------------------------------------------


def ready_condition(status: str, reason: str = "", message: str = "") -> dict[str, str]:
    return {"type": "Ready", "status": status, "reason": reason, "message": message}


def set_isvc_status(api: ApiServer, name: str, **status_fields: Any) -> None:
    def change(isvc: dict[str, Any]) -> None:
        isvc["status"] = status_fields

    api.update(ISVCS, NAMESPACE, name, change)


def model_pod(api: ApiServer, workload: Any, *, ready: bool, name: str = "p-0") -> None:
    api.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "labels": {
                    names.WORKLOAD_ID: workload.workload_id,
                    names.ATTEMPT: "0",
                    names.MANAGED_BY: names.MANAGER,
                },
            },
            "spec": {"containers": [{"name": "kserve-container", "image": "x"}]},
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }
    )


def unschedulable(api: ApiServer, pod_name: str) -> None:
    """The pod waits for room, in the scheduler's words."""

    def change(pod: dict[str, Any]) -> None:
        pod["status"] = {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": "0/4 nodes are available: 4 Insufficient volcano.sh/vgpu-number.",
                }
            ],
        }  # fmt: skip

    api.update("pods", NAMESPACE, pod_name, change)


@pytest.fixture
def kserve_backend(make_backend: Callable[..., KubernetesBackend]) -> KubernetesBackend:
    return make_backend(serving="kserve")


def test_submit_creates_one_inference_service_and_a_retry_adopts_it(
    api: ApiServer, kserve_backend: KubernetesBackend
) -> None:
    api.fail(method="POST", path="/inferenceservices$", status=0, after=True)
    workload = server()
    handle = kserve_backend.submit(workload)
    (isvc,) = api.all(ISVCS)
    assert handle.state["object"] == "InferenceService"
    assert handle.state["uid"] == isvc["metadata"]["uid"]
    assert kserve_backend.submit(workload).state == handle.state
    assert len(api.all(ISVCS)) == 1
    assert api.all("deployments") == []


def test_a_bad_framework_fails_the_submit_before_anything_is_sent(
    api: ApiServer, kserve_backend: KubernetesBackend
) -> None:
    with pytest.raises(BackendError, match="unknown model framework 'keras'") as caught:
        kserve_backend.submit(server(dataclasses.replace(IRIS, framework="keras")))
    assert not caught.value.transient
    assert api.posts(ISVCS) == 0


def test_observe_follows_the_inference_services_ready_condition(
    api: ApiServer, kserve_backend: KubernetesBackend
) -> None:
    workload = server(dataclasses.replace(IRIS, min_replicas=2))
    handle = kserve_backend.submit(workload)
    name = handle.state["name"]

    def observed() -> Any:
        return kserve_backend.observe([handle])[workload.workload_id]

    assert observed().phase == Phase.STARTING
    assert observed().reason.text() == "starting 2 replicas"
    set_isvc_status(api, name, conditions=[ready_condition("False", "RevisionMissing")])
    assert observed().phase == Phase.STARTING  # not ready is not failed
    model_pod(api, workload, ready=True)
    model_pod(api, workload, ready=False, name="p-1")
    set_isvc_status(api, name, conditions=[ready_condition("True")], url="http://iris.example")
    assert observed().phase == Phase.RUNNING
    assert observed().reason.text() == "serving with 1 of 2 replicas ready"


def test_a_model_that_does_not_load_fails_with_kserves_message(
    api: ApiServer, kserve_backend: KubernetesBackend
) -> None:
    handle = kserve_backend.submit(server())
    message = "No module named 'sklearn.ensemble._forest'"
    set_isvc_status(
        api, handle.state["name"],
        conditions=[ready_condition("False", "ModelLoadFailed", message)],
        modelStatus={
            "transitionStatus": "BlockedByFailedLoad",
            "lastFailureInfo": {"reason": "ModelLoadFailed", "message": message},
        },
    )  # fmt: skip
    observation = kserve_backend.observe([handle])[handle.workload_id]
    assert observation.phase == Phase.FAILED
    assert observation.reason.text() == f"the model server failed: {message}"


def test_a_pending_predictor_waits_for_resources_with_the_schedulers_words(
    api: ApiServer, kserve_backend: KubernetesBackend
) -> None:
    workload = server()
    handle = kserve_backend.submit(workload)
    model_pod(api, workload, ready=False)
    unschedulable(api, "p-0")
    observation = kserve_backend.observe([handle])[workload.workload_id]
    assert observation.phase == Phase.PENDING
    assert "4 Insufficient volcano.sh/vgpu-number" in observation.reason.text()


def test_the_endpoint_is_the_inference_services_url_once_ready(
    api: ApiServer, kserve_backend: KubernetesBackend
) -> None:
    handle = kserve_backend.submit(server())
    assert kserve_backend.endpoint(handle) is None
    url = f"http://{handle.state['name']}.{NAMESPACE}.svc.cluster.local"
    set_isvc_status(api, handle.state["name"], conditions=[ready_condition("True")], url=url + "/")
    endpoint = kserve_backend.endpoint(handle)
    assert endpoint is not None and endpoint.url == url
    observation = kserve_backend.observe([handle])[handle.workload_id]
    assert (observation.phase, observation.reason.text()) == (Phase.RUNNING, "scaled to zero")


def test_scale_patches_the_inference_services_minimum_only_when_it_differs(
    api: ApiServer, kserve_backend: KubernetesBackend
) -> None:
    handle = kserve_backend.submit(server())
    assert kserve_backend.scale(handle, 2, 3)
    assert predictor_of(api.all(ISVCS)[0])["minReplicas"] == 2
    patches = sum(1 for method, _ in api.requests if method == "PATCH")
    assert not kserve_backend.scale(handle, 2, 3)
    assert sum(1 for method, _ in api.requests if method == "PATCH") == patches
    assert kserve_backend.scale(handle, 0, 3)
    assert predictor_of(api.all(ISVCS)[0])["minReplicas"] == 0


def test_stop_deletes_the_inference_service_and_running_lists_it_until_then(
    api: ApiServer, kserve_backend: KubernetesBackend
) -> None:
    handle = kserve_backend.submit(server())
    assert kserve_backend.running() == {handle.workload_id}
    kserve_backend.stop(handle)
    assert api.all(ISVCS) == []
    assert (ISVCS, NAMESPACE, handle.state["name"], "Foreground") in api.deletes
    assert kserve_backend.running() == set()
    assert kserve_backend.observe([handle])[handle.workload_id].phase == Phase.UNKNOWN
    kserve_backend.stop(handle)  # again: nothing


def test_a_later_attempt_replaces_the_earlier_inference_service(
    api: ApiServer, kserve_backend: KubernetesBackend
) -> None:
    workload = server()
    kserve_backend.submit(workload)
    kserve_backend.submit(dataclasses.replace(workload, attempt=1))
    (isvc,) = api.all(ISVCS)
    assert isvc["metadata"]["labels"][names.ATTEMPT] == "1"


def test_deployment_mode_observes_the_available_replicas_and_serves_at_the_service(
    api: ApiServer, backend: KubernetesBackend
) -> None:
    workload = server(dataclasses.replace(IRIS, min_replicas=2))
    handle = backend.submit(workload)
    name = handle.state["name"]
    assert backend.observe([handle])[workload.workload_id].phase == Phase.STARTING
    assert backend.endpoint(handle) is None
    api.update("deployments", NAMESPACE, name, lambda d: d.update(status={"availableReplicas": 1}))
    model_pod(api, workload, ready=True)
    observation = backend.observe([handle])[workload.workload_id]
    assert (observation.phase, observation.reason.text()) == (
        Phase.RUNNING, "serving with 1 of 2 replicas ready",
    )  # fmt: skip
    endpoint = backend.endpoint(handle)
    assert endpoint is not None and endpoint.url == f"http://{name}.{NAMESPACE}.svc:80"


def test_deployment_mode_scales_the_autoscaler_and_to_zero_the_deployment(
    api: ApiServer, backend: KubernetesBackend
) -> None:
    handle = backend.submit(server())
    name = handle.state["name"]

    def replicas() -> int:
        return int(api.get("deployments", NAMESPACE, name)["spec"]["replicas"])

    def hpa_range() -> tuple[int, int]:
        hpa = api.get("horizontalpodautoscalers", NAMESPACE, name)["spec"]
        return hpa["minReplicas"], hpa["maxReplicas"]

    assert backend.scale(handle, 2, 3)  # a window opens
    assert hpa_range() == (2, 3) and replicas() == 2
    assert not backend.scale(handle, 2, 3)
    assert backend.scale(handle, 0, 3)  # it closes: the HPA cannot go to 0, the Deployment can
    assert replicas() == 0 and hpa_range() == (2, 3)
    observation = backend.observe([handle])[handle.workload_id]
    assert (observation.phase, observation.reason.text()) == (Phase.RUNNING, "scaled to zero")
    assert not backend.scale(handle, 0, 3)
    assert backend.scale(handle, 1, 3)  # the next morning
    assert hpa_range() == (1, 3) and replicas() == 1


def test_scaling_a_model_server_that_is_gone_does_nothing(
    api: ApiServer, backend: KubernetesBackend
) -> None:
    handle = backend.submit(server())
    api.remove("deployments", NAMESPACE, handle.state["name"])
    assert not backend.scale(handle, 2, 3)


def test_the_watcher_follows_inference_services_too(
    api: ApiServer, kserve_backend: KubernetesBackend
) -> None:
    handle = kserve_backend.submit(server())
    watcher = Running(kserve_backend)
    try:
        watcher.wait_for(handle.workload_id, Phase.STARTING)
        set_isvc_status(api, handle.state["name"], conditions=[ready_condition("True")])
        running = watcher.wait_for(handle.workload_id, Phase.RUNNING)
        assert running.reason is not None and running.reason.text() == "scaled to zero"
    finally:
        watcher.finish()


# --- night-time training reclaims what serving gives back ----------------------------------------


def test_the_serving_queue_keeps_its_share_and_the_training_queue_gives_it_back() -> None:
    # Serving: a queue of its own that nobody reclaims from; training: a reclaimable queue
    # that borrows the idle GPUs at night and is evicted from when serving scales up again.
    serving = manifests.volcano_queue(manifests.QueueSpec("serving", weight=4, reclaimable=False))
    training = manifests.volcano_queue(manifests.QueueSpec("training", weight=1))
    assert serving["spec"] == {"weight": 4, "reclaimable": False}
    assert training["spec"] == {"weight": 1, "reclaimable": True}
    actions = [a.strip() for a in schedulerconf.ACTIONS.split(",")]
    assert "reclaim" in actions and actions.index("reclaim") > actions.index("allocate")


def test_a_cluster_without_kserve_says_so_at_submit(
    api: ApiServer, kserve_backend: KubernetesBackend
) -> None:
    api.fail(
        method="POST", path="/inferenceservices$", status=404,
        message="the server could not find the requested resource",
    )  # fmt: skip
    with pytest.raises(BackendError, match="this cluster has no KServe") as caught:
        kserve_backend.submit(server())
    assert not caught.value.transient
    assert '"serving": "deployment"' in str(caught.value)


def test_a_server_without_a_model_stays_a_deployment_where_kserve_runs() -> None:
    objects = manifests.workload_objects(spec("serving", workers=2), KSERVE)
    assert [o["kind"] for o in objects] == ["Deployment", "Service", "HorizontalPodAutoscaler"]


def test_the_serving_setting_is_kserve_or_deployment() -> None:
    assert KubernetesConfig.from_mapping({}).serving == "deployment"
    assert KubernetesConfig.from_mapping({"serving": "kserve"}).serving == "kserve"
    with pytest.raises(ValueError, match='serving must be "kserve" or "deployment"'):
        KubernetesConfig.from_mapping({"serving": "knative"})


def test_a_revision_that_cannot_start_fails_but_one_waiting_for_room_waits(
    api: ApiServer, kserve_backend: KubernetesBackend
) -> None:
    workload = server()
    handle = kserve_backend.submit(workload)
    message = 'Revision "q-1-predictor-00001" failed with message: exec format error.'
    failed = ready_condition("False", "RevisionFailed", message)
    set_isvc_status(api, handle.state["name"], conditions=[failed])
    observation = kserve_backend.observe([handle])[workload.workload_id]
    assert observation.phase == Phase.FAILED
    assert observation.reason.text() == f"the model server failed: {message}"
    model_pod(api, workload, ready=False)
    unschedulable(api, "p-0")
    assert kserve_backend.observe([handle])[workload.workload_id].phase == Phase.PENDING


def test_a_new_revision_that_fails_while_the_old_one_serves_keeps_serving(
    api: ApiServer, kserve_backend: KubernetesBackend
) -> None:
    workload = server(dataclasses.replace(IRIS, min_replicas=1))
    handle = kserve_backend.submit(workload)
    model_pod(api, workload, ready=True)
    set_isvc_status(
        api, handle.state["name"], conditions=[ready_condition("True")],
        modelStatus={"transitionStatus": "BlockedByFailedLoad",
                     "lastFailureInfo": {"reason": "ModelLoadFailed", "message": "bad file"}},
    )  # fmt: skip
    observation = kserve_backend.observe([handle])[workload.workload_id]
    assert (observation.phase, observation.reason.text()) == (
        Phase.RUNNING, "serving with 1 of 1 replicas ready",
    )  # fmt: skip
