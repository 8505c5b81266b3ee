"""Scoring policies: Volcano's binpack formula, best-fit, spread, and the fragmentation model."""

from __future__ import annotations

import numpy as np
import pytest

from scheduling.core.cluster import Cluster
from scheduling.core.fragmentation import (
    BlendedFragmentation,
    CpuAwareFragmentation,
    FragmentationModel,
    TypicalShapes,
    pick_tightest,
)
from scheduling.core.placement import Placer
from scheduling.core.policies import (
    BinpackPolicy,
    make_policy,
    model_pressure,
    resource_binpack_score,
)

from .build import node, task


def binpack_score(policy: BinpackPolicy, used: dict[str, int], request: dict[str, int]) -> float:
    """Score of one node (64 cores, 256000 MiB, 4 GPUs) with `used` already allocated."""
    c = Cluster([node("n", gpus=4, cpu=64_000, mem=256_000)])
    c.allocate(
        0,
        task("used", gpus=used.get("gpus", 0), cpu=used["cpu"], mem=used["mem"]),
        list(range(used.get("gpus", 0))),
    )
    return float(policy.score(c, task("new", **request), np.array([0]))[0])


def test_binpack_matches_volcanos_formula_with_default_weights() -> None:
    # cpu (8000 + 16000) / 64000 = 0.375, memory (32000 + 64000) / 256000 = 0.375,
    # gpu (1000 + 1000) / 4000 = 0.5: (0.375 + 0.375 + 0.5) / 3 * 100 = 41.666...
    used = {"cpu": 16_000, "mem": 64_000, "gpus": 1}
    request = {"cpu": 8000, "mem": 32_000, "gpus": 1}
    assert binpack_score(BinpackPolicy(), used, request) == pytest.approx(125 / 3)


def test_binpack_matches_volcanos_formula_with_configured_weights() -> None:
    # (0.375 * 2 + 0.375 * 1 + 0.5 * 5) / (2 + 1 + 5) * 100 * 10 = 453.125
    used = {"cpu": 16_000, "mem": 64_000, "gpus": 1}
    request = {"cpu": 8000, "mem": 32_000, "gpus": 1}
    policy = BinpackPolicy(weight=10, cpu=2, memory=1, gpu=5)
    assert binpack_score(policy, used, request) == pytest.approx(453.125)


def test_binpack_leaves_out_resources_the_task_does_not_request() -> None:
    # No GPU requested: only cpu and memory count, (0.375 + 0.375) / 2 * 100 = 37.5
    used = {"cpu": 16_000, "mem": 64_000, "gpus": 1}
    assert binpack_score(BinpackPolicy(), used, {"cpu": 8000, "mem": 32_000}) == 37.5


def test_binpack_resource_score_is_zero_without_capacity_or_on_overflow() -> None:
    assert resource_binpack_score(1, 0, 0, 1) == 0
    assert resource_binpack_score(3, 4, 2, 1) == 0
    assert resource_binpack_score(1, 4, 2, 3) == pytest.approx(2.25)


@pytest.mark.parametrize(
    ("policy", "same_node"), [("binpack", True), ("bestfit", True), ("spread", False)]
)
def test_binpack_and_bestfit_fill_the_used_node_spread_takes_the_empty_one(
    policy: str, same_node: bool
) -> None:
    p = Placer(
        Cluster([node("a", gpus=2), node("b", gpus=2)]),
        make_policy(policy),
        np.random.default_rng(0),
    )
    first = p.place(task("w", gpus=1, milli=500))
    second = p.place(task("x", gpus=1, milli=200))
    assert first is not None and second is not None
    assert (second.node == first.node) == same_node


def test_bestfit_and_binpack_take_the_fullest_device_spread_the_emptiest() -> None:
    for policy, device in (("bestfit", 1), ("binpack", 1), ("spread", 0)):
        c = Cluster([node("n", gpus=2)])
        c.allocate(0, task("u", gpus=1, milli=600), [1])
        p = Placer(c, make_policy(policy), np.random.default_rng(0))
        assert p.choose(task("x", gpus=1, milli=300)) == (0, (device,)), policy


@pytest.mark.parametrize(
    ("policy", "chosen"), [("bestfit", "a"), ("fgd", "b"), ("fgd-cpu", "b"), ("fgd-mix", "b")]
)
def test_fgd_avoids_the_placement_that_strands_a_sliver_best_fit_takes_it(
    policy: str, chosen: str
) -> None:
    # The workload is 500-milli tasks and node a's device has 600 free. A 400-milli task there
    # leaves 200 no typical task can use; on node b's empty device it leaves 600, still usable.
    workload = [task("typical", gpus=1, milli=500)]
    p = Placer(
        Cluster([node("a", gpus=1), node("b", gpus=1)]),
        make_policy(policy, workload=workload),
        np.random.default_rng(0),
    )
    p.cluster.allocate(0, task("u", gpus=1, milli=400), [0])
    alloc = p.place(task("x", gpus=1, milli=400))
    assert alloc is not None and p.cluster.nodes[alloc.node].name == chosen


def test_typical_shapes_are_the_most_frequent_covering_the_threshold() -> None:
    tasks = [task("a", gpus=1, milli=500)] * 6 + [task("b", gpus=1)] * 3 + [task("c")]
    typical = TypicalShapes.from_tasks(tasks, coverage=0.9)
    assert typical.shapes == ((1000, 1, 500, frozenset()), (1000, 1, 1000, frozenset()))
    assert typical.weights == pytest.approx((6 / 9, 3 / 9))


