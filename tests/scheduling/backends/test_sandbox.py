"""Isolation of local workloads: the bubblewrap sandbox, cgroup limits, Stop, MPS.

Real bubblewrap and real cgroups where the host has them; where it does not, the test skips
and says why. Homes, the "portal's database" and other workloads live under the test's tmp
dir, as they would under the portal's data dir.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from websockets.sync.client import connect

from scheduling.backends import registry, sandbox
from scheduling.backends.base import (
    TERMINAL_PHASES,
    GpuInfo,
    Handle,
    Phase,
    Resources,
    TaskPlacement,
    WorkloadSpec,
)
from scheduling.backends.local import LocalBackend
from scheduling.models import Cluster
from tests.scheduling.backends.contract import all_logs, wait_for
from tests.scheduling.backends.test_local import assert_none_left, get

GRACE = 2.0


def need_bwrap() -> None:
    problem = sandbox.bwrap_problem()
    if problem is not None:
        pytest.skip(f"no sandbox on this host: {problem}")


def need_cgroups() -> sandbox.Cgroups:
    cgroups, why = sandbox.detect_cgroups()
    if cgroups is None:
        pytest.skip(f"no writable cgroup on this host: {why}")
    return cgroups


@pytest.fixture
def portal(tmp_path: Path) -> Path:
    """A stand-in for the portal's data dir: its database, the homes, the workloads' root."""
    data = tmp_path / "var"
    (data / "homes" / "alice").mkdir(parents=True)
    (data / "homes" / "bob").mkdir(parents=True)
    (data / "homes" / "bob" / "thesis.txt").write_text("bob's secret draft")
    (data / "db.sqlite3").write_text("SQLite format 3 (the portal's database)")
    return data


@pytest.fixture
def backend(portal: Path) -> LocalBackend:
    need_bwrap()
    return LocalBackend(
        portal / "workloads", node_name="test-node", gpus=(), stop_grace_seconds=GRACE
    )


@pytest.fixture(autouse=True)
def no_stray_processes(tmp_path: Path) -> Iterator[None]:
    yield
    root = tmp_path / "var" / "workloads"
    if root.is_dir():
        sweeper = LocalBackend(root, stop_grace_seconds=GRACE)
        deadline = time.monotonic() + 3 * GRACE
        while (alive := sweeper.running()) and time.monotonic() < deadline:
            for workload_id in alive:
                sweeper.stop(Handle(workload_id))
            time.sleep(0.1)
    assert_none_left(tmp_path)


def job(owner: str, portal: Path, script: str, **fields: Any) -> WorkloadSpec:
    fields.setdefault("workload_id", str(uuid.uuid4()))
    return WorkloadSpec(
        kind="job", app="command", owner=owner,
        command=("sh", "-c", script), working_dir=str(portal / "homes" / owner), **fields,
    )  # fmt: skip


def run_to_end(backend: LocalBackend, spec: WorkloadSpec, timeout: float = 60) -> str:
    handle = backend.submit(spec)
    observation = wait_for(backend, handle, *TERMINAL_PHASES, timeout=timeout)
    assert observation.phase == Phase.SUCCEEDED, (observation, all_logs(backend, handle))
    return all_logs(backend, handle)


def test_a_workload_sees_its_home_but_not_other_homes_the_database_or_other_workloads(
    backend: LocalBackend, portal: Path
) -> None:
    # Bob's notebook-like server runs first: its token and state.json lie under the root.
    other = backend.submit(job("bob", portal, "sleep 300"))
    other_dir = portal / "workloads" / other.workload_id
    assert (other_dir / "state.json").is_file()

    own_id = str(uuid.uuid4())
    own_dir = portal / "workloads" / own_id
    output = run_to_end(
        backend,
        job(
            "alice",
            portal,
            f"cat {own_dir}/state.json || echo NO-OWN-STATE; "
            f"cat {portal}/homes/bob/thesis.txt || echo NO-BOB; "
            f"ls {portal}/homes/bob || echo NO-BOB-DIR; "
            f"cat {portal}/db.sqlite3 || echo NO-DB; "
            f"cat {other_dir}/state.json || echo NO-STATE; "
            f"ls {portal}/workloads/{other.workload_id} || echo NO-WORKLOAD; "
            f"echo mine > {portal}/homes/alice/notes.txt && echo WROTE; "
            "ls /sys/fs/cgroup || echo NO-CGROUPFS; "
            "echo x > /usr/quanta-test || echo RO-USR; "
            "ps -e -o pid= | wc -l",
            workload_id=own_id,
        ),
    )
    assert (own_dir / "state.json").is_file()  # it exists, but not inside the sandbox
    for refused in (
        "NO-OWN-STATE",
        "NO-BOB",
        "NO-BOB-DIR",
        "NO-DB",
        "NO-STATE",
        "NO-WORKLOAD",
        "NO-CGROUPFS",
    ):
        assert refused in output
    assert "RO-USR" in output
    assert "secret draft" not in output and "SQLite" not in output and "token" not in output
    assert "WROTE" in output
    assert (portal / "homes" / "alice" / "notes.txt").read_text() == "mine\n"
    backend.stop(other)
    wait_for(backend, other, Phase.STOPPED, timeout=GRACE + 10)


def test_each_workload_has_a_private_tmp(backend: LocalBackend, portal: Path) -> None:
    first = backend.submit(
        job("alice", portal, "echo alice > /tmp/left-here && echo written; sleep 300")
    )
    deadline = time.monotonic() + 20
    while "written" not in all_logs(backend, first):
        assert time.monotonic() < deadline, all_logs(backend, first)
        time.sleep(0.1)
    output = run_to_end(backend, job("bob", portal, "ls /tmp; cat /tmp/left-here || echo NONE"))
    assert "NONE" in output and "alice" not in output
    assert not Path("/tmp/left-here").exists()
    backend.stop(first)
    wait_for(backend, first, Phase.STOPPED, timeout=GRACE + 10)


SETSID_JOB = (
    # A child in a new session, and a double-forked daemon that ignores SIGTERM and whose
    # parent exits at once: neither is in the task's session or tree on the host.
    "setsid sleep 1000 & "
    "(setsid sh -c 'trap \"\" TERM; while :; do sleep 1; done' &); "
    "echo started; wait"
)


def test_stop_leaves_no_process_behind_including_setsid_children_and_daemons(
    backend: LocalBackend, portal: Path
) -> None:
    handle = backend.submit(job("alice", portal, SETSID_JOB))
    deadline = time.monotonic() + 20
    while "started" not in all_logs(backend, handle):
        assert time.monotonic() < deadline, all_logs(backend, handle)
        time.sleep(0.1)
    time.sleep(0.3)
    home = str(portal / "homes" / "alice")
    sleepers = [
        p for p in psutil.process_iter(["name", "environ"])
        if (p.info["environ"] or {}).get("HOME") == home and p.info["name"] in ("sleep", "sh")
    ]  # fmt: skip
    assert len(sleepers) >= 3  # the sh, the setsid sleep, the daemon (and its sleep)
    backend.stop(handle)
    observation = wait_for(backend, handle, Phase.STOPPED, timeout=GRACE + 10)
    assert str(observation.reason) == "stopped on request"
    for process in sleepers:
        assert not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    assert handle.workload_id not in backend.running()
    assert_none_left(portal, timeout=1)


def test_a_memory_hog_is_killed_with_a_reason_that_names_the_memory_limit(
    backend: LocalBackend, portal: Path
) -> None:
    need_cgroups()
    hog = (
        'python -c "b = []\n'
        "for _ in range(4096): b.append(bytearray(1024 * 1024))\n"
        "print('still alive with 4 GiB')\""
    )
    handle = backend.submit(job("alice", portal, hog, resources=Resources(memory_mib=128)))
    observation = wait_for(backend, handle, *TERMINAL_PHASES, timeout=60)
    assert observation.phase == Phase.FAILED, all_logs(backend, handle)
    reason = str(observation.reason)
    assert "killed for using more than its 128 MiB of memory" in reason, reason
    assert "still alive" not in all_logs(backend, handle)


def test_a_fork_bomb_hits_the_pids_limit_and_the_host_stays_fine(portal: Path) -> None:
    need_bwrap()
    need_cgroups()
    backend = LocalBackend(
        portal / "workloads", node_name="test-node", gpus=(), stop_grace_seconds=GRACE,
        pids_max=64,
    )  # fmt: skip
    # Bounded on purpose (500 sleepers at most), so it cannot hurt a host without limits.
    bomb = (
        'python -c "import os, time\n'
        "n = 0\n"
        "try:\n"
        "    for _ in range(500):\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(300)\n"
        "            os._exit(0)\n"
        "        n += 1\n"
        "except OSError as error:\n"
        "    print('fork refused after', n, error.strerror)\n"
        "print('forked', n)\""
    )
    handle = backend.submit(job("alice", portal, bomb))
    deadline = time.monotonic() + 60
    while "forked" not in all_logs(backend, handle):
        assert time.monotonic() < deadline, all_logs(backend, handle)
        time.sleep(0.2)
    output = all_logs(backend, handle)
    assert "fork refused after" in output, output
    forked = int(output.split("forked ")[-1].split()[0])
    assert forked < 64
    assert subprocess.run(["true"], check=False).returncode == 0  # the host still forks
    wait_for(backend, handle, *TERMINAL_PHASES, timeout=30)
    assert_none_left(portal, timeout=5)  # the 60-odd sleepers went with the sandbox


def test_cpu_memory_and_pids_limits_are_written_to_the_tasks_cgroup(
    backend: LocalBackend, portal: Path
) -> None:
    cgroups = need_cgroups()
    spec = job(
        "alice", portal, "cat /proc/self/cgroup; sleep 300",
        resources=Resources(cpu_milli=1500, memory_mib=256),
    )  # fmt: skip
    handle = backend.submit(spec)
    directories = handle.state["tasks"][0]["cgroups"]
    assert directories
    runner = int(handle.state["tasks"][0]["pid"])
    deadline = time.monotonic() + 10
    while runner not in sandbox.members(directories):  # the runner joins, then starts bwrap
        assert time.monotonic() < deadline, all_logs(backend, handle)
        time.sleep(0.05)
    if cgroups.version == 2:
        (directory,) = map(Path, directories)
        assert (directory / "memory.max").read_text().strip() == str(256 * 1024 * 1024)
        assert (directory / "cpu.max").read_text().split() == ["150000", "100000"]
        assert (directory / "pids.max").read_text().strip() == "4096"
    else:
        by_controller = {Path(d).parent.name: Path(d) for d in directories}
        values = {
            name: (Path(d) / name).read_text().strip()
            for d in directories
            for name in ("memory.limit_in_bytes", "cpu.cfs_quota_us", "pids.max")
            if (Path(d) / name).exists()
        }
        assert values["memory.limit_in_bytes"] == str(256 * 1024 * 1024)
        assert values["cpu.cfs_quota_us"] == "150000"
        assert values["pids.max"] == "4096"
        assert by_controller
    backend.stop(handle)
    wait_for(backend, handle, Phase.STOPPED, timeout=GRACE + 10)
    observation = backend.observe([handle])[handle.workload_id]
    assert observation.phase == Phase.STOPPED
    for directory in directories:  # removed once the workload ended
        assert not Path(directory).exists()


def test_an_environment_starts_on_more_cpu_and_is_lowered_to_its_size_once_it_answers(
    portal: Path,
) -> None:
    """The start-up boost: JupyterLab on a ½-CPU size starts with its cap at 2 cores (its
    weight stays that of ½ CPU, so a contended host still shares by size), and is capped at
    its size again a set time after it first answers. A job is never boosted."""
    need_bwrap()
    need_cgroups()
    backend = LocalBackend(
        portal / "workloads", node_name="test-node", gpus=(), stop_grace_seconds=GRACE,
        startup_cpu_milli=2000, startup_boost_seconds=0.5,
    )  # fmt: skip
    workload_id = str(uuid.uuid4())
    spec = WorkloadSpec(
        workload_id=workload_id, kind="notebook", app="jupyter", owner="alice",
        base_url=f"/nb/{workload_id}/", working_dir=str(portal / "homes" / "alice"),
        resources=Resources(cpu_milli=500, memory_mib=1024),
    )  # fmt: skip
    handle = backend.submit(spec)
    directories = handle.state["tasks"][0]["cgroups"]
    assert sandbox.cpu_cap_milli(directories) == 2000
    weights = [
        (Path(d) / name).read_text().strip()
        for d in directories
        for name in ("cpu.weight", "cpu.shares")
        if (Path(d) / name).exists()
    ]
    assert weights and weights[0] in ("512", str(sandbox._weight(500)))
    wait_for(backend, handle, Phase.RUNNING, timeout=90)
    assert sandbox.cpu_cap_milli(directories) == 2000  # still starting its first page
    deadline = time.monotonic() + 10
    while sandbox.cpu_cap_milli(directories) != 500:
        assert time.monotonic() < deadline, "the boost was never lowered"
        time.sleep(0.2)
        backend.observe([handle])
    the_job = backend.submit(
        job("alice", portal, "sleep 300", resources=Resources(cpu_milli=500, memory_mib=64))
    )
    assert sandbox.cpu_cap_milli(the_job.state["tasks"][0]["cgroups"]) == 500
    for h in (handle, the_job):
        backend.stop(h)
        wait_for(backend, h, Phase.STOPPED, timeout=GRACE + 10)


def test_cgroup_v2_where_the_host_has_it(portal: Path) -> None:
    unified = next((Path(p) for p, kind, _ in sandbox._mounts() if kind == "cgroup2"), None)
    if unified is None:
        pytest.skip("this host has no cgroup v2 hierarchy mounted")
    cgroups, why = sandbox._detect_v2(unified, None, sandbox._own_cgroups().get("unified", "/"))
    if cgroups is None:
        pytest.skip(f"cgroup v2 is mounted but not usable here: {why}")
    (directory,) = cgroups.create("quanta-test-v2", cpu_milli=500, memory_mib=64, pids_max=32)
    try:
        assert Path(directory, "memory.max").read_text().strip() == str(64 * 1024 * 1024)
        assert Path(directory, "pids.max").read_text().strip() == "32"
        assert Path(directory, "cpu.max").read_text().split() == ["50000", "100000"]
    finally:
        assert sandbox.remove([directory])


def test_a_process_entering_the_sandbox_sees_the_home_not_the_portal_and_dies_on_stop(
    backend: LocalBackend, portal: Path
) -> None:
    handle = backend.submit(job("alice", portal, "echo ready; sleep 300"))
    deadline = time.monotonic() + 20
    prefix: list[str] = []
    while not prefix:
        assert time.monotonic() < deadline, all_logs(backend, handle)
        prefix = backend._sandbox_enter_prefix(
            backend._read_state(portal / "workloads" / handle.workload_id) or {}
        )
        time.sleep(0.1)
    seen = subprocess.run(
        [*prefix, "sh", "-c", f"pwd; ls {portal}/homes; cat {portal}/db.sqlite3 || echo NO-DB; "
         "echo $QUANTA_WORKLOAD_ID"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert seen.stdout.splitlines()[0] == str(portal / "homes" / "alice")
    assert "alice" in seen.stdout and "bob" not in seen.stdout
    assert "NO-DB" in seen.stdout
    assert handle.workload_id in seen.stdout

    entered = subprocess.Popen(
        [*prefix, "sleep", "1000"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    time.sleep(0.5)
    sleeper = psutil.Process(entered.pid).children(recursive=True)
    assert sleeper, "nsenter did not start the command"
    directories = handle.state["tasks"][0]["cgroups"]
    if directories:
        assert sleeper[-1].pid in sandbox.members(directories)
    backend.stop(handle)
    wait_for(backend, handle, Phase.STOPPED, timeout=GRACE + 10)
    assert entered.wait(timeout=10) != 0
    assert not sleeper[-1].is_running() or sleeper[-1].status() == psutil.STATUS_ZOMBIE


def test_without_a_sandbox_the_enter_prefix_is_empty(portal: Path) -> None:
    backend = LocalBackend(portal / "workloads", gpus=(), sandbox="off")
    handle = backend.submit(job("alice", portal, "sleep 300"))
    assert backend._sandbox_enter_prefix(handle.state) == []
    assert backend.isolation.sandbox is None
    assert backend.nodes()[0].labels["quanta.io/sandbox"] == "off"
    backend.stop(handle)
    wait_for(backend, handle, Phase.STOPPED, timeout=GRACE + 15)


def test_required_refuses_to_start_without_bubblewrap(portal: Path) -> None:
    backend = LocalBackend(
        portal / "workloads", gpus=(), sandbox="required", bwrap="no-such-bwrap-here"
    )
    with pytest.raises(Exception, match=r"only in a sandbox.*no-such-bwrap-here is not installed"):
        backend.submit(job("alice", portal, "true"))


def test_the_node_says_what_isolation_is_in_force(backend: LocalBackend) -> None:
    labels = backend.nodes()[0].labels
    assert labels["quanta.io/sandbox"] == "bubblewrap"
    assert labels["quanta.io/limits"] in ("cgroup-v1", "cgroup-v2", "rlimit")
    assert labels["quanta.io/gpu-shares"] in ("mps", "not-isolated")


def test_mps_limits_each_share_where_mps_runs(
    portal: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipe = portal / "mps"
    pipe.mkdir()
    monkeypatch.setattr(sandbox, "detect_mps", lambda: pipe)
    backend = LocalBackend(
        portal / "workloads", node_name="gpu-node", gpus=(GpuInfo(0, "A100", 40960),),
        sandbox="off",
    )  # fmt: skip
    assert backend.isolation.gpu_shares == "mps"
    assert backend.nodes()[0].labels["quanta.io/gpu-shares"] == "mps"
    spec = job(
        "alice", portal, "true",
        resources=Resources(gpu_milli=250, gpu_memory_mib=10240),
        placement=(TaskPlacement("gpu-node", (0,)),),
    )  # fmt: skip
    env = backend._env(spec, spec.placement[0], portal / "homes" / "alice")
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=10240M"
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == str(pipe)
    whole = job("alice", portal, "true", placement=(TaskPlacement("gpu-node", (0,)),))
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in backend._env(
        whole, whole.placement[0], portal / "homes" / "alice"
    )


def test_without_mps_the_node_says_gpu_shares_are_not_isolated(
    portal: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox, "detect_mps", lambda: None)
    backend = LocalBackend(portal / "workloads", gpus=(GpuInfo(0, "A100", 40960),), sandbox="off")
    assert backend.nodes()[0].labels["quanta.io/gpu-shares"] == "not-isolated"
    assert any("not isolated" in note for note in backend.isolation.notes)


def test_a_sandboxed_notebook_serves_jupyterlab_and_its_terminal(
    backend: LocalBackend, portal: Path
) -> None:
    spec = WorkloadSpec(
        workload_id=str(uuid.uuid4()), kind="notebook", app="terminal", owner="alice",
        base_url="/nb/t/", working_dir=str(portal / "homes" / "alice"),
    )  # fmt: skip
    handle = backend.submit(spec)
    wait_for(backend, handle, Phase.RUNNING, timeout=90)
    endpoint = backend.endpoint(handle)
    assert endpoint is not None
    request = urllib.request.Request(
        endpoint.url + "api/terminals", data=b"{}", headers=dict(endpoint.headers), method="POST"
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=20) as response:
        assert response.status == 200
        name = json.loads(response.read())["name"]
    # The terminal is a real shell on a pty of the sandbox's own devpts.
    url = endpoint.url.replace("http://", "ws://") + f"terminals/websocket/{name}"
    seen = ""
    with connect(url, additional_headers=dict(endpoint.headers), open_timeout=20) as socket:
        socket.send(json.dumps(["stdin", "tty; ls /tmp | wc -l; echo done-$((6*7))\r"]))
        deadline = time.monotonic() + 30
        while "done-42" not in seen:
            assert time.monotonic() < deadline, seen
            kind, *rest = json.loads(socket.recv(timeout=30))
            if kind == "stdout":
                seen += rest[0]
    assert "/dev/pts/" in seen
    status, _ = get(endpoint.url + "api/status")
    assert status == 403 or status == 401  # no token, no entry
    assert os.path.isdir(portal / "workloads" / handle.workload_id / "run" / "jupyter")
    backend.stop(handle)
    wait_for(backend, handle, Phase.STOPPED, timeout=GRACE + 15)


def test_without_cgroups_memory_is_bounded_by_an_rlimit_and_the_node_says_so(
    portal: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox, "detect_cgroups", lambda parent=None: (None, "none writable"))
    backend = LocalBackend(portal / "workloads", gpus=(), stop_grace_seconds=GRACE)
    assert backend.isolation.limits == "rlimit"
    assert backend.nodes()[0].labels["quanta.io/limits"] == "rlimit"
    assert any(
        "not enforced" in note and "none writable" in note for note in backend.isolation.notes
    )
    hog = "python -c \"b = bytearray(512 * 1024 * 1024); print('got 512 MiB')\""
    handle = backend.submit(job("alice", portal, hog, resources=Resources(memory_mib=128)))
    observation = wait_for(backend, handle, *TERMINAL_PHASES, timeout=60)
    assert observation.phase == Phase.FAILED
    assert "MemoryError" in str(observation.reason)
    assert handle.state["tasks"][0]["cgroups"] == []


def test_the_portals_settings_reach_the_local_backend(settings: Any, tmp_path: Path) -> None:
    settings.DATA_DIR = tmp_path
    settings.LOCAL_SANDBOX = "required"
    settings.LOCAL_SANDBOX_NETWORK = "none"
    settings.LOCAL_SANDBOX_PIDS_MAX = 100
    settings.LOCAL_CGROUP_PARENT = "/quanta-test"
    cluster = Cluster(pk=987654, name="Lab", slug="lab-sandbox", backend="local", config={})
    registry.forget()
    try:
        backend = registry.get_backend(cluster)
        assert isinstance(backend, LocalBackend)
        assert backend.sandbox_mode == "required"
        assert backend.sandbox_network == "none"
        assert backend.pids_max == 100
        assert backend.cgroup_parent == "/quanta-test"
    finally:
        registry.forget()
