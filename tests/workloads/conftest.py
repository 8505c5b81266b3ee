"""The catalog of the workload tests: one local cluster with a node of 16 cores and two
GPUs, flavors, a JupyterLab template granted to class A, and a fake backend."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from scheduling.backends import registry
from scheduling.inventory import sync_backend_nodes
from scheduling.models import Cluster, GpuDevice, Node
from tests.workloads.fakes import FakeBackend
from workloads import reconcile
from workloads.models import AppTemplate, Flavor, Grant, Image, Workload


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeBackend]:
    fake = FakeBackend()
    registry.forget()
    monkeypatch.setattr(registry, "_build", lambda cluster: fake)
    yield fake
    registry.forget()


class Catalog:
    def __init__(self, world: Any) -> None:
        self.cluster = Cluster.objects.create(
            name="Lab", slug="lab", backend="local", is_default=True
        )
        self.node = Node.objects.create(
            cluster=self.cluster, name="gpu-host", cpu_milli=16000, memory_mib=65536
        )
        self.gpus = [
            GpuDevice.objects.create(node=self.node, index=i, model="A100", memory_mib=40960)
            for i in range(2)
        ]
        self.image = Image.objects.create(
            name="PyTorch", slug="pytorch", registry_ref="quanta/pytorch:2"
        )
        self.small = Flavor.objects.create(
            name="small", slug="small", cpu_milli=1000, memory_mib=2048
        )
        self.gpu = Flavor.objects.create(
            name="1 GPU", slug="gpu", cpu_milli=2000, memory_mib=8192, gpus=1
        )
        self.half = Flavor.objects.create(
            name="half GPU",
            slug="half",
            cpu_milli=1000,
            memory_mib=4096,
            gpu_milli=500,
            gpu_memory_mib=20000,
        )
        self.huge = Flavor.objects.create(
            name="huge", slug="huge", cpu_milli=64000, memory_mib=4096
        )
        self.jupyter = AppTemplate.objects.create(
            name="JupyterLab",
            slug="jupyter",
            kind="jupyter",
            image=self.image,
            default_flavor=self.small,
        )
        self.jupyter.allowed_flavors.set([self.small, self.gpu, self.half, self.huge])
        self.grant = Grant.objects.create(
            template=self.jupyter, tenant=world.class_a, created_by=world.alice, member_limit=3
        )
        self.grant.flavors.set([self.small, self.gpu, self.half, self.huge])


@pytest.fixture
def catalog(world: Any) -> Catalog:
    return Catalog(world)


def local_catalog(world: Any, kind: str = "jupyter") -> tuple[Cluster, AppTemplate, Flavor]:
    """This host as a cluster (real local backend), one small flavor and a template of
    ``kind`` granted to class A: for the tests that run real processes."""

    cluster = Cluster.objects.create(
        name="This host",
        slug="host",
        backend="local",
        is_default=True,
        config={"cpu_overcommit": 4},
    )
    sync_backend_nodes(cluster)
    image = Image.objects.create(name="Python", slug="py")
    flavor = Flavor.objects.create(name="small", slug="small", cpu_milli=500, memory_mib=512)
    template = AppTemplate.objects.create(
        name=kind, slug=kind, kind=kind, image=image, default_flavor=flavor
    )
    template.allowed_flavors.set([flavor])
    grant = Grant.objects.create(template=template, tenant=world.class_a)
    grant.flavors.set([flavor])
    return cluster, template, flavor


@pytest.fixture
def run(django_capture_on_commit_callbacks: Any) -> Any:
    """Run a service call and what it queues after commit (admit, submit, stop), as a real
    commit would; a workload it returns is read again."""

    def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
        with django_capture_on_commit_callbacks(execute=True):
            result = fn(*args, **kwargs)
        if isinstance(result, Workload):
            result.refresh_from_db()
        return result

    return call


def wait_for(cluster: Cluster, workload: Workload, state: str, timeout: float = 30) -> Workload:
    """Reconcile ``cluster`` until ``workload`` is in ``state`` (real processes take a while)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reconcile.reconcile(cluster)
        workload.refresh_from_db()
        if workload.state == state:
            return workload
        time.sleep(0.2)
    raise AssertionError(f"still {workload.state}: {workload.reason}")
