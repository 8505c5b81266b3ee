"""Pure builders: what Quanta asks a Kubernetes + Volcano cluster for, as plain dicts.

No API calls and no Django here, so every manifest can be tested (and validated against the
CRD and Kubernetes schemas) without a cluster, and ``manage.py volcano_manifests`` can print
exactly what the backend would submit.

How workloads map to objects:

- a training job is a Volcano Job: a ``master`` task and ``workers - 1`` ``worker`` tasks
  (PyTorch; or ``ps``/``worker`` for TensorFlow), gang-scheduled with ``minAvailable`` = the
  number of workers, restarted whole in place after an eviction; after a failure the gang
  is terminated (its failed pods kept for the reason) and the portal starts the next attempt,
  or, with ``retries_by: volcano``, Volcano restarts it up to ``max_retries`` times;
- a notebook or IDE is a one-task Volcano Job (so it queues, and counts against its queue,
  like any job), a ClusterIP Service the portal's proxy reaches, a Secret with its token and,
  where the portal's pods are known, a NetworkPolicy that admits only them;
- a model server is a KServe InferenceService where the cluster runs KServe (``serving:
  kserve``), else a Deployment (pods scheduled by Volcano in the serving queue), a Service and
  a HorizontalPodAutoscaler;
- every tenant has a namespace with a ResourceQuota mirroring its quota; every portal queue a
  Volcano Queue.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from scheduling.backends.base import Resources, WorkloadSpec
from scheduling.backends.kubernetes import names
from scheduling.backends.kubernetes.config import KubernetesConfig

Manifest = dict[str, Any]

VOLCANO_JOB_API = "batch.volcano.sh/v1alpha1"
VOLCANO_QUEUE_API = "scheduling.volcano.sh/v1beta1"
VOLCANO_COMMAND_API = "bus.volcano.sh/v1alpha1"

GPU = "nvidia.com/gpu"
VGPU_NUMBER = "volcano.sh/vgpu-number"
VGPU_MEMORY = "volcano.sh/vgpu-memory"  # MiB of device memory
VGPU_CORES = "volcano.sh/vgpu-cores"  # percent of one device's compute
QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
KSERVE_API = "serving.kserve.io/v1beta1"
KSERVE_CONTAINER = "kserve-container"
SCALE_TO_ZERO_RETENTION = "autoscaling.knative.dev/scale-to-zero-pod-retention-period"
SKLEARN_RUNTIME = "kserve-sklearnserver"  # KServe's ClusterServingRuntime for sklearn
MODEL_MOUNT = "/mnt/models"  # where KServe's storage initializer (and our claim mount) put it
# The portal's model frameworks -> KServe's model formats ("": the template's own container).
MODEL_FORMATS = {"sklearn": "sklearn", "pytorch": "pytorch", "onnx": "onnx", "custom": ""}

PYTORCH_PORT = 23456
TENSORFLOW_PORT = 2222
TOKEN_KEY = "token"
QUOTA_NAME = "quanta-quota"
CONTAINER = "main"

NOTEBOOK_APPS = frozenset(
    {"jupyter", "terminal", "tensorboard", "vscode", "pycharm-desktop", "desktop"}
)
# Apps served at "/" of their Service: the portal's proxy drops the /nb/<id> prefix for them.
ROOT_SERVED_APPS = frozenset({"vscode", "pycharm-desktop", "desktop"})
DISTRIBUTIONS = ("pytorch", "tensorflow")


class ManifestError(ValueError):
    """The workload cannot be expressed for this cluster (unknown GPU model, no image, …):
    a permanent refusal whose message is the reason the user sees."""


# --- inputs that are not workloads --------------------------------------------------------------


@dataclass(frozen=True)
class QueueSpec:
    """A portal queue as Volcano should know it (built from scheduling.models.Queue)."""

    name: str
    weight: int = 1
    capability: Mapping[str, int] = field(default_factory=dict)  # portal keys: gpus, cpu_milli…
    reclaimable: bool = True
    parent: str = ""
    is_open: bool = True


@dataclass(frozen=True)
class TenantSpec:
    """A tenant and its own limits (None: no limit at this level)."""

    slug: str
    gpus: Decimal | None = None
    gpu_memory_mib: int | None = None
    cpu_cores: Decimal | None = None
    memory_mib: int | None = None
    environments: int | None = None
    jobs: int | None = None


@dataclass(frozen=True)
class PriorityClassSpec:
    name: str
    value: int
    preempting: bool = True
    description: str = ""


# --- workloads ----------------------------------------------------------------------------------


def namespace_for(spec: WorkloadSpec, config: KubernetesConfig) -> str:
    """The tenant's namespace (from the spec's ``quanta.tenant`` label)."""
    tenant = spec.labels.get("quanta.tenant", "")
    if not tenant:
        raise ManifestError("the workload has no tenant: cannot choose its namespace")
    return names.tenant_namespace(config.namespace_prefix, tenant)


def workload_objects(
    spec: WorkloadSpec,
    config: KubernetesConfig,
    *,
    priority_class: str = "",
    token: str = "",
) -> list[Manifest]:
    """Everything one workload needs, the primary object (Job, Deployment or
    InferenceService) first."""
    if spec.kind == "job":
        return [training_job(spec, config, priority_class=priority_class)]
    if spec.kind == "notebook":
        objects = [
            notebook_job(spec, config, priority_class=priority_class),
            notebook_service(spec, config),
            token_secret(spec, config, token),
        ]
        policy = notebook_network_policy(spec, config)
        return objects + ([policy] if policy else [])
    if spec.kind == "serving":
        # A server without a ServingSpec is its own command: a Deployment, KServe or not.
        if config.serving == "kserve" and spec.serving is not None:
            return [inference_service(spec, config, priority_class=priority_class)]
        return [
            serving_deployment(spec, config, priority_class=priority_class),
            serving_service(spec, config),
            serving_autoscaler(spec, config),
        ]
    raise ManifestError(f"unknown workload kind {spec.kind!r}")


def training_job(
    spec: WorkloadSpec, config: KubernetesConfig, *, priority_class: str = ""
) -> Manifest:
    """A gang-scheduled Volcano Job. The pytorch (or tensorflow) plugin sets MASTER_ADDR,
    WORLD_SIZE and RANK (or TF_CONFIG) as the local backend does; svc gives the tasks stable
    host names; env adds VC_TASK_INDEX."""
    if not spec.command:
        raise ManifestError("a training job needs a command")
    if spec.workers < 1:
        raise ManifestError("a training job needs at least one worker")
    distribution = spec.labels.get("quanta.distribution", "pytorch")
    if distribution not in DISTRIBUTIONS:
        raise ManifestError(f"unknown distribution {distribution!r} (pytorch or tensorflow)")
    name = names.workload_name(spec.workload_id, spec.attempt)
    labels = workload_labels(spec, "job")
    container = _container(spec, config, command=list(spec.command), resources=spec.resources)
    complete = [{"event": "TaskCompleted", "action": "CompleteJob"}]
    tasks: list[Manifest] = []
    if distribution == "pytorch":
        plugins = {
            "env": [],
            "svc": [],
            "pytorch": ["--master=master", "--worker=worker", f"--port={PYTORCH_PORT}"],
        }
        tasks.append(_task("master", 1, spec, config, labels, container, complete))
        if spec.workers > 1:
            tasks.append(_task("worker", spec.workers - 1, spec, config, labels, container))
    else:
        plugins = {
            "env": [],
            "svc": [],
            "tensorflow": ["--ps=ps", "--worker=worker", f"--port={TENSORFLOW_PORT}"],
        }
        if spec.workers > 1:
            # Parameter servers hold no GPU: only the flavor's CPU and memory.
            cpu_only = Resources(spec.resources.cpu_milli, spec.resources.memory_mib)
            ps = _container(spec, config, command=list(spec.command), resources=cpu_only)
            tasks.append(_task("ps", 1, spec, config, labels, ps, gpu=False))
        workers = max(spec.workers - 1, 1)
        tasks.append(_task("worker", workers, spec, config, labels, container, complete))
    if config.retries_by == "volcano":
        # Volcano fails a job once its restarts reach maxRetry: one more than the retries.
        max_retry = spec.max_retries + 1
        on_failure = "RestartJob"
    else:
        # TerminateJob keeps the failed pods, so their exit codes become the reason; the
        # portal then starts the next attempt.
        max_retry = config.eviction_max_retry
        on_failure = "TerminateJob"
    job_spec: Manifest = {
        "schedulerName": config.scheduler_name,
        "queue": _queue(spec, config),
        "minAvailable": spec.workers,
        "maxRetry": max_retry,
        "policies": [
            {"event": "PodEvicted", "action": "RestartJob"},
            {"event": "PodFailed", "action": on_failure},
        ],
        "plugins": plugins,
        "ttlSecondsAfterFinished": config.ttl_seconds_after_finished,
        "tasks": tasks,
    }
    if priority_class:
        job_spec["priorityClassName"] = priority_class
    return {
        "apiVersion": VOLCANO_JOB_API,
        "kind": "Job",
        "metadata": _metadata(spec, config, name, labels),
        "spec": job_spec,
    }


def notebook_job(
    spec: WorkloadSpec, config: KubernetesConfig, *, priority_class: str = ""
) -> Manifest:
    """One server in a one-task Volcano Job: it waits in its queue like any job, and comes
    back on another node after an eviction (the files live on the home claim)."""
    name = names.workload_name(spec.workload_id, spec.attempt)
    labels = workload_labels(spec, "notebook")
    container = _server_container(spec, config)
    job_spec: Manifest = {
        "schedulerName": config.scheduler_name,
        "queue": _queue(spec, config),
        "minAvailable": 1,
        "maxRetry": config.eviction_max_retry,
        "policies": [
            {"event": "PodEvicted", "action": "RestartJob"},
            # A server that crashes is Failed with its exit code, as on the local backend.
            {"event": "PodFailed", "action": "TerminateJob"},
        ],
        "ttlSecondsAfterFinished": config.ttl_seconds_after_finished,
        "tasks": [_task("notebook", 1, spec, config, labels, container)],
    }
    if priority_class:
        job_spec["priorityClassName"] = priority_class
    return {
        "apiVersion": VOLCANO_JOB_API,
        "kind": "Job",
        "metadata": _metadata(spec, config, name, labels),
        "spec": job_spec,
    }


def notebook_service(spec: WorkloadSpec, config: KubernetesConfig) -> Manifest:
    """What the portal's proxy connects to: port 80 of a ClusterIP Service."""
    name = names.workload_name(spec.workload_id, spec.attempt)
    labels = workload_labels(spec, "notebook")
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec, config, name, labels),
        "spec": {
            "type": "ClusterIP",
            "selector": _pod_selector(spec),
            "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def token_secret(spec: WorkloadSpec, config: KubernetesConfig, token: str) -> Manifest:
    """The server's token, out of the Job's spec (readable by fewer people than the Job)."""
    name = names.workload_name(spec.workload_id, spec.attempt)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(spec, config, f"{name}-token", workload_labels(spec, "notebook")),
        "type": "Opaque",
        "data": {TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }


def notebook_network_policy(spec: WorkloadSpec, config: KubernetesConfig) -> Manifest | None:
    """Only the portal may connect to a notebook (None when the portal's pods are unknown)."""
    if not (config.portal_namespace and config.portal_pod_labels):
        return None
    name = names.workload_name(spec.workload_id, spec.attempt)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(spec, config, name, workload_labels(spec, "notebook")),
        "spec": {
            "podSelector": {"matchLabels": _pod_selector(spec)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {
                                    "kubernetes.io/metadata.name": config.portal_namespace
                                }
                            },
                            "podSelector": {"matchLabels": dict(config.portal_pod_labels)},
                        }
                    ],
                    "ports": [{"port": config.notebook_port, "protocol": "TCP"}],
                }
            ],
        },
    }