def test_node_fragmentation_matches_the_papers_definition_by_hand() -> None:
    typical = TypicalShapes(
        ((4000, 1, 500, frozenset()), (0, 0, 0, frozenset()), (16000, 1, 1000, frozenset())),
        (0.5, 0.25, 0.25),
    )
    c = Cluster([node("n", gpus=4, cpu=64_000)])
    c.allocate(0, task("u1", gpus=1, milli=700, cpu=56_000), [1])
    c.allocate(0, task("u2", gpus=2, cpu=0), [2, 3])
    # free devices [1000, 300, 0, 0], free CPU 8000:
    # 0.5 * 300 (too small for 500) + 0.25 * 1300 (no GPU) + 0.25 * 1300 (lacks CPU) = 800
    paper = FragmentationModel(c, typical)
    assert paper.node_fragmentation(np.array([0]))[0] == pytest.approx(800)
    c.cpu_free[0] = 5000  # room for one 4000-milli task: the paper still counts 1000 usable,
    assert paper.node_fragmentation(np.array([0]))[0] == pytest.approx(800)
    # the CPU-aware measure only the 500 that task can use: 0.5 * 800 + 0.5 * 1300 = 1050.
    cpu_aware = CpuAwareFragmentation(c, typical)
    assert cpu_aware.node_fragmentation(np.array([0]))[0] == pytest.approx(1050)


@pytest.mark.parametrize(
    "measure", [FragmentationModel, CpuAwareFragmentation, BlendedFragmentation]
)
def test_placement_delta_equals_the_change_of_node_fragmentation(measure: type) -> None:
    rng = np.random.default_rng(5)
    workload = [
        task(
            f"w{i}",
            gpus=int(rng.choice([0, 1, 1, 2])),
            milli=int(rng.choice([250, 470, 1000])),
            cpu=int(rng.choice([1000, 4000, 12000])),
        )
        for i in range(60)
    ]
    workload = [
        t if t.num_gpu < 2 or t.gpu_milli == 1000 else task(t.name, gpus=2) for t in workload
    ]
    c = Cluster([node(f"n{i}", gpus=int(rng.choice([1, 2, 4, 8])), cpu=48_000) for i in range(12)])
    model = measure(c, TypicalShapes.from_tasks(workload))
    for n in range(len(c)):
        for d in range(int(c.gpu_count[n])):
            c.dev_free[n, d] = rng.choice([0, 130, 500, 530, 1000])
        c.cpu_free[n] = rng.integers(0, 48_001)
    for t in workload[:30]:
        nodes = np.flatnonzero(c.fits(t))
        delta, device = model.placement_delta(t, nodes)
        for k, n in enumerate(nodes):
            before = model.node_fragmentation(np.array([n]))[0]
            saved = c.cpu_free[n], c.dev_free[n].copy()
            devices = [int(device[k])] if t.is_sharing else pick_tightest(c.dev_free[n], t)
            c.allocate(int(n), t, devices)
            after = model.node_fragmentation(np.array([n]))[0]
            c.cpu_free[n], c.dev_free[n] = saved
            c.allocated_gpu_milli -= t.gpu_total_milli
            assert delta[k] == pytest.approx(after - before)


def test_fgd_mix_keeps_the_scarce_model_for_the_work_only_it_can_serve() -> None:
    # Half the expected GPU demand may only run on T4, which is a fifth of the GPUs: fgd-mix
    # keeps an unconstrained task off the T4 node by a wider margin than FGD's.
    workload = [task(f"t4-{i}", gpus=1, models="T4") for i in range(5)]
    workload += [task(f"any-{i}", gpus=1) for i in range(5)]
    c = Cluster([node("t4", gpus=2, model="T4"), node("g2", gpus=8, model="G2")])
    both = np.arange(2)
    fgd = make_policy("fgd", workload=workload)
    mix = make_policy("fgd-mix", workload=workload)
    for policy in (fgd, mix):
        policy.bind(c)
    free = task("x", gpus=1)
    fgd_t4, fgd_g2 = fgd.score(c, free, both)
    mix_t4, mix_g2 = mix.score(c, free, both)
    assert mix_g2 - mix_t4 > fgd_g2 - fgd_t4 + 20
    pinned = task("y", gpus=1, models="T4")  # work that must run there is not pushed away
    assert mix.score(c, pinned, both[:1]) == fgd.score(c, pinned, both[:1])
    pressure = model_pressure(c, TypicalShapes.from_tasks(workload))
    assert pressure[c.models.index("T4")] == pytest.approx(0.5 / 0.2)
    assert pressure[c.models.index("G2")] == 0


def test_fgd_mix_without_model_constraints_scores_like_its_measure_alone() -> None:
    workload = [task(f"w{i}", gpus=1, milli=[300, 500, 1000][i % 3]) for i in range(9)]
    c = Cluster([node(f"n{i}", gpus=4) for i in range(3)])
    c.allocate(0, task("u", gpus=1, milli=700), [0])
    mix = make_policy("fgd-mix", workload=workload)
    mix.bind(c)
    assert not mix.pressure.any()
    t = task("x", gpus=1, milli=300)
    delta, _ = mix.model.placement_delta(t, np.arange(3))
    expected = np.floor(100 / (1 + np.exp(delta / 1000)))
    assert mix.score(c, t, np.arange(3)).tolist() == expected.tolist()
