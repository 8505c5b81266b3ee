"""The simulated backend: paper nodes, a fast clock, the same contract."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from scheduling.backends.base import Handle, Phase, TaskPlacement, WorkloadSpec
from scheduling.backends.simulated import SimulatedBackend

OPENB = Path(__file__).resolve().parents[3].parent / "shared/traces/openb"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sim(tmp_path: Path, clock: Clock) -> SimulatedBackend:
    return SimulatedBackend(tmp_path, speedup=60, default_duration_s=600, clock=clock)


def job(duration: str = "600", attempt: int = 0, kind: str = "job") -> WorkloadSpec:
    return WorkloadSpec(
        workload_id=str(uuid.uuid4()),
        kind=kind,
        app="command",
        owner="bob",
        env={"QUANTA_SIM_DURATION": duration},
        attempt=attempt,
        placement=(TaskPlacement("sim-a100-00", (0,)),),
    )


def phase(sim: SimulatedBackend, handle: Handle) -> Phase:
    return sim.observe([handle])[handle.workload_id].phase


def test_a_job_runs_for_its_simulated_duration_then_succeeds(sim, clock) -> None:
    handle = sim.submit(job("600"))  # 10 simulated minutes = 10 real seconds at 60×
    assert phase(sim, handle) == Phase.RUNNING
    clock.now += 9
    assert phase(sim, handle) == Phase.RUNNING
    clock.now += 2
    observation = sim.observe([handle])[handle.workload_id]
    assert observation.phase == Phase.SUCCEEDED and "10 simulated minutes" in str(
        observation.reason
    )
    assert sim.running() == set()


def test_submitting_twice_starts_once_and_stopping_twice_is_harmless(sim, clock) -> None:
    spec = job()
    first = sim.submit(spec)
    clock.now += 5
    assert sim.submit(spec).state["started"] == first.state["started"]
    sim.stop(first)
    sim.stop(first)
    assert phase(sim, first) == Phase.STOPPED
    sim.stop(Handle("never-submitted"))
    assert phase(sim, Handle("never-submitted")) == Phase.UNKNOWN


def test_an_environment_runs_until_stopped_and_cannot_be_opened(sim, clock) -> None:
    handle = sim.submit(job(kind="notebook"))
    clock.now += 10_000
    assert phase(sim, handle) == Phase.RUNNING and sim.endpoint(handle) is None
    assert sim.running() == {handle.workload_id}
    sim.stop(handle)
    assert phase(sim, handle) == Phase.STOPPED


def test_a_restarted_portal_reattaches(tmp_path, clock) -> None:
    handle = SimulatedBackend(tmp_path, clock=clock).submit(job())
    again = SimulatedBackend(tmp_path, clock=clock)
    assert again.running() == {handle.workload_id}
    again.stop(Handle(handle.workload_id))
    assert phase(again, handle) == Phase.STOPPED


def test_logs_say_they_are_simulated(sim, clock) -> None:
    handle = sim.submit(job("600"))
    clock.now += 5
    assert "[simulated] 50% done" in sim.logs(handle).text


def test_the_default_mix_is_sixteen_nodes_of_eight_gpus_of_two_models(sim) -> None:
    nodes = sim.nodes()
    assert len(nodes) == 16 and all(len(n.gpus) == 8 for n in nodes)
    assert {n.gpus[0].model for n in nodes} == {"A100", "V100M32"}
    assert all(n.labels["quanta.io/simulated"] == "true" for n in nodes)


@pytest.mark.skipif(not OPENB.is_dir(), reason="the openb traces (../shared) are not here")
def test_nodes_can_come_from_an_openb_node_list(tmp_path) -> None:
    sim = SimulatedBackend(tmp_path, nodes_csv=str(OPENB / "openb_node_list_gpu_node.csv"))
    nodes = sim.nodes()
    assert len(nodes) == 1213 and sum(len(n.gpus) for n in nodes) == 6212
