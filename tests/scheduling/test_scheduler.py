"""The scheduling session: gang, proportion, DRF, priority, preemption and reclaim."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from scheduling.core.model import Job, Queue, Resources, Running
from scheduling.core.scheduler import Snapshot, deserved_shares, schedule

from .build import job, node


def gpus(n: int, per_node: int = 1) -> list:  # type: ignore[type-arg]
    return [node(f"n{i}", gpus=per_node, cpu=1_000_000, mem=1_000_000) for i in range(n)]


def running(j: Job, node_name: str, devices: tuple[int, ...] = (0,)) -> list[Running]:
    return [Running(j, t, node_name, devices) for t in j.tasks]


def placed_per_job(decision) -> Counter[str]:  # type: ignore[no-untyped-def]
    return Counter(p.job for p in decision.placements)


def test_gang_is_never_partially_placed() -> None:
    jobs = [
        job("too-wide", tasks=5, gpus=1),  # needs 5 GPUs together, there are 4
        job("elastic", tasks=5, min_available=2, gpus=1, order=1),
    ]
    snap = Snapshot(gpus(2, per_node=2), [Queue("default")], jobs, actions=("allocate",))
    decision = schedule(snap)
    assert "too-wide" not in placed_per_job(decision)
    assert decision.waiting["too-wide"].text().startswith("gang")
    assert placed_per_job(decision)["elastic"] == 4


@pytest.mark.parametrize("policy", ["binpack", "fgd-mix"])
def test_gangs_hold_all_or_nothing_over_many_random_jobs(policy: str) -> None:
    rng = np.random.default_rng(11)
    jobs = []
    for i in range(40):
        size = int(rng.integers(1, 6))
        jobs.append(
            job(
                f"j{i}",
                tasks=size,
                min_available=int(rng.integers(1, size + 1)),
                gpus=1,
                milli=int(rng.choice([250, 500, 1000])),
                order=i,
            )
        )
    decision = schedule(Snapshot(gpus(6, per_node=2), [Queue("default")], jobs, policy=policy))
    placed = placed_per_job(decision)
    for j in jobs:
        assert placed[j.name] == 0 or placed[j.name] >= j.min_available
        assert (placed[j.name] == 0) == (j.name in decision.waiting)


def test_two_queues_weighted_3_to_2_share_gpus_60_40_under_saturation() -> None:
    queues = [Queue("a", weight=3), Queue("b", weight=2)]
    jobs = [job(f"{q}{i}", queue=q, gpus=1, order=i) for q in "ab" for i in range(40)]
    decision = schedule(Snapshot(gpus(20), queues, jobs))
    per_queue = Counter(p.job[0] for p in decision.placements)
    assert sum(per_queue.values()) == 20
    assert per_queue["a"] / 20 == pytest.approx(0.6, abs=0.05)
    assert all(
        decision.waiting[j.name].text().startswith("queue")
        or "capacity" in decision.waiting[j.name].text()
        or "full" in decision.waiting[j.name].text()
        for j in jobs
        if j.name not in {p.job for p in decision.placements}
    )


def test_deserved_shares_split_by_weight_capped_by_capability_and_request() -> None:
    queues = [
        Queue("a", 3),
        Queue("b", 2),
        Queue("c", 1, capability=Resources(gpu_milli=1000)),
        Queue("d", 5),
    ]
    big = np.array([0.0, 0.0, 1e9])
    requests = {"a": big, "b": big, "c": big, "d": np.array([0.0, 0.0, 500.0])}
    deserved = deserved_shares(np.array([0.0, 0.0, 10_000.0]), queues, requests)
    assert {q: round(v[2]) for q, v in deserved.items()} == {
        "a": 5100,
        "b": 3400,
        "c": 1000,
        "d": 500,
    }


def test_a_queue_never_exceeds_its_capability() -> None:
    queues = [
        Queue("capped", capability=Resources(cpu_milli=10**9, memory_mib=10**9, gpu_milli=2000))
    ]
    jobs = [job(f"j{i}", queue="capped", gpus=1, order=i) for i in range(3)]
    decision = schedule(Snapshot(gpus(4), queues, jobs))
    assert len(decision.placements) == 2
    assert "capability" in decision.waiting["j2"].text()


def test_drf_serves_the_job_with_the_smaller_dominant_share_first() -> None:
    greedy = job("greedy", tasks=2, min_available=1, gpus=1)
    newcomer = job("newcomer", gpus=1, order=1)
    snap = Snapshot(
        gpus(2),
        [Queue("default")],
        [greedy, newcomer],
        running=[Running(greedy, greedy.tasks[0], "n0", (0,))],
    )
    decision = schedule(snap)
    assert [p.job for p in decision.placements] == ["newcomer"]


def test_priority_comes_before_drf() -> None:
    greedy = job("greedy", tasks=2, min_available=1, gpus=1, priority=5)
    newcomer = job("newcomer", gpus=1, order=1)
    snap = Snapshot(
        gpus(2),
        [Queue("default")],
        [greedy, newcomer],
        running=[Running(greedy, greedy.tasks[0], "n0", (0,))],
        actions=("enqueue", "allocate"),
    )
    assert [p.job for p in schedule(snap).placements] == ["greedy"]


def test_preemption_evicts_only_lower_priority_work_of_the_same_queue() -> None:
    low, high = job("low", gpus=1, priority=1), job("high", gpus=1, priority=9)
    other = job("other-queue", gpus=1, priority=0, queue="other")
    urgent = job("urgent", gpus=1, priority=5, order=1)
    snap = Snapshot(
        gpus(3),
        [Queue("default"), Queue("other", reclaimable=False)],
        [low, high, other, urgent],
        running=running(low, "n0") + running(high, "n1") + running(other, "n2"),
        actions=("enqueue", "allocate", "preempt"),
    )
    decision = schedule(snap)
    assert [(e.job, e.node) for e in decision.evictions] == [("low", "n0")]
    assert [(p.job, p.node) for p in decision.placements] == [("urgent", "n0")]


def test_preemption_never_evicts_equal_or_higher_priority() -> None:
    peer, boss = job("peer", gpus=1, priority=5), job("boss", gpus=1, priority=9)
    snap = Snapshot(
        gpus(2),
        [Queue("default")],
        [peer, boss, job("late", gpus=1, priority=5)],
        running=running(peer, "n0") + running(boss, "n1"),
    )
    decision = schedule(snap)
    assert decision.evictions == () and decision.placements == ()
    assert "late" in decision.waiting


def test_evicting_a_gang_member_below_min_available_evicts_the_whole_gang() -> None:
    gang = job("gang", tasks=2, gpus=1, priority=1)
    snap = Snapshot(
        gpus(2),
        [Queue("default")],
        [gang, job("urgent", gpus=1, priority=5)],
        running=[
            Running(gang, gang.tasks[0], "n0", (0,)),
            Running(gang, gang.tasks[1], "n1", (0,)),
        ],
    )
    decision = schedule(snap)
    assert sorted(e.task for e in decision.evictions) == ["gang-0", "gang-1"]


def test_reclaim_takes_only_from_reclaimable_queues_over_their_share() -> None:
    # 7 GPUs. Deserved: over (reclaimable) 2, starving 2, locked (not reclaimable) 2, modest 1.
    queues = [Queue("over"), Queue("starving"), Queue("locked", reclaimable=False), Queue("modest")]
    over = [job(f"over{i}", queue="over", gpus=1) for i in range(3)]
    locked = [job(f"locked{i}", queue="locked", gpus=1) for i in range(3)]
    modest = job("modest0", queue="modest", gpus=1)
    starving = [job(f"starving{i}", queue="starving", gpus=1, order=i) for i in range(2)]
    holders = over + locked + [modest]
    snap = Snapshot(
        gpus(7),
        queues,
        holders + starving,
        running=[r for i, j in enumerate(holders) for r in running(j, f"n{i}")],
        actions=("enqueue", "allocate", "reclaim"),
    )
    decision = schedule(snap)
    assert [e.job[:4] for e in decision.evictions] == ["over"]
    assert [p.job for p in decision.placements] == ["starving0"]
    assert "starving1" in decision.waiting


def test_a_job_bigger_than_any_node_is_refused_at_once_with_that_reason() -> None:
    decision = schedule(
        Snapshot(
            gpus(4, per_node=8), [Queue("default")], [job("huge", gpus=16), job("fine", gpus=8)]
        )
    )
    assert "bigger than any node" in decision.rejected["huge"].text()
    assert [p.job for p in decision.placements] == ["fine"]


def test_waiting_jobs_say_when_the_cluster_is_fragmented() -> None:
    halves = [job(f"half{i}", gpus=1, milli=500) for i in range(2)]
    snap = Snapshot(
        gpus(2),
        [Queue("default")],
        [*halves, job("whole", gpus=1)],
        running=running(halves[0], "n0") + running(halves[1], "n1"),
    )
    reason = schedule(snap).waiting["whole"].text()
    assert reason.startswith("fragmentation: 1 GPUs free in total")


def test_fractional_tasks_share_one_device_and_multi_gpu_stays_on_one_node() -> None:
    jobs = [job("pair", tasks=2, gpus=1, milli=500), job("quad", gpus=4, order=1)]
    nodes = [node("a", gpus=1), node("b", gpus=4, model="T4")]
    decision = schedule(Snapshot(nodes, [Queue("default")], jobs, policy="bestfit"))
    where = {p.task: (p.node, p.devices) for p in decision.placements}
    assert where["pair-0"] == where["pair-1"] == ("a", (0,))
    assert where["quad-0"] == ("b", (0, 1, 2, 3))


@pytest.mark.parametrize(
    "policy", ["random", "spread", "binpack", "bestfit", "fgd", "fgd-cpu", "fgd-mix"]
)
def test_every_policy_can_drive_a_session(policy: str) -> None:
    jobs = [job(f"j{i}", gpus=1, milli=[300, 700, 1000][i % 3], order=i) for i in range(6)]
    decision = schedule(Snapshot(gpus(3), [Queue("default")], jobs, policy=policy))
    assert len(decision.placements) >= 4