# --- model serving ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplicaRange:
    """The replicas a model server may have: ``low`` may be 0 (scaled to zero)."""

    low: int
    high: int


def replica_range(spec: WorkloadSpec, config: KubernetesConfig) -> ReplicaRange:
    """From the ServingSpec; a serving workload without one (its command is the server) keeps
    ``workers`` … ``serving_max_replicas``."""
    if spec.serving is None:
        low = max(spec.workers, 1)
        return ReplicaRange(low, max(low, config.serving_max_replicas))
    low = max(spec.serving.min_replicas, 0)
    return ReplicaRange(low, max(spec.serving.max_replicas, low, 1))


def model_claim(storage_uri: str) -> tuple[str, str]:
    """``pvc://claim/path/in/it`` as (claim, path); ManifestError for anything else."""
    scheme, _, rest = storage_uri.partition("://")
    claim, _, path = rest.partition("/")
    if scheme != "pvc" or not claim:
        raise ManifestError(
            f"the model's files must be on a claim of the cluster (pvc://claim/path), "
            f"not {storage_uri or 'nowhere'!r}"
        )
    return claim, path.strip("/")


def _model_format(framework: str) -> str:
    """KServe's model format of a portal framework ("" for a custom container)."""
    if framework not in MODEL_FORMATS:
        known = ", ".join(sorted(MODEL_FORMATS))
        raise ManifestError(f"unknown model framework {framework!r} (known: {known})")
    return MODEL_FORMATS[framework]


