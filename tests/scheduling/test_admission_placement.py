"""Admission's placement on the portal-scheduled clusters, through the scheduler core."""

from __future__ import annotations

import pytest

from scheduling.backends.base import Resources
from scheduling.placement import FreeDevice, FreeNode, place, share_milli


def node(
    name: str,
    gpus: int = 2,
    memory: int = 40960,
    model: str = "A100",
    used: dict[int, tuple[int, int]] | None = None,
) -> FreeNode:
    used = used or {}
    devices = [
        FreeDevice(
            i, i, model, memory, 1000 - used.get(i, (0, 0))[0], memory - used.get(i, (0, 0))[1]
        )
        for i in range(gpus)
    ]
    return FreeNode(hash(name) % 1000, name, 32000, 131072, 32000, 131072, True, devices)


def test_a_memory_heavy_share_is_charged_by_its_memory() -> None:
    res = Resources(cpu_milli=1000, memory_mib=1024, gpu_milli=100, gpu_memory_mib=30000)
    assert share_milli(res, [node("a")]) == 733  # 30000 of 40960 MiB


def test_two_memory_heavy_shares_never_share_a_device() -> None:
    res = Resources(cpu_milli=1000, memory_mib=1024, gpu_milli=100, gpu_memory_mib=30000)
    first = place([node("a", gpus=1)], res, 1)
    assert first.placed
    taken = first.tasks[0].devices[0][1]
    full = node("a", gpus=1, used={0: (taken, 30000)})
    second = place([full], res, 1)
    assert not second.placed and not second.permanent


@pytest.mark.parametrize("policy", ["binpack", "spread", "bestfit", "random", "fgd", "fgd-cpu"])
def test_every_policy_places_a_gang_whole_on_whole_gpus(policy: str) -> None:
    nodes = [node("a", gpus=4), node("b", gpus=4)]
    placement = place(nodes, Resources(cpu_milli=4000, memory_mib=8192, gpus=2), 3, policy)
    assert placement.placed and len(placement.tasks) == 3
    devices = [(slot.node.name, d.index) for slot in placement.tasks for d, _, _ in slot.devices]
    assert len(devices) == 6 and len(set(devices)) == 6  # no device handed out twice
    for slot in placement.tasks:
        assert all(milli == 1000 for _, milli, _ in slot.devices)


def test_binpack_fills_the_busier_node_and_spread_the_emptier_one() -> None:
    busy = node("busy", gpus=4, used={0: (1000, 40960)})
    idle = node("idle", gpus=4)
    busy.free_cpu_milli = 16000
    res = Resources(cpu_milli=1000, memory_mib=1024, gpus=1)
    assert place([busy, idle], res, 1, "binpack").tasks[0].node.name == "busy"
    assert place([busy, idle], res, 1, "spread").tasks[0].node.name == "idle"


def test_a_gpu_model_set_is_respected() -> None:
    nodes = [node("t4", model="T4"), node("v100", model="V100M32")]
    res = Resources(cpu_milli=1000, memory_mib=1024, gpus=1, gpu_models=("V100M16", "V100M32"))
    assert place(nodes, res, 1).tasks[0].node.name == "v100"
