"""The replay's output, pinned: speed work on the scheduler core must not move a placement.

The numbers were recorded with the code before the speed work of issue 15 (commit 28075ce) on
the sample shipped with the tests (every 10th openb GPU node, the first 800 default pods). Each
row is what a user of the replay reads: failed tasks, unallocated and fragmented GPU % at
arrived = 100 %, the number of events, and a digest of the per-event allocated milli-GPU (the
whole curve, event by event). A change that alters any placement changes the curve.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from scheduling.core.cluster import Cluster
from scheduling.core.fragmentation import BlendedFragmentation, FragmentationModel, TypicalShapes
from scheduling.core.model import Node, TaskRequest
from scheduling.core.policies import POLICIES
from scheduling.core.replay import run_arrival
from scheduling.core.trace import load_nodes, load_tasks

SAMPLE = Path(__file__).with_name("data")

# (policy, seed): (failed, unallocated %, fragmented %, allocated-curve digest, events)
PINNED = {
    ("random", 42): (214, 9.2278, 8.1379, "9764a2116c69b661", 1053),
    ("random", 43): (229, 10.715, 9.5832, "97ebff84e31182a0", 1050),
    ("spread", 42): (182, 6.9489, 6.1449, "23f9a016663e97a9", 1053),
    ("spread", 43): (196, 6.301, 5.6638, "9f9e98eee861a25a", 1050),
    ("binpack", 42): (253, 4.9278, 4.9185, "03e8a11939e1ae11", 1053),
    ("binpack", 43): (254, 4.08, 4.0683, "6031ac09fd8e0721", 1050),
    ("bestfit", 42): (250, 4.27, 4.2631, "a6437ed938a84ce2", 1053),
    ("bestfit", 43): (251, 3.6, 3.5897, "5b4469e3de3cf937", 1050),
    ("fgd", 42): (237, 2.82, 2.8086, "683844e128f929d4", 1053),
    ("fgd", 43): (241, 2.81, 2.8008, "ee3a42fa2f039e2a", 1050),
    ("fgd-cpu", 42): (229, 2.88, 2.7929, "21a2ffb7f0186456", 1053),
    ("fgd-cpu", 43): (230, 2.81, 2.792, "0a4ef2eb58e93b1d", 1050),
    ("fgd-mix", 42): (235, 2.5, 2.4883, "64eaa914a1db52c1", 1053),
    ("fgd-mix", 43): (229, 2.56, 2.5435, "76529afd1cb52ed6", 1050),
}


@pytest.fixture(scope="module")
def sample() -> tuple[list[Node], list[TaskRequest]]:
    nodes = load_nodes(SAMPLE / "openb_nodes_sample.csv")
    return nodes, load_tasks(SAMPLE / "openb_pods_sample.csv")


def test_every_registered_policy_is_pinned() -> None:
    assert {policy for policy, _ in PINNED} == set(POLICIES)


@pytest.mark.parametrize(("policy", "seed"), sorted(PINNED))
def test_the_replay_places_every_task_where_it_did_before_the_speed_work(
    sample: tuple[list[Node], list[TaskRequest]], policy: str, seed: int
) -> None:
    nodes, tasks = sample
    run = run_arrival(nodes, tasks, policy, seed)
    digest = hashlib.sha256(run.allocated_milli.astype("<i8").tobytes()).hexdigest()[:16]
    got = (
        run.failed_tasks,
        round(run.unallocated_pct, 4),
        round(run.fragmented_pct, 4),
        digest,
        len(run.allocated_milli),
    )
    assert got == PINNED[(policy, seed)]


@pytest.mark.parametrize("measure", [FragmentationModel, BlendedFragmentation])
def test_cached_node_state_gives_the_same_deltas_as_a_fresh_model(
    sample: tuple[list[Node], list[TaskRequest]], measure: type[FragmentationModel]
) -> None:
    # A model that has cached every node, then sees placements, must score like a model
    # built on the changed cluster from scratch.
    nodes, tasks = sample
    cluster = Cluster(nodes)
    typical = TypicalShapes.from_tasks(tasks)
    cached = measure(cluster, typical)
    everyone = np.arange(len(cluster))
    probe = next(t for t in tasks if t.is_sharing)
    cached.placement_delta(probe, everyone[cluster.fits(probe)])
    placed = 0
    for task in tasks[:200]:
        fit = np.flatnonzero(cluster.fits(task))
        if fit.size and task.num_gpu and task.gpu_milli == 1000:
            node = int(fit[placed % fit.size])
            cluster.allocate(node, task, cluster.fitting_devices(node, task)[: task.num_gpu])
            placed += 1
    assert placed > 10
    fresh = measure(cluster, typical)
    for task in (probe, next(t for t in tasks if t.num_gpu == 0)):
        fit = everyone[cluster.fits(task)]
        for batch in (fit, fit[:1], fit[::7]):
            got, dev = cached.placement_delta(task, batch)
            want, want_dev = fresh.placement_delta(task, batch)
            assert np.array_equal(got, want) and np.array_equal(dev, want_dev)