def _serving_queue(spec: WorkloadSpec, config: KubernetesConfig) -> str:
    return names.queue_name(config.serving_queue or spec.queue or config.default_queue)


def _serving_env(spec: WorkloadSpec, config: KubernetesConfig) -> list[Manifest]:
    serving = spec.serving
    assert serving is not None
    env = [{"name": k, "value": str(v)} for k, v in sorted(spec.env.items())]
    env += [
        {"name": "QUANTA_WORKLOAD_ID", "value": spec.workload_id},
        {"name": "QUANTA_ATTEMPT", "value": str(spec.attempt)},
        {"name": "MODEL_NAME", "value": serving.model_name},
        {"name": "MODEL_DIR", "value": MODEL_MOUNT},
        {"name": "PROTOCOL", "value": "v2"},
        {"name": "PORT", "value": str(config.serving_port)},
    ]
    if spec.resources.gpu_milli:
        env += [
            {"name": "QUANTA_GPU_MILLI", "value": str(spec.resources.gpu_milli)},
            {"name": "QUANTA_GPU_MEMORY_MIB", "value": str(spec.resources.gpu_memory_mib)},
        ]
    return env


def _server_args(model_name: str, port: int) -> list[str]:
    """The arguments KServe's model servers (sklearnserver, …) take."""
    return [f"--model_name={model_name}", f"--model_dir={MODEL_MOUNT}", f"--http_port={port}"]


def _v2_ready_probe() -> Manifest:
    return {
        "httpGet": {"path": "/v2/health/ready", "port": "http"},
        "periodSeconds": 5,
        "failureThreshold": 3,
    }


