"""Cluster.config for Kubernetes: read once, refused loudly when wrong."""

from __future__ import annotations

import pytest

from scheduling.backends import registry
from scheduling.backends.base import BackendError
from scheduling.backends.kubernetes import KubernetesBackend, KubernetesConfig
from scheduling.models import Cluster


def test_settings_are_read_with_their_types() -> None:
    config = KubernetesConfig.from_mapping(
        {
            "kubeconfig": "/etc/quanta/kubeconfig",
            "context": "campus",
            "retries": 2,
            "backoff_seconds": 1,
            "datasets": [{"claim": "imagenet", "mount_path": "/data/imagenet"}],
            "gpu_products": {"A100": "NVIDIA-A100-SXM4-80GB"},
            "cpu_overcommit": 4,  # the inventory's, shared with other backends
        }
    )
    assert (config.retries, config.backoff_seconds) == (2, 1.0)
    assert config.datasets[0].read_only
    assert config.gpu_product("A100") == "NVIDIA-A100-SXM4-80GB"
    assert config.gpu_product("K80") is None
    assert config.gpu_model("NVIDIA-A100-SXM4-80GB") == "A100"
    assert KubernetesConfig().gpu_product("K80") == "K80"  # no mapping: labels are the names


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"namespace_prefx": "q-"}, "unknown Kubernetes cluster setting"),
        ({"retries": "five"}, "retries must be a number"),
        ({"in_cluster": "yes"}, "in_cluster must be true or false"),
        ({"stop_with": "kill"}, "stop_with must be"),
        ({"in_cluster": True, "host": "https://k8s:6443"}, "give one of"),
    ],
)
def test_a_wrong_setting_fails_when_the_backend_is_built(raw: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KubernetesConfig.from_mapping(raw)


@pytest.mark.django_db
def test_the_registry_builds_a_kubernetes_backend_that_connects_on_first_use() -> None:
    cluster = Cluster.objects.create(
        name="Campus",
        slug="campus",
        backend="kubernetes",
        config={"kubeconfig": "/nonexistent/kubeconfig", "retries": 0},
    )
    try:
        backend = registry.get_backend(cluster)
        assert isinstance(backend, KubernetesBackend)
        with pytest.raises(BackendError, match="cannot load the cluster's credentials") as caught:
            backend.running()
        assert caught.value.transient
    finally:
        registry.forget()
