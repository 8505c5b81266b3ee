"""The keys of ``Cluster.config`` the Kubernetes backend reads, with their defaults.

Parsed once when the backend is built; an unknown key or a value of the wrong type fails there,
loudly, rather than as a puzzling manifest at the first submit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Keys other parts of the portal keep in the same JSON (e.g. the local backend's overcommit).
SHARED_KEYS = frozenset({"cpu_overcommit"})

DEFAULT_GPU_TOLERATIONS: tuple[Mapping[str, str], ...] = (
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
)


@dataclass(frozen=True)
class Dataset:
    """A read-only (by default) claim mounted into every workload of the cluster."""

    claim: str
    mount_path: str
    read_only: bool = True


@dataclass(frozen=True)
class KubernetesConfig:
    # How to reach the API server: a kubeconfig (path and context), the pod's service account
    # (in_cluster), or a plain URL (``host``, with an optional bearer token file).
    kubeconfig: str = ""
    context: str = ""
    in_cluster: bool = False
    host: str = ""
    token_file: str = ""
    ca_file: str = ""
    verify_ssl: bool = True

    # Where workloads go.
    namespace_prefix: str = "quanta-"
    default_queue: str = "default"
    scheduler_name: str = "volcano"
    image_pull_secrets: tuple[str, ...] = ()

    # Storage: a ReadWriteMany claim of that name in every tenant namespace, mounted at
    # ``home_mount_path`` with the owner's username as sub-path. With ``storage_class`` the
    # namespace sync creates the claim; without it the claim must exist (or homes are empty).
    home_claim: str = "quanta-home"
    home_mount_path: str = "/home/quanta"
    storage_class: str = ""
    home_size: str = "100Gi"
    datasets: tuple[Dataset, ...] = ()

    # GPUs: the portal's model names -> the value of the nvidia.com/gpu.product node label.
    # Empty: the portal uses the product labels themselves as model names.
    gpu_products: Mapping[str, str] = field(default_factory=dict)
    gpu_product_label: str = "nvidia.com/gpu.product"
    gpu_memory_label: str = "nvidia.com/gpu.memory"
    gpu_tolerations: tuple[Mapping[str, str], ...] = DEFAULT_GPU_TOLERATIONS

    # Lifecycle. A failed job is retried by the portal (a new attempt, visible and metered as
    # such: "portal") or restarted in place by Volcano up to its max_retries ("volcano"; then
    # the portal must not retry it again, see KubernetesBackend.restarts_failed_jobs).
    # Evicted pods (preemption, reclaim, node pressure) restart the whole job in place, at most
    # eviction_max_retry times.
    ttl_seconds_after_finished: int = 86_400
    retries_by: str = "portal"
    eviction_max_retry: int = 3
    image_pull_grace_seconds: int = 300
    stop_with: str = "command"  # Volcano Jobs: "command" (bus TerminateJob) or "delete"

    # Notebooks and serving.
    notebook_port: int = 8888
    # The desktop images start PyCharm (QUANTA_DESKTOP_PROGRAM=pycharm). False: PyCharm
    # templates are not offered on this cluster, and the admin catalog says why.
    pycharm_in_image: bool = True
    serving_port: int = 8080
    serving_max_replicas: int = 4
    # Model servers: a KServe InferenceService ("kserve", where the cluster runs KServe) or a
    # Deployment + Service + HorizontalPodAutoscaler ("deployment", any cluster).
    serving: str = "deployment"
    # The Volcano queue of model servers ("": the tenant's queue, as for every workload). A
    # queue of their own (not reclaimable) lets night-time training borrow what serving gives
    # back and lets serving take it back in the morning (docs/kubernetes.md, 昼推夜训).
    serving_queue: str = ""
    service_url: str = "http://{service}.{namespace}.svc:{port}"
    portal_namespace: str = ""  # with portal_pod_labels: notebooks accept traffic only from it
    portal_pod_labels: Mapping[str, str] = field(default_factory=dict)

    # GPU utilisation: the DCGM exporter's series through Prometheus's HTTP API at this
    # address ("": PROMETHEUS_URL; neither: no reading). The series' node label is the first
    # of these that a series carries (DCGM's own is "Hostname"; relabelled setups add "node").
    prometheus_url: str = ""
    prometheus_node_labels: tuple[str, ...] = ("node", "kubernetes_node", "Hostname")
    prometheus_timeout: float = 5.0
    # JupyterLab's own /api/status (its last kernel / terminal activity) is read this often
    # per running notebook (idle culling); 0: never.
    activity_poll_seconds: float = 60.0

    # Talking to the API server.
    request_timeout: float = 30.0
    retries: int = 5
    backoff_seconds: float = 0.5
    max_backoff_seconds: float = 10.0
    watch_timeout_seconds: int = 240
    max_reconnects: int = 5
    page_size: int = 500

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> KubernetesConfig:
        """Build from ``Cluster.config``; unknown keys and wrong types raise ValueError."""
        raw = dict(raw or {})
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - set(known) - SHARED_KEYS)
        if unknown:
            raise ValueError(f"unknown Kubernetes cluster setting(s): {', '.join(unknown)}")
        values: dict[str, Any] = {}
        for name, value in raw.items():
            if name in SHARED_KEYS:
                continue
            values[name] = _coerce(name, value, getattr(cls(), name))
        config = cls(**values)
        if config.stop_with not in ("command", "delete"):
            raise ValueError('stop_with must be "command" or "delete"')
        if config.serving not in ("kserve", "deployment"):
            raise ValueError('serving must be "kserve" or "deployment"')
        if config.retries_by not in ("portal", "volcano"):
            raise ValueError('retries_by must be "portal" or "volcano"')
        if sum(bool(x) for x in (config.kubeconfig, config.in_cluster, config.host)) > 1:
            raise ValueError("give one of kubeconfig, in_cluster and host")
        return config

    def gpu_product(self, model: str) -> str | None:
        """The product label value of a portal GPU model; None if the mapping does not know it."""
        if not self.gpu_products:
            return model
        return self.gpu_products.get(model)

    def gpu_model(self, product: str) -> str:
        """The portal's model name for a node's product label (the label itself if unmapped)."""
        for model, known in self.gpu_products.items():
            if known == product:
                return model
        return product


def _coerce(name: str, value: Any, default: Any) -> Any:
    if name == "datasets":
        if not isinstance(value, list):
            raise ValueError("datasets must be a list of {claim, mount_path, read_only}")
        return tuple(Dataset(**item) for item in value)
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false")
        return value
    if isinstance(default, int | float) and not isinstance(default, bool):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{name} must be a number")
        return type(default)(value)
    if isinstance(default, str):
        if not isinstance(value, str):
            raise ValueError(f"{name} must be a string")
        return value
    if isinstance(default, tuple):
        if not isinstance(value, list):
            raise ValueError(f"{name} must be a list")
        return tuple(value)
    if isinstance(default, Mapping):
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise ValueError(f"{name} must be an object of strings")
        return dict(value)
    raise ValueError(f"{name}: unsupported value")  # pragma: no cover
