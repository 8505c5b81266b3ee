"""The manifest builders, as plain dicts: what the cluster is asked for, and why."""

from __future__ import annotations

import base64
from decimal import Decimal

import pytest

from scheduling.backends.kubernetes import manifests, names
from scheduling.backends.kubernetes.config import KubernetesConfig
from scheduling.backends.kubernetes.manifests import ManifestError
from tests.scheduling.kubernetes.conftest import NAMESPACE, spec, with_gpus

CONFIG = KubernetesConfig()
WORKLOAD = "3f2a9c4e-1b7d-4e5f-8a9b-0c1d2e3f4a5b"


def container(obj: dict, task: int = 0) -> dict:
    return obj["spec"]["tasks"][task]["template"]["spec"]["containers"][0]


def test_names_derive_from_the_workload_id_and_are_dns_safe() -> None:
    assert names.workload_name(WORKLOAD) == "q-3f2a9c4e1b7d"
    assert names.workload_name(WORKLOAD, 2) == "q-3f2a9c4e1b7d-2"
    assert names.workload_name("not a uuid").startswith("q-")
    long = names.tenant_namespace("quanta-", "x" * 80 + "_Under")
    assert len(long) <= 63 and long == long.lower() and "_" not in long
    assert names.tenant_namespace("quanta-", "x" * 80 + "a") != names.tenant_namespace(
        "quanta-", "x" * 80 + "b"
    )


def test_every_workload_object_carries_the_managed_by_and_workload_id_labels() -> None:
    for kind in ("job", "notebook", "serving"):
        objects = manifests.workload_objects(spec(kind, workload_id=WORKLOAD), CONFIG, token="t")
        for obj in objects:
            labels = obj["metadata"]["labels"]
            assert labels[names.MANAGED_BY] == "quanta", obj["kind"]
            assert labels[names.WORKLOAD_ID] == WORKLOAD, obj["kind"]
            assert obj["metadata"]["name"].startswith("q-3f2a9c4e1b7d")
            assert obj["metadata"]["namespace"] == NAMESPACE


def test_a_distributed_job_is_a_gang_of_one_master_and_its_workers() -> None:
    job = manifests.training_job(spec(workers=4, queue="dl-201"), CONFIG)
    assert job["apiVersion"] == "batch.volcano.sh/v1alpha1"
    assert job["spec"]["schedulerName"] == "volcano"
    assert job["spec"]["minAvailable"] == 4
    assert job["spec"]["queue"] == "dl-201"
    tasks = {t["name"]: t for t in job["spec"]["tasks"]}
    assert (tasks["master"]["replicas"], tasks["worker"]["replicas"]) == (1, 3)
    assert tasks["master"]["policies"] == [{"event": "TaskCompleted", "action": "CompleteJob"}]
    assert set(job["spec"]["plugins"]) == {"env", "svc", "pytorch"}
    assert job["spec"]["ttlSecondsAfterFinished"] == CONFIG.ttl_seconds_after_finished
    for task in tasks.values():
        assert task["template"]["spec"]["restartPolicy"] == "Never"
        assert (
            task["template"]["metadata"]["labels"][names.WORKLOAD_ID]
            == job["metadata"]["labels"][names.WORKLOAD_ID]
        )


def test_a_single_worker_job_has_only_its_master() -> None:
    job = manifests.training_job(spec(workers=1), CONFIG)
    assert [t["name"] for t in job["spec"]["tasks"]] == ["master"]
    assert job["spec"]["minAvailable"] == 1


def test_evictions_restart_in_place_and_failures_go_back_to_the_portal() -> None:
    job = manifests.training_job(spec(max_retries=2), CONFIG)
    assert job["spec"]["policies"] == [
        {"event": "PodEvicted", "action": "RestartJob"},
        {"event": "PodFailed", "action": "TerminateJob"},
    ]
    assert job["spec"]["maxRetry"] == CONFIG.eviction_max_retry


