"""Work on the simulated GPU farm goes through the same admission and lifecycle."""

from __future__ import annotations

import pytest

from scheduling.backends import registry
from scheduling.inventory import sync_backend_nodes
from scheduling.models import Allocation, Cluster, GpuDevice
from workloads import reconcile, services
from workloads.choices import State
from workloads.models import AppTemplate, Flavor, Grant, Image

pytestmark = pytest.mark.django_db


@pytest.fixture
def farm(world, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    registry.forget()
    cluster = Cluster.objects.create(
        name="GPU farm",
        slug="sim",
        backend="simulated",
        placement_policy="fgd-cpu",
        config={"speedup": 1_000_000},
    )
    sync_backend_nodes(cluster)
    image = Image.objects.create(name="PyTorch", slug="pt")
    v100x4 = Flavor.objects.create(
        name="4 × V100",
        slug="v100x4",
        cpu_milli=16000,
        memory_mib=65536,
        gpus=4,
        gpu_models=["V100M32"],
    )
    template = AppTemplate.objects.create(
        name="Lab", slug="lab", kind="jupyter", image=image, default_flavor=v100x4
    )
    template.allowed_flavors.set([v100x4])
    grant = Grant.objects.create(
        template=template, tenant=world.class_a, cluster=cluster, member_limit=2
    )
    grant.flavors.set([v100x4])
    yield cluster, v100x4, template
    registry.forget()


def test_the_farm_has_sixteen_nodes_of_eight_gpus(farm) -> None:
    cluster, _, _ = farm
    assert cluster.nodes.count() == 16
    assert GpuDevice.objects.filter(node__cluster=cluster).count() == 128
    assert str(cluster) == "GPU farm (simulated)"


def test_a_distributed_job_runs_its_simulated_time_on_the_right_gpus(
    world, farm, django_capture_on_commit_callbacks
) -> None:
    cluster, v100x4, _ = farm
    with django_capture_on_commit_callbacks(execute=True):
        job = services.submit_job(
            actor=world.bob,
            tenant=world.class_a,
            flavor=v100x4,
            command="python train.py",
            workers=2,
            env={"QUANTA_SIM_DURATION": "60"},
        )
    job.refresh_from_db()
    assert job.state == State.STARTING
    models = set(Allocation.objects.filter(workload=job).values_list("device__model", flat=True))
    assert models == {"V100M32"}
    assert Allocation.objects.filter(workload=job).count() == 8
    reconcile.reconcile(cluster)
    job.refresh_from_db()
    assert job.state == State.SUCCEEDED and "simulated" in job.reason
    assert not Allocation.objects.filter(workload=job).exists()


def test_a_simulated_environment_has_nothing_to_open(
    world, farm, api, django_capture_on_commit_callbacks
) -> None:
    cluster, _, template = farm
    with django_capture_on_commit_callbacks(execute=True):
        workload = services.launch_environment(actor=world.bob, template=template)
    reconcile.reconcile(cluster)
    body = api(world.bob).get(f"/api/v1/workloads/{workload.pk}/").json()
    assert body["state"] == "Running" and body["open_url"] is None
    assert body["cluster"] == "sim"


def test_a_resync_keeps_admin_cordons_and_writes_nothing_when_nothing_changed(
    farm, django_assert_max_num_queries
) -> None:
    cluster, _, _ = farm
    node = cluster.nodes.first()
    node.cordoned = True
    node.taints = [{"key": "maintenance", "effect": "NoSchedule"}]
    node.save()
    with django_assert_max_num_queries(6):  # two reads and no writes, whatever the size
        sync_backend_nodes(cluster)
    node.refresh_from_db()
    assert node.cordoned and node.taints[0]["key"] == "maintenance"