def inference_service(
    spec: WorkloadSpec, config: KubernetesConfig, *, priority_class: str = ""
) -> Manifest:
    """A KServe InferenceService (serving.kserve.io/v1beta1): the predictor serves the model
    version's files (``storageUri``) over the Open Inference Protocol v2 in the runtime of its
    format, or the template's image for ``custom``; Knative scales it between min and max
    replicas on concurrent requests (to zero when the minimum is 0). Its pods carry the
    workload's labels, the queue annotation and ``schedulerName`` for Volcano, and the flavor's
    resources as any workload's pods do."""
    serving = spec.serving
    if serving is None:
        raise ManifestError("an InferenceService needs the model to serve (ServingSpec)")
    if not serving.model_name:
        raise ManifestError("a model server needs the model's name")
    model_format = _model_format(serving.framework)
    if model_format and not serving.storage_uri:
        raise ManifestError(
            "the model version has no files on this cluster (storage_uri, e.g. pvc://claim/path)"
        )
    name = names.workload_name(spec.workload_id, spec.attempt)
    labels = workload_labels(spec, "serving")
    replicas = replica_range(spec, config)
    resources = container_resources(spec.resources)
    env = _serving_env(spec, config)
    predictor: Manifest = {
        "minReplicas": replicas.low,
        "maxReplicas": replicas.high,
        "scaleMetric": "concurrency",
        "scaleTarget": max(serving.target_concurrency, 1),
        "schedulerName": config.scheduler_name,
        "labels": dict(labels),
        "annotations": {QUEUE_ANNOTATION: _serving_queue(spec, config)},
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
    }
    if model_format:
        predictor["model"] = {
            "modelFormat": {"name": model_format},
            "protocolVersion": "v2",
            "storageUri": serving.storage_uri,
            "env": env,
            "resources": resources,
        }
        if model_format == "sklearn":
            # KServe's sklearn runtime serves under the InferenceService's name; these are its
            # own arguments with the model's v2 name, so a client works as it does locally.
            # Named, so that KServe does not pick another runtime (MLServer) these would not
            # fit. (TorchServe and Triton take the name from the version's files.)
            predictor["model"]["runtime"] = SKLEARN_RUNTIME
            predictor["model"]["args"] = _server_args(serving.model_name, config.serving_port)
    else:
        if not spec.image:
            raise ManifestError("a custom model server needs a container image")
        if serving.storage_uri:
            # KServe's storage initializer fetches STORAGE_URI into /mnt/models for custom
            # containers too.
            env.append({"name": "STORAGE_URI", "value": serving.storage_uri})
        container: Manifest = {
            "name": KSERVE_CONTAINER,
            "image": spec.image,
            "imagePullPolicy": "IfNotPresent",
            "env": env,
            "ports": [{"containerPort": config.serving_port, "protocol": "TCP"}],
            "resources": resources,
            "readinessProbe": {
                **_v2_ready_probe(),
                "httpGet": {"path": "/v2/health/ready", "port": config.serving_port},
            },
        }
        if spec.command:
            container["command"] = list(spec.command)
        predictor["containers"] = [container]
    if spec.resources.gpus or spec.resources.gpu_milli:
        predictor["tolerations"] = [dict(t) for t in config.gpu_tolerations]
        affinity = _gpu_affinity(spec.resources, config)
        if affinity:
            predictor["affinity"] = affinity
    if priority_class:
        predictor["priorityClassName"] = priority_class
    if config.image_pull_secrets:
        predictor["imagePullSecrets"] = [{"name": s} for s in config.image_pull_secrets]
    metadata = _metadata(spec, config, name, labels)
    if replicas.low == 0:
        # Knative keeps the last pod this long after the traffic stops before going to zero.
        metadata["annotations"][SCALE_TO_ZERO_RETENTION] = f"{serving.scale_to_zero_after_s}s"
    return {
        "apiVersion": KSERVE_API,
        "kind": "InferenceService",
        "metadata": metadata,
        "spec": {"predictor": predictor},
    }


def serving_deployment(
    spec: WorkloadSpec, config: KubernetesConfig, *, priority_class: str = ""
) -> Manifest:
    """Replicas of a model server; Volcano schedules the pods in the serving queue.

    With a ServingSpec the container is a v2 model server (the template's image; its command,
    or the image's entrypoint given ``--model_name``, ``--model_dir`` and ``--http_port`` as
    KServe's servers take them) reading the version's files from their claim, mounted
    read-only at /mnt/models, and ready once ``/v2/health/ready`` answers. Without one the
    workload's command is the server."""
    name = names.workload_name(spec.workload_id, spec.attempt)
    labels = workload_labels(spec, "serving")
    port = config.serving_port
    replicas = replica_range(spec, config)
    if spec.serving is None:
        if not spec.command:
            raise ManifestError("a model server needs a command")
        container = _container(spec, config, command=list(spec.command), resources=spec.resources)
        container["env"].append({"name": "PORT", "value": str(port)})
        container["readinessProbe"] = {
            "tcpSocket": {"port": "http"},
            "periodSeconds": 5,
            "failureThreshold": 3,
        }
        container["ports"] = [{"name": "http", "containerPort": port, "protocol": "TCP"}]
        pod = _pod_spec(spec, config, container, restart_policy="Always")
    else:
        pod = _model_server_pod(spec, config)
    pod["schedulerName"] = config.scheduler_name
    if priority_class:
        pod["priorityClassName"] = priority_class
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(spec, config, name, labels),
        "spec": {
            # The HPA cannot go below 1: a minimum of 0 starts one replica, and only a
            # schedule's window closing scales the Deployment to 0 (KubernetesBackend.scale).
            "replicas": max(replicas.low, 1),
            "selector": {"matchLabels": _pod_selector(spec)},
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {QUEUE_ANNOTATION: _serving_queue(spec, config)},
                },
                "spec": pod,
            },
        },
    }