def test_with_volcano_retries_failures_restart_in_place_bounded_by_max_retry() -> None:
    config = KubernetesConfig(retries_by="volcano")
    job = manifests.training_job(spec(max_retries=2), config)
    assert {"event": "PodFailed", "action": "RestartJob"} in job["spec"]["policies"]
    assert job["spec"]["maxRetry"] == 3  # Volcano fails the job when restarts reach maxRetry


def test_a_tensorflow_job_has_a_parameter_server_without_gpus() -> None:
    base = with_gpus(
        spec(workers=3, labels={"quanta.tenant": "ml-101", "quanta.distribution": "tensorflow"}),
        gpus=1,
    )
    job = manifests.training_job(base, CONFIG)
    tasks = {t["name"]: t for t in job["spec"]["tasks"]}
    assert (tasks["ps"]["replicas"], tasks["worker"]["replicas"]) == (1, 2)
    assert "nvidia.com/gpu" not in container(job, 0)["resources"]["limits"]
    assert container(job, 1)["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "tensorflow" in job["spec"]["plugins"]


def test_whole_gpus_are_requested_as_nvidia_gpus_with_taint_tolerations() -> None:
    job = manifests.training_job(with_gpus(spec(), gpus=2), CONFIG)
    resources = container(job)["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == resources["requests"]["nvidia.com/gpu"] == "2"
    assert resources["requests"]["cpu"] == "2000m" and resources["limits"]["memory"] == "4096Mi"
    assert "cpu" not in resources["limits"]
    pod = job["spec"]["tasks"][0]["template"]["spec"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]


def test_a_gpu_share_is_requested_as_volcano_vgpu_number_memory_and_cores() -> None:
    job = manifests.training_job(with_gpus(spec(), gpu_milli=250, gpu_memory_mib=8192), CONFIG)
    limits = container(job)["resources"]["limits"]
    assert limits["volcano.sh/vgpu-number"] == "1"
    assert limits["volcano.sh/vgpu-memory"] == "8192"
    assert limits["volcano.sh/vgpu-cores"] == "25"
    assert "nvidia.com/gpu" not in limits


def test_a_cpu_only_workload_neither_tolerates_gpu_taints_nor_asks_for_a_model() -> None:
    pod = manifests.training_job(spec(), CONFIG)["spec"]["tasks"][0]["template"]["spec"]
    assert "tolerations" not in pod and "affinity" not in pod


def test_the_gpu_model_is_chosen_through_node_affinity_on_the_product_label() -> None:
    config = KubernetesConfig(
        gpu_products={"V100M16": "Tesla-V100-SXM2-16GB", "V100M32": "Tesla-V100-SXM2-32GB"}
    )
    base = with_gpus(spec(), gpus=4, gpu_models=("V100M16", "V100M32"))
    pod = manifests.training_job(base, config)["spec"]["tasks"][0]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    expression = terms["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert expression == {
        "key": "nvidia.com/gpu.product",
        "operator": "In",
        "values": ["Tesla-V100-SXM2-16GB", "Tesla-V100-SXM2-32GB"],
    }


def test_an_unknown_gpu_model_is_refused_with_the_models_the_cluster_knows() -> None:
    config = KubernetesConfig(gpu_products={"A100": "NVIDIA-A100-SXM4-80GB"})
    base = with_gpus(spec(), gpus=1, gpu_models=("H200",))
    with pytest.raises(ManifestError, match=r"'H200' is not known on this cluster \(known: A100\)"):
        manifests.training_job(base, config)


def test_volumes_mount_the_owners_home_and_the_datasets_read_only() -> None:
    config = KubernetesConfig.from_mapping(
        {"datasets": [{"claim": "imagenet", "mount_path": "/datasets/imagenet"}]}
    )
    job = manifests.training_job(spec(owner="bob@uni.example"), config)
    pod = job["spec"]["tasks"][0]["template"]["spec"]
    claims = {v["name"]: v.get("persistentVolumeClaim") for v in pod["volumes"]}
    assert claims["home"] == {"claimName": "quanta-home"}
    assert claims["dataset-0"] == {"claimName": "imagenet", "readOnly": True}
    mounts = {m["name"]: m for m in container(job)["volumeMounts"]}
    assert mounts["home"]["subPath"] == "bob-uni.example"
    assert mounts["dataset-0"]["readOnly"] is True
    assert mounts["dshm"]["mountPath"] == "/dev/shm"


def test_a_notebook_is_a_one_task_job_a_service_a_token_secret_and_a_network_policy() -> None:
    config = KubernetesConfig(portal_namespace="quanta", portal_pod_labels={"app": "portal"})
    objects = manifests.workload_objects(spec("notebook"), config, token="s3cret")
    assert [o["kind"] for o in objects] == ["Job", "Service", "Secret", "NetworkPolicy"]
    job, service, secret, policy = objects
    assert job["spec"]["minAvailable"] == 1 and len(job["spec"]["tasks"]) == 1
    server = container(job)
    assert server["command"][:2] == ["jupyter", "lab"]
    assert (
        f"--ServerApp.base_url=/nb/{job['metadata']['labels'][names.WORKLOAD_ID]}/"
        in server["command"]
    )
    assert server["readinessProbe"]["httpGet"]["path"].endswith("/api")
    token = next(e for e in server["env"] if e["name"] == "JUPYTER_TOKEN")
    assert token["valueFrom"]["secretKeyRef"]["name"] == secret["metadata"]["name"]
    assert base64.b64decode(secret["data"]["token"]) == b"s3cret"
    assert service["spec"]["ports"][0]["port"] == 80
    assert service["spec"]["selector"] == policy["spec"]["podSelector"]["matchLabels"]
    assert policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"] == {
        "app": "portal"
    }


def test_an_ide_runs_code_server_and_an_unknown_app_is_refused() -> None:
    job = manifests.notebook_job(spec("notebook", app="vscode"), CONFIG)
    assert container(job)["command"][0] == "code-server"
    with pytest.raises(ManifestError, match="cannot run the app 'matlab'"):
        manifests.notebook_job(spec("notebook", app="matlab"), CONFIG)


def test_serving_is_a_deployment_a_service_and_an_autoscaler() -> None:
    objects = manifests.workload_objects(spec("serving", workers=2, queue="dl-201"), CONFIG)
    deployment, service, autoscaler = objects
    assert (deployment["kind"], service["kind"], autoscaler["kind"]) == (
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
    )
    template = deployment["spec"]["template"]
    assert deployment["spec"]["replicas"] == 2
    assert template["spec"]["schedulerName"] == "volcano"
    assert template["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] == "dl-201"
    assert (
        deployment["spec"]["selector"]["matchLabels"].items()
        <= template["metadata"]["labels"].items()
    )
    assert autoscaler["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert autoscaler["spec"]["minReplicas"] == 2 <= autoscaler["spec"]["maxReplicas"]


def test_a_workload_without_image_or_tenant_is_refused_with_a_reason() -> None:
    with pytest.raises(ManifestError, match="no container image"):
        manifests.training_job(spec(image=""), CONFIG)
    with pytest.raises(ManifestError, match="no tenant"):
        manifests.training_job(spec(labels={}), CONFIG)


def test_a_queue_mirrors_weight_capability_reclaimable_and_parent() -> None:
    queue = manifests.volcano_queue(
        manifests.QueueSpec(
            name="dl_201",
            weight=4,
            capability={"gpus": 8, "cpu_milli": 64000, "memory_mib": 262144},
            reclaimable=False,
            parent="cs",
        )
    )
    assert queue["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert queue["metadata"]["name"] == "dl-201"
    assert queue["spec"] == {
        "weight": 4,
        "reclaimable": False,
        "capability": {"nvidia.com/gpu": "8", "cpu": "64000m", "memory": "262144Mi"},
        "parent": "cs",
    }


def test_a_tenant_gets_a_namespace_and_a_resource_quota_mirroring_its_quota() -> None:
    tenant = manifests.TenantSpec(
        slug="ml-101",
        gpus=Decimal("4.5"),
        cpu_cores=Decimal("64"),
        memory_mib=262144,
        gpu_memory_mib=65536,
        environments=12,
        jobs=8,
    )
    namespace, quota = manifests.tenant_objects(tenant, CONFIG)
    assert namespace["metadata"]["name"] == quota["metadata"]["namespace"] == NAMESPACE
    assert quota["spec"]["hard"] == {
        "requests.cpu": "64",
        "requests.memory": "262144Mi",
        "limits.memory": "262144Mi",
        "requests.nvidia.com/gpu": "4",
        "requests.volcano.sh/vgpu-cores": "450",
        "requests.volcano.sh/vgpu-memory": "65536",
        "count/jobs.batch.volcano.sh": "20",
    }
    assert manifests.tenant_resource_quota(manifests.TenantSpec(slug="x"), CONFIG) is None


def test_a_home_claim_is_made_only_where_the_cluster_provisions_storage() -> None:
    tenant = manifests.TenantSpec(slug="ml-101")
    assert manifests.home_claim(tenant, CONFIG) is None
    claim = manifests.home_claim(tenant, KubernetesConfig(storage_class="cephfs"))
    assert claim is not None
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["storageClassName"] == "cephfs"


def test_a_stop_command_terminates_its_job() -> None:
    job = manifests.training_job(spec(), CONFIG)
    job["metadata"]["uid"] = "1234"
    command = manifests.stop_command(job)
    assert command["action"] == "TerminateJob"
    assert command["target"]["uid"] == "1234" and command["target"]["kind"] == "Job"
    assert command["metadata"]["namespace"] == job["metadata"]["namespace"]


def env_of(job: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container(job)["env"]}


def test_vscode_is_a_volcano_job_and_service_served_at_the_root_the_proxy_strips_to() -> None:
    objects = manifests.workload_objects(spec("notebook", app="vscode"), CONFIG, token="t")
    assert [o["kind"] for o in objects][:2] == ["Job", "Service"]
    job = objects[0]
    assert job["apiVersion"].startswith("batch.volcano.sh/")
    command = container(job)["command"]
    assert command[0] == "code-server" and "--auth" in command and CONFIG.home_mount_path in command
    assert container(job)["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert env_of(job)["QUANTA_BASE_URL"] == "/"


def test_a_desktop_gets_its_templates_program_and_pycharm_its_own() -> None:
    job = manifests.notebook_job(spec("notebook", app="desktop", program=("xterm", "-ls")), CONFIG)
    assert env_of(job)["QUANTA_DESKTOP_PROGRAM"] == "xterm -ls"
    assert container(job)["readinessProbe"] == {
        "tcpSocket": {"port": "http"}, "periodSeconds": 2, "failureThreshold": 3,
    }  # fmt: skip
    pycharm = manifests.notebook_job(spec("notebook", app="pycharm-desktop"), CONFIG)
    assert env_of(pycharm)["QUANTA_DESKTOP_PROGRAM"] == "pycharm"
    with pytest.raises(ManifestError, match="names no program"):
        manifests.notebook_job(spec("notebook", app="desktop"), CONFIG)


def test_a_command_typed_as_one_string_runs_in_a_shell_in_every_task_of_the_volcano_job() -> None:
    from workloads.launch import parse_command

    typed = "for i in 1 2 3; do echo $i; done | tee out.txt"
    argv = tuple(parse_command(typed))
    assert argv == ("/bin/sh", "-c", typed)  # what the local backend runs too
    job = manifests.training_job(spec(workers=3, command=argv), CONFIG)
    assert [container(job, task)["command"] for task in (0, 1)] == [list(argv)] * 2
    # A list (the API's argv) is run as it is, without a shell.
    job = manifests.training_job(spec(command=("python", "train.py")), CONFIG)
    assert container(job)["command"] == ["python", "train.py"]
