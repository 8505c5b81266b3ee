"""One backend instance per cluster, built from the cluster's row. Each backend's module is
imported when a cluster first needs it (the Kubernetes client is heavy, and a portal with
only local clusters never loads it)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings

from scheduling.backends.base import Backend, GpuInfo
from scheduling.choices import BackendKind

if TYPE_CHECKING:
    from scheduling.models import Cluster

_lock = threading.Lock()
_backends: dict[tuple[int, str, str], Backend] = {}


def get_backend(cluster: Cluster) -> Backend:
    """The backend of ``cluster``, built once per configuration."""
    key = (cluster.pk, cluster.backend, json.dumps(cluster.config, sort_keys=True))
    with _lock:
        backend = _backends.get(key)
        if backend is None:
            backend = _backends[key] = _build(cluster)
    return backend


def _build(cluster: Cluster) -> Backend:
    config: dict[str, Any] = cluster.config or {}
    if cluster.backend == BackendKind.LOCAL:
        from scheduling.backends.local import (
            DEFAULT_STARTUP_BOOST_SECONDS,
            DEFAULT_STARTUP_CPU_MILLI,
            LocalBackend,
        )

        gpus = config.get("gpus")
        return LocalBackend(
            settings.DATA_DIR / "workloads" / cluster.slug,
            node_name=config.get("node_name"),
            gpus=None if gpus is None else [GpuInfo(**gpu) for gpu in gpus],
            cpu_milli=config.get("cpu_milli"),
            memory_mib=config.get("memory_mib"),
            sandbox=settings.LOCAL_SANDBOX,
            sandbox_network=settings.LOCAL_SANDBOX_NETWORK,
            pids_max=settings.LOCAL_SANDBOX_PIDS_MAX,
            cgroup_parent=settings.LOCAL_CGROUP_PARENT or None,
            readonly_paths=[
                *(Path(path) for path in settings.LOCAL_READONLY_PATHS),
                *(Path(path) for path in config.get("readonly_paths") or ()),
            ],
            code_server=settings.CODE_SERVER_BIN,
            novnc_dir=settings.NOVNC_DIR,
            pycharm_home=settings.PYCHARM_HOME,
            serving_python=settings.SERVING_PYTHON,
            warm_kernel=bool(config.get("warm_kernel", True)),
            startup_cpu_milli=int(config.get("startup_cpu_milli", DEFAULT_STARTUP_CPU_MILLI)),
            startup_boost_seconds=float(
                config.get("startup_boost_seconds", DEFAULT_STARTUP_BOOST_SECONDS)
            ),
        )
    if cluster.backend == BackendKind.SIMULATED:
        from scheduling.backends.simulated import DEFAULT_MIX, SimulatedBackend

        return SimulatedBackend(
            settings.DATA_DIR / "simulated" / cluster.slug,
            nodes_csv=config.get("nodes_csv"),
            mix=config.get("mix") or DEFAULT_MIX,
            speedup=float(config.get("speedup", 60)),
            default_duration_s=float(config.get("default_duration_s", 3600)),
        )
    if cluster.backend == BackendKind.KUBERNETES:
        from scheduling.backends.kubernetes import KubernetesBackend, KubernetesConfig

        return KubernetesBackend(
            KubernetesConfig.from_mapping({"prometheus_url": settings.PROMETHEUS_URL, **config})
        )
    raise NotImplementedError(f"the {cluster.backend} backend is not built yet")


def forget() -> None:
    """Drop built backends (tests change configurations)."""
    with _lock:
        _backends.clear()