def _model_server_pod(spec: WorkloadSpec, config: KubernetesConfig) -> Manifest:
    serving = spec.serving
    assert serving is not None
    if not serving.model_name:
        raise ManifestError("a model server needs the model's name")
    model_format = _model_format(serving.framework)
    if not spec.image:
        raise ManifestError("no container image: the template's image has no registry reference")
    port = config.serving_port
    container: Manifest = {
        "name": CONTAINER,
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "env": _serving_env(spec, config),
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "resources": container_resources(spec.resources),
        "readinessProbe": _v2_ready_probe(),
    }
    if spec.command:
        container["command"] = list(spec.command)
    elif model_format:
        container["args"] = _server_args(serving.model_name, port)
    volumes: list[Manifest] = []
    mounts: list[Manifest] = []
    if serving.storage_uri or model_format:
        claim, path = model_claim(serving.storage_uri)
        volumes.append(
            {"name": "model", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
        )
        mount: Manifest = {"name": "model", "mountPath": MODEL_MOUNT, "readOnly": True}
        if path:
            mount["subPath"] = path
        mounts.append(mount)
    volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory"}})
    mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    container["volumeMounts"] = mounts
    pod: Manifest = {
        "restartPolicy": "Always",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [container],
        "volumes": volumes,
    }
    if spec.resources.gpus or spec.resources.gpu_milli:
        pod["tolerations"] = [dict(t) for t in config.gpu_tolerations]
        affinity = _gpu_affinity(spec.resources, config)
        if affinity:
            pod["affinity"] = affinity
    if config.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": s} for s in config.image_pull_secrets]
    return pod


def serving_service(spec: WorkloadSpec, config: KubernetesConfig) -> Manifest:
    name = names.workload_name(spec.workload_id, spec.attempt)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec, config, name, workload_labels(spec, "serving")),
        "spec": {
            "type": "ClusterIP",
            "selector": _pod_selector(spec),
            "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def serving_autoscaler(spec: WorkloadSpec, config: KubernetesConfig) -> Manifest:
    """Between the minimum (at least 1: an HPA does not scale to zero) and the maximum
    replicas on CPU load (concurrency or GPU metrics need a custom metrics adapter, which a
    campus cluster rarely has)."""
    name = names.workload_name(spec.workload_id, spec.attempt)
    replicas = replica_range(spec, config)
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _metadata(spec, config, name, workload_labels(spec, "serving")),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": max(replicas.low, 1),
            "maxReplicas": max(replicas.high, 1),
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 80},
                    },
                }
            ],
        },
    }


def stop_command(job: Mapping[str, Any]) -> Manifest:
    """A Volcano bus Command that terminates ``job``: its pods go, the Job stays (Terminated)
    until its TTL, so the portal still reads why it ended."""
    meta = job["metadata"]
    return {
        "apiVersion": VOLCANO_COMMAND_API,
        "kind": "Command",
        "metadata": {
            "name": f"{meta['name']}-stop",
            "namespace": meta["namespace"],
            "labels": {
                names.MANAGED_BY: names.MANAGER,
                **{k: v for k, v in meta.get("labels", {}).items() if k == names.WORKLOAD_ID},
            },
            "ownerReferences": [owner_reference(job, controller=True)],
        },
        "action": "TerminateJob",
        "reason": "StoppedByPortal",
        "message": "stopped through Quanta",
        "target": owner_reference(job, controller=True),
    }


def owner_reference(owner: Mapping[str, Any], *, controller: bool = False) -> Manifest:
    meta = owner["metadata"]
    reference: Manifest = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
    }
    if controller:
        reference["controller"] = True
    # No blockOwnerDeletion: it would need update rights on the owner's finalizers, and a
    # Service or Secret outliving its Job by a moment harms nobody.
    return reference


# --- cluster objects ------------------------------------------------------------------------------


def volcano_queue(queue: QueueSpec) -> Manifest:
    """A Volcano Queue: weight for the deserved share, capability as the hard cap."""
    spec: Manifest = {
        "weight": max(1, min(queue.weight, 65535)),
        "reclaimable": queue.reclaimable,
    }
    capability = _capability(queue.capability)
    if capability:
        spec["capability"] = capability
    if queue.parent:
        spec["parent"] = names.queue_name(queue.parent)
    return {
        "apiVersion": VOLCANO_QUEUE_API,
        "kind": "Queue",
        "metadata": {
            "name": names.queue_name(queue.name),
            "labels": {
                names.MANAGED_BY: names.MANAGER,
                names.QUEUE: names.label_value(queue.name),
            },
        },
        "spec": spec,
    }


