"""volcano-scheduler.conf per placement policy."""

from __future__ import annotations

import pytest
import yaml

from scheduling.backends.kubernetes.schedulerconf import (
    POLICIES,
    config_map,
    scheduler_conf,
    scheduler_config,
)
from scheduling.choices import PlacementPolicy


def plugins(config: dict) -> dict[str, dict]:
    return {p["name"]: p for tier in config["tiers"] for p in tier["plugins"]}


def test_every_portal_placement_policy_has_a_volcano_configuration() -> None:
    assert set(POLICIES) == set(PlacementPolicy.values) - {PlacementPolicy.AUTO}
    for policy in POLICIES:
        parsed = yaml.safe_load(scheduler_conf(policy))
        assert parsed == scheduler_config(policy)
        names = plugins(parsed)
        assert {"gang", "priority", "proportion", "predicates", "drf"} <= set(names)
        assert parsed["actions"] == "enqueue, allocate, preempt, reclaim, backfill"


def test_binpack_weighs_gpus_including_vgpu_resources() -> None:
    arguments = plugins(scheduler_config("binpack"))["binpack"]["arguments"]
    assert arguments["binpack.weight"] == 10
    assert "nvidia.com/gpu" in arguments["binpack.resources"]
    assert arguments["binpack.resources.nvidia.com/gpu"] > arguments["binpack.cpu"]
    assert arguments["binpack.resources.volcano.sh/vgpu-memory"] > 0
    assert (
        plugins(scheduler_config("binpack"))["nodeorder"]["arguments"]["leastrequested.weight"] == 0
    )


def test_spread_scores_least_requested_and_does_not_binpack() -> None:
    names = plugins(scheduler_config("spread"))
    assert "binpack" not in names
    assert names["nodeorder"]["arguments"]["leastrequested.weight"] > 0
    assert names["deviceshare"]["arguments"]["deviceshare.SchedulePolicy"] == "spread"


def test_random_zeroes_every_node_score() -> None:
    names = plugins(scheduler_config("random"))
    assert "binpack" not in names
    assert set(names["nodeorder"]["arguments"].values()) == {0}


@pytest.mark.parametrize("policy", ["bestfit", "random", "fgd", "fgd-cpu", "fgd-mix"])
def test_a_policy_volcano_lacks_says_so_in_a_comment(policy: str) -> None:
    header = scheduler_conf(policy).splitlines()[1]
    assert header.startswith("#") and "Volcano has no" in header


def test_without_vgpu_the_deviceshare_plugin_is_left_out() -> None:
    assert "deviceshare" not in plugins(scheduler_config("binpack", vgpu=False))


def test_the_configmap_carries_the_file() -> None:
    manifest = yaml.safe_load(config_map("fgd"))
    assert manifest["metadata"]["name"] == "volcano-scheduler-configmap"
    assert yaml.safe_load(manifest["data"]["volcano-scheduler.conf"]) == scheduler_config("fgd")


def test_an_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown placement policy"):
        scheduler_config("tetris")
