"""Trace replay: the paper's metric, the arrival and time modes, and the command."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from django.core.management import CommandError, call_command

from scheduling.core.policies import POLICIES, RECOMMENDED
from scheduling.core.replay import allocation_at, inflate, run_arrival, run_time
from scheduling.core.trace import load_nodes, load_tasks

from .build import node, task

# Every 10th GPU node and the first 800 pods of openb default, shipped with the tests.
SAMPLE = Path(__file__).with_name("data")


def test_the_replay_metric_reproduces_a_known_small_case_exactly() -> None:
    # One node, 2 GPUs, CPU for 8 tasks. Ten 200-milli tasks are 100 % of the GPUs; the
    # arrival at 100 % finds 8 placed (CPU-bound): 80 % allocated, 20 % unallocated, for any
    # order and any policy. Inflation to 130 % adds three more GPU tasks, which fail.
    nodes = [node("only", gpus=2, cpu=8000, mem=10**6)]
    tasks = [task(f"g{i}", gpus=1, milli=200, cpu=1000) for i in range(10)]
    tasks.append(task("cpu-only", cpu=0, mem=1))
    for policy in ("random", "bestfit", "fgd-cpu"):
        for seed in (1, 2):
            run = run_arrival(nodes, tasks, policy, seed)
            assert run.unallocated_pct == 20.0
            assert run.failed_tasks == 5
            assert 2000 in run.arrived_milli


def test_allocation_at_averages_the_events_whose_arrived_share_rounds_to_the_target() -> None:
    capacity = 10_000  # 10 GPUs
    arrived = np.array([9940, 9950, 9960, 10_000, 10_040, 10_050, 10_060])
    allocated = np.array([9000, 9050, 9100, 9200, 9200, 9400, 9300])
    # 99.4 and 100.6 round away; 99.5 and 100.5 round half to even, to 100: they count.
    assert allocation_at(arrived, allocated, capacity, 100) == pytest.approx(
        (90.5 + 91 + 92 + 92 + 94) / 5
    )


def test_allocation_at_falls_back_to_the_neighbouring_points_like_the_papers_script() -> None:
    arrived, allocated = np.array([9900, 10_100]), np.array([9000, 9500])
    assert allocation_at(arrived, allocated, 10_000, 100) == pytest.approx(92.5)
    assert np.isnan(allocation_at(arrived, allocated, 10_000, 50))


def test_inflation_shuffles_the_trace_then_tops_it_up_to_the_target() -> None:
    tasks = [task(f"t{i}", gpus=1, milli=100 * (i + 1)) for i in range(10)]  # 5500 milli
    workload = inflate(tasks, capacity_milli=5000, target=1.3, rng=np.random.default_rng(4))
    total = sum(t.gpu_total_milli for t in workload)
    assert sorted(t.name for t in workload[:10]) == sorted(t.name for t in tasks)
    assert workload[:10] != tasks and 5500 <= total <= 6500
    smaller = inflate(tasks, capacity_milli=5000, target=0.5, rng=np.random.default_rng(4))
    assert sum(t.gpu_total_milli for t in smaller) <= 2500


def test_an_arrival_replay_of_a_trace_slice_is_reproducible_and_fgd_beats_random() -> None:
    nodes = load_nodes(SAMPLE / "openb_nodes_sample.csv")
    tasks = load_tasks(SAMPLE / "openb_pods_sample.csv")
    first = run_arrival(nodes, tasks, "fgd-cpu", 42)
    again = run_arrival(nodes, tasks, "fgd-cpu", 42)
    assert (first.allocated_milli == again.allocated_milli).all()
    random = np.mean([run_arrival(nodes, tasks, "random", s).unallocated_pct for s in (42, 43)])
    fgd = np.mean([run_arrival(nodes, tasks, "fgd-cpu", s).unallocated_pct for s in (42, 43)])
    assert fgd < random


def test_time_mode_queues_in_fifo_order_and_measures_the_delay() -> None:
    tasks = [
        task("a", gpus=1, creation_time=0, deletion_time=10),
        task("b", gpus=1, creation_time=1, deletion_time=5),  # runs 4 s, from t = 10
        task("c", gpus=1, milli=500, creation_time=2, deletion_time=3),  # runs 1 s, from t = 14
    ]
    run = run_time([node("n", gpus=1)], tasks, "binpack", seed=0)
    assert run.queueing_delay.tolist() == [0.0, 9.0, 12.0]
    summary = run.summary()
    assert summary["max_waiting_tasks"] == 2 and summary["delayed_tasks"] == 2
    assert summary["queueing_delay_s"]["mean"] == 7.0


def test_time_mode_backfills_a_small_task_past_a_blocked_one_and_compresses_time() -> None:
    tasks = [
        task("a", gpus=1, milli=600, creation_time=0, deletion_time=100),
        task("big", gpus=1, creation_time=10, deletion_time=20),
        task("small", gpus=1, milli=400, creation_time=20, deletion_time=30),
    ]
    run = run_time([node("n", gpus=1)], tasks, "binpack", seed=0, time_scale=10)
    # arrivals at 0, 1, 2; "small" fits beside "a" at once, "big" waits for "a" (t = 100).
    assert run.queueing_delay.tolist() == [0.0, 0.0, 99.0]


def write(tmp_path: Path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


NODES_CSV = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"n{i},32000,131072,4,{'T4' if i % 2 else 'V100M16'}\n" for i in range(6)
)
SLICES = [1000, 300, 470, 810]
PODS_CSV = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + "".join(
    f"p{i},{2000 + 500 * (i % 5)},4096,{1 + (i % 7 == 0)},{SLICES[i % 4] if i % 7 else 1000},"
    f"{'T4' if i % 9 == 0 else ''}\n"
    for i in range(30)
)


def test_the_replay_command_writes_csv_png_and_a_json_summary(tmp_path: Path) -> None:
    out = tmp_path / "out"
    call_command(
        "replay",
        "--nodes",
        write(tmp_path, "n.csv", NODES_CSV),
        "--pods",
        write(tmp_path, "p.csv", PODS_CSV),
        "--policy",
        "random,bestfit",
        "--policy",
        "fgd",
        "--seeds",
        "2",
        "--out",
        str(out),
        "--json",
        str(tmp_path / "summary.json"),
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert list(summary["policies"]) == ["random", "bestfit", "fgd"]
    for numbers in summary["policies"].values():
        assert set(numbers["unallocated_gpu_pct"]) == {"mean", "std"}
        assert numbers["seconds_per_run"]["mean"] > 0 and len(numbers["runs"]) == 2
    assert {p.name for p in out.iterdir()} == {
        "arrival_runs.csv",
        "arrival_curve.csv",
        "arrival_allocation.png",
        "arrival_unallocated.png",
    }
    assert (out / "arrival_allocation.png").read_bytes()[:4] == b"\x89PNG"


def test_the_replay_command_time_mode_writes_its_files(tmp_path: Path) -> None:
    pods = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n" + "".join(
        f"p{i},1000,1024,1,{[1000, 500][i % 2]},{i * 10},{i * 10 + 35}\n" for i in range(20)
    )
    out = tmp_path / "out"
    call_command(
        "replay",
        "--nodes",
        write(tmp_path, "n.csv", NODES_CSV),
        "--pods",
        write(tmp_path, "p.csv", pods),
        "--policy",
        "spread",
        "--mode",
        "time",
        "--seeds",
        "1",
        "--out",
        str(out),
        "--json",
        str(tmp_path / "t.json"),
    )
    summary = json.loads((tmp_path / "t.json").read_text())
    assert summary["policies"]["spread"]["runs"][0]["started_tasks"] == 20
    assert (out / "time_runs.csv").exists() and (out / "time_timeline.png").exists()


def test_bad_input_stops_the_command_before_anything_is_replayed(tmp_path: Path) -> None:
    bad = PODS_CSV.replace("p12,", "p12,-")
    out = tmp_path / "out"
    with pytest.raises(CommandError, match=r"p\.csv, line 14, column 'cpu_milli': negative"):
        call_command(
            "replay",
            "--nodes",
            write(tmp_path, "n.csv", NODES_CSV),
            "--pods",
            write(tmp_path, "p.csv", bad),
            "--policy",
            "random",
            "--out",
            str(out),
        )
    assert not out.exists()
    with pytest.raises(CommandError, match="unknown GPU model A100"):
        call_command(
            "replay",
            "--nodes",
            str(tmp_path / "n.csv"),
            "--pods",
            write(tmp_path, "q.csv", PODS_CSV.replace(",T4\n", ",A100\n", 1)),
            "--policy",
            "random",
            "--out",
            str(out),
        )
    with pytest.raises(CommandError, match="unknown policy"):
        call_command(
            "replay",
            "--nodes",
            str(tmp_path / "n.csv"),
            "--pods",
            str(tmp_path / "q.csv"),
            "--policy",
            "tetris",
            "--out",
            str(out),
        )


def test_the_replay_command_defaults_to_the_recommended_policy_and_all_runs_every_one(
    tmp_path: Path,
) -> None:
    common = ["--nodes", write(tmp_path, "n.csv", NODES_CSV), "--pods"]
    common += [write(tmp_path, "p.csv", PODS_CSV), "--seeds", "1", "--out", str(tmp_path / "o")]
    call_command("replay", *common, "--json", str(tmp_path / "d.json"))
    assert list(json.loads((tmp_path / "d.json").read_text())["policies"]) == [RECOMMENDED]
    call_command("replay", *common, "--policy", "all", "--json", str(tmp_path / "a.json"))
    everyone = json.loads((tmp_path / "a.json").read_text())["policies"]
    assert list(everyone) == list(POLICIES)
    assert set(everyone[RECOMMENDED]) == {
        "unallocated_gpu_pct",
        "fragmented_gpu_pct",
        "failed_tasks",
        "seconds_per_run",
        "runs",
    }


def test_a_benchmark_replay_measures_fragmentation_only_where_it_reports_it() -> None:
    nodes = [node(f"n{i}", gpus=2, cpu=32_000) for i in range(6)]
    tasks = [task(f"t{i}", gpus=1, milli=[300, 700, 1000][i % 3]) for i in range(40)]
    full = run_arrival(nodes, tasks, "fgd", 42)
    lean = run_arrival(nodes, tasks, "fgd", 42, curves=False)
    assert lean.unallocated_pct == full.unallocated_pct
    assert lean.fragmented_pct == pytest.approx(full.fragmented_pct)
    assert np.isnan(lean.fragmented_milli).any()