def tenant_namespace(tenant: TenantSpec, config: KubernetesConfig) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": names.tenant_namespace(config.namespace_prefix, tenant.slug),
            "labels": {
                names.MANAGED_BY: names.MANAGER,
                names.TENANT: names.label_value(tenant.slug),
            },
        },
    }


def tenant_resource_quota(tenant: TenantSpec, config: KubernetesConfig) -> Manifest | None:
    """The tenant's own limits as a ResourceQuota (None: it has none).

    Closest, not exact: Kubernetes quotas are flat (a class's namespace does not count against
    its department's), and GPU-equivalents split in two: whole GPUs are capped at the integer
    part, vGPU shares at the equivalents × 100 % of compute. The portal's admission stays the
    precise check; this is the cluster's own backstop."""
    hard: dict[str, str] = {}
    if tenant.cpu_cores is not None:
        hard["requests.cpu"] = _quantity_cores(tenant.cpu_cores)
    if tenant.memory_mib is not None:
        hard["requests.memory"] = f"{tenant.memory_mib}Mi"
        hard["limits.memory"] = f"{tenant.memory_mib}Mi"
    if tenant.gpus is not None:
        hard[f"requests.{GPU}"] = str(int(tenant.gpus))
        hard[f"requests.{VGPU_CORES}"] = str(int(tenant.gpus * 100))
    if tenant.gpu_memory_mib is not None:
        hard[f"requests.{VGPU_MEMORY}"] = str(tenant.gpu_memory_mib)
    if tenant.environments is not None and tenant.jobs is not None:
        # Notebooks are Volcano Jobs too: one count covers both.
        hard["count/jobs.batch.volcano.sh"] = str(tenant.environments + tenant.jobs)
    if not hard:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": QUOTA_NAME,
            "namespace": names.tenant_namespace(config.namespace_prefix, tenant.slug),
            "labels": {
                names.MANAGED_BY: names.MANAGER,
                names.TENANT: names.label_value(tenant.slug),
            },
        },
        "spec": {"hard": hard},
    }


def home_claim(tenant: TenantSpec, config: KubernetesConfig) -> Manifest | None:
    """The shared home claim of a tenant namespace, when the cluster provisions it."""
    if not (config.storage_class and config.home_claim):
        return None
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": config.home_claim,
            "namespace": names.tenant_namespace(config.namespace_prefix, tenant.slug),
            "labels": {
                names.MANAGED_BY: names.MANAGER,
                names.TENANT: names.label_value(tenant.slug),
            },
        },
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": config.storage_class,
            "resources": {"requests": {"storage": config.home_size}},
        },
    }


def tenant_objects(tenant: TenantSpec, config: KubernetesConfig) -> list[Manifest]:
    objects = [tenant_namespace(tenant, config)]
    for extra in (tenant_resource_quota(tenant, config), home_claim(tenant, config)):
        if extra is not None:
            objects.append(extra)
    return objects


def priority_class(priority: PriorityClassSpec) -> Manifest:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {
            "name": names.priority_class_name(priority.name),
            "labels": {names.MANAGED_BY: names.MANAGER},
        },
        "value": priority.value,
        "preemptionPolicy": "PreemptLowerPriority" if priority.preempting else "Never",
        "description": priority.description or f"Quanta priority {priority.name}",
    }


# --- pieces ---------------------------------------------------------------------------------------


def workload_labels(spec: WorkloadSpec, component: str) -> dict[str, str]:
    labels = {
        names.MANAGED_BY: names.MANAGER,
        names.COMPONENT: component,
        names.APP_NAME: names.label_value(spec.app) or "command",
        names.WORKLOAD_ID: names.label_value(spec.workload_id),
        names.ATTEMPT: str(spec.attempt),
    }
    for key, value in spec.labels.items():
        if key.startswith(names.SPEC_LABEL_PREFIX) and key != "quanta.workload-id":
            short = names.label_value(key[len(names.SPEC_LABEL_PREFIX) :])
            labels.setdefault(f"quanta.io/{short}", names.label_value(str(value)))
    return labels


def _pod_selector(spec: WorkloadSpec) -> dict[str, str]:
    return {
        names.WORKLOAD_ID: names.label_value(spec.workload_id),
        names.ATTEMPT: str(spec.attempt),
    }


def _metadata(
    spec: WorkloadSpec, config: KubernetesConfig, name: str, labels: Mapping[str, str]
) -> Manifest:
    return {
        "name": name,
        "namespace": namespace_for(spec, config),
        "labels": dict(labels),
        "annotations": {names.OWNER: spec.owner},
    }


def _queue(spec: WorkloadSpec, config: KubernetesConfig) -> str:
    return names.queue_name(spec.queue or config.default_queue)


