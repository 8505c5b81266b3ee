"""Fixtures: an emulated API server per test, a backend talking to it, and workload specs."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from scheduling.backends.base import Resources, WorkloadSpec
from scheduling.backends.kubernetes import KubernetesBackend, KubernetesConfig
from scheduling.backends.kubernetes import client as k
from tests.scheduling.kubernetes.emulator import ApiServer

TENANT = "ml-101"
NAMESPACE = "quanta-ml-101"


@pytest.fixture
def api() -> Iterator[ApiServer]:
    """A fresh API server with the tenant's namespace (as the periodic sync makes it)."""
    with ApiServer() as server:
        server.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        yield server


@pytest.fixture
def sleeps() -> list[float]:
    """The backoff delays the client asked for, instead of sleeping them."""
    return []


@pytest.fixture
def settings_for(api: ApiServer) -> Callable[..., KubernetesConfig]:
    def make(**overrides: Any) -> KubernetesConfig:
        raw: dict[str, Any] = {
            "host": api.url,
            "backoff_seconds": 0.01,
            "max_backoff_seconds": 0.05,
            "retries": 3,
            "request_timeout": 5,
            "watch_timeout_seconds": 5,
            "max_reconnects": 3,
        }
        raw.update(overrides)
        return KubernetesConfig.from_mapping(raw)

    return make


@pytest.fixture
def make_backend(
    settings_for: Callable[..., KubernetesConfig], sleeps: list[float]
) -> Callable[..., KubernetesBackend]:
    def make(**overrides: Any) -> KubernetesBackend:
        config = settings_for(**overrides)
        kube = k.Kube(k.api_client(config), config, sleep=sleeps.append)
        return KubernetesBackend(config, kube=kube)

    return make


@pytest.fixture
def backend(make_backend: Callable[..., KubernetesBackend]) -> KubernetesBackend:
    return make_backend()


def spec(kind: str = "job", **fields: Any) -> WorkloadSpec:
    """A workload of tenant ml-101 with what each test does not care about filled in."""
    workload_id = fields.pop("workload_id", None) or str(uuid.uuid4())
    defaults: dict[str, Any] = {
        "app": {"job": "command", "notebook": "jupyter", "serving": "command"}[kind],
        "owner": "bob",
        "image": "quanta/pytorch:2.13-cuda12.4",
        "command": ("python", "train.py") if kind != "notebook" else (),
        "base_url": f"/nb/{workload_id}/",
        "labels": {"quanta.workload-id": workload_id, "quanta.tenant": TENANT},
        "resources": Resources(cpu_milli=2000, memory_mib=4096),
    }
    defaults.update(fields)
    return WorkloadSpec(workload_id=workload_id, kind=kind, **defaults)


def with_gpus(base: WorkloadSpec, **resources: Any) -> WorkloadSpec:
    return dataclasses.replace(base, resources=dataclasses.replace(base.resources, **resources))
