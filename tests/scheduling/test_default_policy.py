"""A new cluster's placement policy is "auto": fgd-mix where GPUs are shared, else binpack.

fgd-mix strands the fewest GPUs on every openb workload family (bench/scheduling.md); on
whole-GPU clusters there is nothing to fragment and binpack (Volcano's order) stays.
"""

from __future__ import annotations

import io

import pytest
import yaml
from django.core.management import call_command

from scheduling.backends.kubernetes.schedulerconf import scheduler_config
from scheduling.choices import BackendKind, GpuSharing, PlacementPolicy
from scheduling.inventory import free_nodes
from scheduling.models import Cluster, GpuDevice, Node
from scheduling.placement import FreeDevice, FreeNode, resolve_policy


def free_node(*sharing: str) -> FreeNode:
    devices = [FreeDevice(i, i, "A100", 40_960, 1000, 40_960, s) for i, s in enumerate(sharing)]
    return FreeNode(1, "gpu-1", 64_000, 256_000, 64_000, 256_000, devices=devices)


def test_auto_is_fgd_mix_where_some_gpu_is_shared() -> None:
    nodes = [free_node(GpuSharing.EXCLUSIVE), free_node(GpuSharing.FRACTIONAL)]
    assert resolve_policy("auto", nodes) == "fgd-mix"


def test_auto_is_binpack_where_every_gpu_is_whole_or_there_are_none() -> None:
    assert resolve_policy("auto", [free_node(GpuSharing.EXCLUSIVE, GpuSharing.MIG)]) == "binpack"
    assert resolve_policy("auto", [free_node()]) == "binpack"


def test_a_chosen_policy_is_kept() -> None:
    assert resolve_policy("spread", [free_node(GpuSharing.FRACTIONAL)]) == "spread"


def make_cluster(slug: str, sharing: str, **fields: str) -> Cluster:
    cluster = Cluster.objects.create(name=slug, slug=slug, backend=BackendKind.KUBERNETES, **fields)
    node = Node.objects.create(cluster=cluster, name=f"{slug}-1", cpu_milli=8000, memory_mib=8192)
    GpuDevice.objects.create(node=node, index=0, model="A100", memory_mib=40_960, sharing=sharing)
    return cluster


@pytest.mark.django_db
def test_a_new_cluster_defaults_to_auto_and_resolves_against_its_inventory() -> None:
    shared = make_cluster("shared", GpuSharing.FRACTIONAL)
    whole = make_cluster("whole", GpuSharing.EXCLUSIVE)
    assert shared.placement_policy == PlacementPolicy.AUTO
    assert shared.resolved_placement_policy() == "fgd-mix"
    assert whole.resolved_placement_policy() == "binpack"
    # Admission's view carries the sharing mode, so it resolves the same without a query.
    assert resolve_policy(shared.placement_policy, free_nodes(shared, lock=False)) == "fgd-mix"
    assert resolve_policy(whole.placement_policy, free_nodes(whole, lock=False)) == "binpack"
    # A node that is gone no longer counts.
    Node.objects.filter(cluster=shared).update(gone_at="2026-01-01T00:00Z")
    assert shared.resolved_placement_policy() == "binpack"


@pytest.mark.django_db
def test_volcano_config_of_an_auto_cluster_with_shared_gpus_is_fgd_mixs() -> None:
    make_cluster("campus", GpuSharing.FRACTIONAL)
    out = io.StringIO()
    call_command("volcano_config", "campus", stdout=out)
    text = out.getvalue()
    assert "placement policy 'fgd-mix'" in text.splitlines()[0]
    assert yaml.safe_load(text) == scheduler_config("fgd-mix")