def _task(
    name: str,
    replicas: int,
    spec: WorkloadSpec,
    config: KubernetesConfig,
    labels: Mapping[str, str],
    container: Manifest,
    policies: Sequence[Manifest] = (),
    *,
    gpu: bool = True,
) -> Manifest:
    # Each task its own copy: a manifest shares no dicts (YAML anchors, accidental edits).
    pod = _pod_spec(spec, config, copy.deepcopy(container), restart_policy="Never", gpu=gpu)
    task: Manifest = {
        "name": name,
        "replicas": replicas,
        "template": {"metadata": {"labels": dict(labels)}, "spec": pod},
    }
    if policies:
        task["policies"] = [dict(p) for p in policies]
    return task


def _pod_spec(
    spec: WorkloadSpec,
    config: KubernetesConfig,
    container: Manifest,
    *,
    restart_policy: str,
    gpu: bool = True,
) -> Manifest:
    volumes, mounts = _volumes(spec, config)
    container = {**container, "volumeMounts": mounts} if mounts else container
    pod: Manifest = {
        "restartPolicy": restart_policy,
        # Workloads never talk to the API server, and a tenant namespace's Services must not
        # turn into hundreds of environment variables.
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [container],
    }
    if volumes:
        pod["volumes"] = volumes
    uses_gpu = gpu and bool(spec.resources.gpus or spec.resources.gpu_milli)
    if uses_gpu:
        pod["tolerations"] = [dict(t) for t in config.gpu_tolerations]
        affinity = _gpu_affinity(spec.resources, config)
        if affinity:
            pod["affinity"] = affinity
    if config.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": s} for s in config.image_pull_secrets]
    return pod


def _gpu_affinity(resources: Resources, config: KubernetesConfig) -> Manifest | None:
    if not resources.gpu_models:
        return None
    products = []
    for model in resources.gpu_models:
        product = config.gpu_product(model)
        if product is None:
            known = ", ".join(sorted(config.gpu_products)) or "none"
            raise ManifestError(
                f"GPU model {model!r} is not known on this cluster (known: {known})"
            )
        products.append(names.label_value(product))
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": config.gpu_product_label,
                                "operator": "In",
                                "values": sorted(set(products)),
                            }
                        ]
                    }
                ]
            }
        }
    }


def _volumes(spec: WorkloadSpec, config: KubernetesConfig) -> tuple[list[Manifest], list[Manifest]]:
    volumes: list[Manifest] = []
    mounts: list[Manifest] = []
    if config.home_claim:
        volumes.append({"name": "home", "persistentVolumeClaim": {"claimName": config.home_claim}})
        mounts.append(
            {
                "name": "home",
                "mountPath": config.home_mount_path,
                "subPath": names.label_value(spec.owner) or "nobody",
            }
        )
    for index, dataset in enumerate(config.datasets):
        volume = f"dataset-{index}"
        volumes.append(
            {
                "name": volume,
                "persistentVolumeClaim": {
                    "claimName": dataset.claim,
                    "readOnly": dataset.read_only,
                },
            }
        )
        mounts.append(
            {"name": volume, "mountPath": dataset.mount_path, "readOnly": dataset.read_only}
        )
    # The portal's datasets chosen for this workload: each a claim, always read-only.
    for index, granted in enumerate(spec.datasets):
        if not granted.claim:
            raise ManifestError(
                f"the dataset {granted.name} has no claim on this cluster: an admin sets its "
                "Kubernetes claim first"
            )
        volume = f"granted-{index}"
        claim = {"claimName": granted.claim, "readOnly": True}
        volumes.append({"name": volume, "persistentVolumeClaim": claim})
        mount = {"name": volume, "mountPath": granted.target, "readOnly": True}
        if granted.sub_path:
            mount["subPath"] = granted.sub_path
        mounts.append(mount)
    # Shared memory for data loaders: the container runtime's 64 MiB default breaks PyTorch.
    volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory"}})
    mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    return volumes, mounts


def _container(
    spec: WorkloadSpec,
    config: KubernetesConfig,
    *,
    command: list[str] | None,
    resources: Resources,
) -> Manifest:
    if not spec.image:
        raise ManifestError("no container image: the template's image has no registry reference")
    env = [{"name": k, "value": str(v)} for k, v in sorted(spec.env.items())]
    env += [
        {"name": "HOME", "value": config.home_mount_path},
        {"name": "QUANTA_WORKLOAD_ID", "value": spec.workload_id},
        {"name": "QUANTA_ATTEMPT", "value": str(spec.attempt)},
    ]
    if resources.gpu_milli:
        env += [
            {"name": "QUANTA_GPU_MILLI", "value": str(resources.gpu_milli)},
            {"name": "QUANTA_GPU_MEMORY_MIB", "value": str(resources.gpu_memory_mib)},
        ]
    container: Manifest = {
        "name": CONTAINER,
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "env": env,
        "workingDir": config.home_mount_path,
        "resources": container_resources(resources),
    }
    if command:
        container["command"] = command
    return container


def container_resources(resources: Resources) -> Manifest:
    """Requests as the flavor says; memory and accelerators also as limits (extended
    resources must have limits equal to requests). No CPU limit: throttling an interactive
    session helps nobody, and quotas count requests."""
    if resources.gpus and resources.gpu_milli:
        raise ManifestError("a flavor has either whole GPUs or a share of one, not both")
    requests: dict[str, str] = {
        "cpu": f"{resources.cpu_milli}m",
        "memory": f"{resources.memory_mib}Mi",
    }
    limits: dict[str, str] = {"memory": f"{resources.memory_mib}Mi"}
    if resources.gpus:
        limits[GPU] = requests[GPU] = str(resources.gpus)
    elif resources.gpu_milli:
        if not 0 < resources.gpu_milli < 1000:
            raise ManifestError("a GPU share is between 1 and 999 thousandths")
        share = {
            VGPU_NUMBER: "1",
            VGPU_CORES: str(max(1, resources.gpu_milli // 10)),
        }
        if resources.gpu_memory_mib:
            share[VGPU_MEMORY] = str(resources.gpu_memory_mib)
        requests.update(share)
        limits.update(share)
    return {"requests": requests, "limits": limits}


def _server_container(spec: WorkloadSpec, config: KubernetesConfig) -> Manifest:
    """The notebook or IDE server, listening on ``notebook_port`` under the proxy's path."""
    if spec.app not in NOTEBOOK_APPS:
        raise ManifestError(f"the Kubernetes backend cannot run the app {spec.app!r}")
    port = config.notebook_port
    base = "/" + spec.base_url.strip("/") + "/" if spec.base_url.strip("/") else "/"
    if spec.app in ROOT_SERVED_APPS:
        base = "/"
    home = config.home_mount_path
    command: list[str] | None
    ready: Manifest
    if spec.app in ("jupyter", "terminal"):
        command = [
            "jupyter", "lab", "--ip=0.0.0.0", f"--port={port}", "--no-browser",
            f"--ServerApp.base_url={base}", f"--ServerApp.root_dir={home}",
            "--ServerApp.allow_remote_access=True", "--ServerApp.quit_button=False",
        ]  # fmt: skip
        ready = {"httpGet": {"path": f"{base}api", "port": "http"}}  # answers without a token
    elif spec.app == "tensorboard":
        command = [
            "tensorboard", "--logdir", home, "--host", "0.0.0.0", "--port", str(port),
            "--path_prefix", base.rstrip("/"),
        ]  # fmt: skip
        ready = {"httpGet": {"path": base, "port": "http"}}
    elif spec.app == "vscode":
        # Served at "/": the proxy drops the /nb/<id> prefix (code-server's URLs are
        # relative). No password of its own: the portal's proxy (and the NetworkPolicy) are
        # the gate.
        command = [
            "code-server", "--bind-addr", f"0.0.0.0:{port}", "--auth", "none",
            "--disable-telemetry", "--disable-update-check", "--disable-workspace-trust", home,
        ]  # fmt: skip
        ready = {"httpGet": {"path": "/healthz", "port": "http"}}
    else:  # a desktop image serving noVNC at "/" (websockify at /websockify): its entrypoint
        command = None
        ready = {"tcpSocket": {"port": "http"}}
    container = _container(spec, config, command=command, resources=spec.resources)
    if spec.app in ("desktop", "pycharm-desktop"):
        # The image's entrypoint starts this program in the desktop (PyCharm: the image's own
        # launcher unless the template names one).
        program = " ".join(spec.program) or ("pycharm" if spec.app == "pycharm-desktop" else "")
        if not program:
            raise ManifestError("the desktop template names no program to start")
        container["env"].append({"name": "QUANTA_DESKTOP_PROGRAM", "value": program})
    container["env"] += [
        {"name": "QUANTA_BASE_URL", "value": base},
        {"name": "QUANTA_PORT", "value": str(port)},
        {
            "name": "JUPYTER_TOKEN",
            "valueFrom": {
                "secretKeyRef": {
                    "name": names.workload_name(spec.workload_id, spec.attempt) + "-token",
                    "key": TOKEN_KEY,
                }
            },
        },
    ]
    container["ports"] = [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    container["readinessProbe"] = {**ready, "periodSeconds": 2, "failureThreshold": 3}
    return container


def _capability(capability: Mapping[str, int]) -> dict[str, str]:
    """Portal capability keys (gpus, cpu_milli, memory_mib, gpu_memory_mib) as resources."""
    out: dict[str, str] = {}
    for key, value in capability.items():
        if key == "gpus":
            out[GPU] = str(int(value))
        elif key == "cpu_milli":
            out["cpu"] = f"{int(value)}m"
        elif key == "memory_mib":
            out["memory"] = f"{int(value)}Mi"
        elif key == "gpu_memory_mib":
            out[VGPU_MEMORY] = str(int(value))
        else:
            raise ManifestError(f"unknown queue capability {key!r}")
    return out


def _quantity_cores(cores: Decimal) -> str:
    milli = int(cores * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"
