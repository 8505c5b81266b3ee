"""The local backend: real processes on this host (the contract, then what is local to it).

Every test leaves no process behind: ``no_stray_processes`` stops whatever is still running
under the test's root and fails the test if a process of its workloads survives.
"""

from __future__ import annotations

import json
import os
import re
import stat
import textwrap
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from scheduling.backends import gpus as gpus_module
from scheduling.backends.base import (
    TERMINAL_PHASES,
    Backend,
    BackendError,
    GpuInfo,
    Handle,
    Phase,
    Resources,
    TaskPlacement,
    WorkloadSpec,
)
from scheduling.backends.local import LocalBackend
from tests.scheduling.backends.contract import BackendContract, all_logs, wait_for

GRACE = 2.0


def workload_processes(home_prefix: Path) -> list[psutil.Process]:
    """Processes of local workloads whose HOME (their working dir) lies under a test's dir:
    runners, commands and anything they started (kernels keep the environment too)."""
    found = []
    for process in psutil.process_iter():
        try:
            env = process.environ()
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            continue
        if "QUANTA_WORKLOAD_ID" in env and env.get("HOME", "").startswith(str(home_prefix)):
            found.append(process)
    return found


def assert_none_left(home_prefix: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while (left := workload_processes(home_prefix)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for process in left:  # do not leave them to the next test, then say so
        process.kill()
    assert not left, f"stray processes: {[p.pid for p in left]}"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "root"


@pytest.fixture
def backend(root: Path) -> LocalBackend:
    return LocalBackend(root, node_name="test-node", gpus=(), stop_grace_seconds=GRACE)


@pytest.fixture(autouse=True)
def no_stray_processes(tmp_path: Path) -> Iterator[None]:
    yield
    root = tmp_path / "root"
    if root.is_dir():
        sweeper = LocalBackend(root, stop_grace_seconds=GRACE)
        deadline = time.monotonic() + 3 * GRACE
        while (alive := sweeper.running()) and time.monotonic() < deadline:
            for workload_id in alive:
                sweeper.stop(Handle(workload_id))
            time.sleep(0.1)
    assert_none_left(tmp_path)


def job(command: tuple[str, ...], **fields: Any) -> WorkloadSpec:
    return WorkloadSpec(
        workload_id=str(uuid.uuid4()), kind="job", app="command", owner="bob", command=command,
        **fields,
    )  # fmt: skip


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, b""


class TestLocalBackendKeepsTheContract(BackendContract):
    def started(self, backend: Backend, handle: Handle) -> object:
        return [(task["pid"], task["create_time"]) for task in handle.state["tasks"]]


# -- jobs ------------------------------------------------------------------------------------


def test_a_failing_worker_fails_the_gang_and_its_peers_are_killed(
    backend: LocalBackend, root: Path
) -> None:
    command = (
        "sh", "-c",
        'if [ "$RANK" = 1 ]; then sleep 0.5; echo worker one gives up; exit 3; fi; exec sleep 300',
    )  # fmt: skip
    handle = backend.submit(job(command, workers=3))
    observation = wait_for(backend, handle, *TERMINAL_PHASES)
    assert observation.phase == Phase.FAILED
    assert str(observation.reason) == "worker 1 exited with code 3: worker one gives up"
    assert observation.exit_code == 3
    assert_none_left(root / handle.workload_id, timeout=GRACE + 3)
    assert handle.workload_id not in backend.running()
    # The peers' own exits (SIGTERM) do not change the verdict.
    assert backend.observe([handle])[handle.workload_id].reason == observation.reason


def test_a_job_that_ignores_sigterm_is_killed_once_the_grace_period_is_over(root: Path) -> None:
    backend = LocalBackend(root, stop_grace_seconds=0.5)
    handle = backend.submit(job(("sh", "-c", "trap '' TERM; echo deaf; sleep 300")))
    while "deaf" not in all_logs(backend, handle):
        time.sleep(0.05)
    backend.stop(handle)
    time.sleep(0.3)
    assert backend.observe([handle])[handle.workload_id].phase == Phase.RUNNING  # still deaf
    assert str(wait_for(backend, handle, Phase.STOPPED, timeout=5).reason) == "stopped on request"
    assert_none_left(root, timeout=1)


ESCAPING_JOB = (
    "sh", "-c",
    # A child that calls setsid (still a descendant), and a double fork into a new session
    # whose parent exits at once: it belongs to no task's session and to no one's tree. It
    # ignores SIGTERM, so only the SIGKILL after the grace can end it.
    "setsid sleep 300 & "
    "(setsid sh -c 'trap \"\" TERM; echo $$ > escapee.pid; while :; do sleep 1; done' &); "
    "echo started; wait",
)  # fmt: skip


def marked(workload_id: str) -> list[psutil.Process]:
    """Live processes whose environment says they belong to ``workload_id``."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("QUANTA_WORKLOAD_ID") != workload_id:
                continue
            if process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.Error:
            continue
    return found


def test_stop_kills_what_left_the_tasks_session_and_waits_for_it(root: Path) -> None:
    # Without a sandbox (LOCAL_SANDBOX=off, or no bubblewrap): the environment marking finds
    # the escapee. Inside one, the sandbox's end takes it along (tests/…/test_sandbox.py).
    backend = LocalBackend(
        root, node_name="test-node", gpus=(), stop_grace_seconds=GRACE, sandbox="off"
    )
    handle = backend.submit(job(ESCAPING_JOB))
    escapee_file = root / handle.workload_id / "work" / "escapee.pid"
    deadline = time.monotonic() + 10
    while not escapee_file.is_file() or not escapee_file.read_text().strip():
        assert time.monotonic() < deadline, all_logs(backend, handle)
        time.sleep(0.05)
    escapee = psutil.Process(int(escapee_file.read_text()))
    runner = int(handle.state["tasks"][0]["pid"])
    assert os.getsid(escapee.pid) != runner  # out of the task's session
    assert runner not in [parent.pid for parent in escapee.parents()]  # and out of its tree

    backend.stop(handle)
    # The task's own processes end on SIGTERM; the escapee does not, and while it lives the
    # workload is not reported gone (so the portal keeps sending the stop).
    deadline = time.monotonic() + GRACE - 0.3
    while time.monotonic() < deadline:
        assert escapee.is_running() and escapee.status() != psutil.STATUS_ZOMBIE
        assert backend.observe([handle])[handle.workload_id].phase not in TERMINAL_PHASES
        assert handle.workload_id in backend.running()
        time.sleep(0.2)
    observation = wait_for(backend, handle, Phase.STOPPED, timeout=GRACE + 5)
    assert str(observation.reason) == "stopped on request"
    assert marked(handle.workload_id) == []
    assert handle.workload_id not in backend.running()


def test_a_job_that_exits_leaves_no_daemon_behind(backend: LocalBackend, root: Path) -> None:
    command = ("sh", "-c", "(setsid sh -c 'sleep 300 &' &); sleep 0.3; echo done")
    handle = backend.submit(job(command))
    assert wait_for(backend, handle, *TERMINAL_PHASES).phase == Phase.SUCCEEDED
    deadline = time.monotonic() + 5
    while marked(handle.workload_id) and time.monotonic() < deadline:
        backend.observe([handle])
        time.sleep(0.1)
    assert marked(handle.workload_id) == []


def test_workers_get_their_rank_world_size_one_master_port_and_not_the_portals_secrets(
    backend: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgres://portal:secret@db/quanta")
    report = (
        "rank=$RANK local=$LOCAL_RANK node=$NODE_RANK world=$WORLD_SIZE addr=$MASTER_ADDR "
        "port=$MASTER_PORT gpus=[$CUDA_VISIBLE_DEVICES] unbuffered=$PYTHONUNBUFFERED "
        "extra=$EXTRA db=[$DATABASE_URL] cwd=$(pwd)"
    )
    spec = job(("sh", "-c", f'echo "{report}"'), workers=2, env={"EXTRA": "from-the-template"})
    handle = backend.submit(spec)
    assert wait_for(backend, handle, *TERMINAL_PHASES).phase == Phase.SUCCEEDED
    port = handle.state["master_port"]
    cwd = backend.root / spec.workload_id / "work"
    for rank in (0, 1):
        assert all_logs(backend, handle, task=rank).strip() == (
            f"rank={rank} local={rank} node=0 world=2 addr=127.0.0.1 port={port} gpus=[] "
            f"unbuffered=1 extra=from-the-template db=[] cwd={cwd}"
        )
    assert backend.logs(handle).tasks == 2


def test_logs_read_in_small_chunks_reassemble_multibyte_text(backend: LocalBackend) -> None:
    text = "héllo wörld ✓ 学习 " * 20
    handle = backend.submit(job(("printf", "%s", text)))
    wait_for(backend, handle, *TERMINAL_PHASES)
    pieces, offset = [], 0
    while (chunk := backend.logs(handle, offset=offset, limit=5)).next_offset != offset:
        pieces.append(chunk.text)
        offset = chunk.next_offset
    assert "".join(pieces) == text
    assert backend.logs(handle, task=7).text == ""


def test_a_new_backend_over_the_same_root_reattaches_and_stops_the_job(root: Path) -> None:
    before_restart = LocalBackend(root, stop_grace_seconds=GRACE)
    handle = before_restart.submit(job(("sh", "-c", "echo started; exec sleep 300")))
    wait_for(before_restart, handle, Phase.RUNNING)
    while "started" not in all_logs(before_restart, handle):
        time.sleep(0.05)

    after_restart = LocalBackend(root, stop_grace_seconds=GRACE)
    bare = Handle(handle.workload_id)  # everything it needs is under root
    assert handle.workload_id in after_restart.running()
    assert after_restart.observe([bare])[handle.workload_id].phase == Phase.RUNNING
    after_restart.stop(bare)
    assert str(wait_for(after_restart, bare, Phase.STOPPED).reason) == "stopped on request"
    assert "started" in all_logs(after_restart, bare)
    assert handle.workload_id not in before_restart.running()


def test_a_lost_state_file_is_rebuilt_from_the_portals_copy_of_the_handle(root: Path) -> None:
    backend = LocalBackend(root, stop_grace_seconds=GRACE)
    handle = backend.submit(job(("sleep", "300")))
    (root / handle.workload_id / "state.json").unlink()
    assert backend.observe([Handle(handle.workload_id)])[handle.workload_id].phase == Phase.UNKNOWN

    assert backend.observe([handle])[handle.workload_id].phase == Phase.RUNNING
    backend.stop(handle)
    wait_for(backend, handle, Phase.STOPPED)


def test_a_gang_left_half_started_by_a_crashed_portal_is_failed_and_killed(
    backend: LocalBackend, root: Path
) -> None:
    handle = backend.submit(job(("sleep", "300")))
    state_file = root / handle.workload_id / "state.json"
    state = json.loads(state_file.read_text())
    state_file.write_text(json.dumps({**state, "workers": 2}))  # as if task 1 never started
    observation = backend.observe([handle])[handle.workload_id]
    assert (observation.phase, str(observation.reason)) == (
        Phase.FAILED, "only 1 of 2 tasks were started",
    )  # fmt: skip
    assert_none_left(root / handle.workload_id, timeout=2)


def test_a_job_without_a_command_or_with_an_unknown_program_fails_plainly(
    backend: LocalBackend,
) -> None:
    with pytest.raises(BackendError, match="needs a command"):
        backend.submit(job(()))
    handle = backend.submit(job(("no-such-program-here",)))
    observation = wait_for(backend, handle, *TERMINAL_PHASES)
    assert observation.phase == Phase.FAILED
    assert str(observation.reason).startswith("worker 0 exited with code 127: quanta: cannot start")


# -- GPUs ------------------------------------------------------------------------------------


def test_a_configured_gpu_inventory_is_reported_and_pins_each_worker(root: Path) -> None:
    inventory = (
        GpuInfo(0, "NVIDIA A100-SXM4-40GB", 40960, "GPU-0000"),
        GpuInfo(1, "NVIDIA A100-SXM4-40GB", 40960, "GPU-1111"),
    )
    backend = LocalBackend(
        root, node_name="gpu-host", gpus=inventory, cpu_milli=8000, memory_mib=65536
    )
    (node,) = backend.nodes()
    assert (node.name, node.cpu_milli, node.memory_mib, node.gpus) == (
        "gpu-host", 8000, 65536, inventory,
    )  # fmt: skip
    spec = job(
        ("sh", "-c", 'echo "[$CUDA_VISIBLE_DEVICES] $QUANTA_GPU_MILLI $QUANTA_GPU_MEMORY_MIB"'),
        workers=2,
        resources=Resources(gpu_milli=500, gpu_memory_mib=20480),
        placement=(TaskPlacement("gpu-host", (1,)), TaskPlacement("gpu-host", (0,))),
    )
    handle = backend.submit(spec)
    assert wait_for(backend, handle, *TERMINAL_PHASES).phase == Phase.SUCCEEDED
    assert all_logs(backend, handle, task=0).strip() == "[1] 500 20480"
    assert all_logs(backend, handle, task=1).strip() == "[0] 500 20480"

    with pytest.raises(BackendError, match=r"GPU\(s\) \[7\] do not exist"):
        backend.submit(job(("true",), placement=(TaskPlacement("gpu-host", (7,)),)))
    with pytest.raises(BackendError, match="placed on node 'elsewhere'"):
        backend.submit(job(("true",), placement=(TaskPlacement("elsewhere", ()),)))


def test_gpu_discovery_without_nvml_finds_no_gpus_instead_of_failing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")

    def broken() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", broken)
    assert gpus_module.discover_gpus() == ()


def test_nodes_describe_this_host_when_nothing_is_configured(tmp_path: Path) -> None:
    (node,) = LocalBackend(tmp_path, gpus=()).nodes()
    assert node.cpu_milli == (os.cpu_count() or 1) * 1000
    assert 0 < node.memory_mib == psutil.virtual_memory().total // 2**20
    assert node.gpus == ()


# -- apps beyond JupyterLab: VS Code and desktops are in test_local_apps.py


def test_tensorboard_is_refused_where_it_is_not_installed(backend: LocalBackend) -> None:
    if backend._has_tensorboard():
        pytest.skip("tensorboard is installed here, so it is not refused")
    spec = WorkloadSpec(
        workload_id=str(uuid.uuid4()), kind="notebook", app="tensorboard", owner="bob"
    )
    with pytest.raises(BackendError, match="tensorboard is not installed on this host"):
        backend.submit(spec)


# -- notebooks -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def notebook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalBackend, Handle]]:
    """One real JupyterLab for the module: starting one costs seconds."""
    base = tmp_path_factory.mktemp("notebook")
    backend = LocalBackend(base / "root", stop_grace_seconds=GRACE)
    workload_id = str(uuid.uuid4())
    spec = WorkloadSpec(
        workload_id=workload_id, kind="notebook", app="jupyter", owner="bob",
        base_url=f"/nb/{workload_id}/", working_dir=str(base / "home" / "bob"),
    )  # fmt: skip
    handle = backend.submit(spec)
    try:
        wait_for(backend, handle, Phase.RUNNING, timeout=60)
        yield backend, handle
    finally:
        backend.stop(handle)
        assert wait_for(backend, handle, *TERMINAL_PHASES).phase == Phase.STOPPED
        assert backend.endpoint(handle) is None
        assert_none_left(base)


def test_a_notebook_runs_jupyterlab_that_answers_only_with_its_token(
    notebook: tuple[LocalBackend, Handle],
) -> None:
    backend, handle = notebook
    endpoint = backend.endpoint(handle)
    assert endpoint is not None
    assert endpoint.url == f"http://127.0.0.1:{handle.state['port']}/nb/{handle.workload_id}/"
    status, body = get(endpoint.url + "api/status", dict(endpoint.headers))
    assert status == 200
    assert {"started", "last_activity"} <= set(json.loads(body))
    assert get(endpoint.url + "api/status")[0] in (401, 403)
    assert get(endpoint.url + "api/status", {"Authorization": "token wrong"})[0] in (401, 403)


def test_a_notebook_page_loads_without_work_nobody_asked_for(
    notebook: tuple[LocalBackend, Handle],
) -> None:
    """What a page load costs the workload's share of a CPU: no "build needed?" check (the
    install is read-only to the student), no language-server discovery (none ships)."""
    backend, handle = notebook
    endpoint = backend.endpoint(handle)
    assert endpoint is not None
    status, page = get(endpoint.url + "lab", dict(endpoint.headers))
    assert status == 200
    found = re.search(rb'id="jupyter-config-data"[^>]*>(.*?)</script>', page, re.S)
    assert found, page[:500]
    config = json.loads(found.group(1))
    assert (config["buildCheck"], config["buildAvailable"]) == (False, False)
    assert get(endpoint.url + "lsp/status", dict(endpoint.headers))[0] == 404


def test_a_running_notebook_has_an_idle_kernel_that_its_first_notebook_takes(
    notebook: tuple[LocalBackend, Handle],
) -> None:
    """Running means usable (issue 16): a kernel already answered, and a fresh notebook at the
    root gets that kernel instead of waiting for a new one; a second notebook gets its own."""
    backend, handle = notebook
    endpoint = backend.endpoint(handle)
    assert endpoint is not None
    headers = {**endpoint.headers, "Content-Type": "application/json"}
    status, body = get(endpoint.url + "api/kernels", dict(endpoint.headers))
    [warm] = json.loads(body)
    assert status == 200 and warm["execution_state"] == "idle"

    def new_session(path: str) -> dict[str, Any]:
        request = urllib.request.Request(
            endpoint.url + "api/sessions",
            data=json.dumps(
                {"path": path, "type": "notebook", "name": "", "kernel": {"name": "python3"}}
            ).encode(),
            headers=headers,
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return dict(json.loads(response.read()))

    assert new_session("Untitled.ipynb")["kernel"]["id"] == warm["id"]
    assert new_session("Untitled1.ipynb")["kernel"]["id"] != warm["id"]


def test_a_new_notebook_has_its_session_and_kernel_when_its_file_is_made(
    notebook: tuple[LocalBackend, Handle],
) -> None:
    """Issue 16: JupyterLab 4.6 clears a cell run while its notebook's session is still being
    created. The server makes a new untitled notebook's session with its file, so the page
    finds one (and connects to it) when it opens the notebook; other new files get none."""
    backend, handle = notebook
    endpoint = backend.endpoint(handle)
    assert endpoint is not None
    headers = {**endpoint.headers, "Content-Type": "application/json"}

    def call(method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(
            endpoint.url + path,
            data=json.dumps(body).encode() if body is not None else None,
            headers=headers,
            method=method,
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    call("PUT", "api/contents/fresh", {"type": "directory"})
    made = call("POST", "api/contents/fresh", {"type": "notebook"})
    assert made["path"] == "fresh/Untitled.ipynb"
    text = call("POST", "api/contents/fresh", {"type": "file", "ext": ".txt"})
    sessions = {s["path"]: s for s in call("GET", "api/sessions")}
    assert text["path"] not in sessions
    session = sessions[made["path"]]
    assert session["type"] == "notebook" and session["name"] == "Untitled.ipynb"
    kernel = session["kernel"]["id"]
    kernels = {k["id"]: k for k in call("GET", "api/kernels")}
    assert kernels[kernel]["name"] == "python3"
    # A cell run before the page connected: JupyterLab asks for a session of its own (a
    # temporary path, the notebook's name), then deletes the one made ahead. It gets the
    # kernel already up, and the delete leaves that kernel alone.
    own = call(
        "POST",
        "api/sessions",
        {"path": f"fresh/{uuid.uuid4()}", "name": "Untitled.ipynb", "type": "notebook",
         "kernel": {"name": "python3"}},
    )  # fmt: skip
    assert own["kernel"]["id"] == kernel
    request = urllib.request.Request(
        endpoint.url + f"api/sessions/{session['id']}", headers=headers, method="DELETE"
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 204
    assert kernel in {k["id"] for k in call("GET", "api/kernels")}
    request = urllib.request.Request(
        endpoint.url + f"api/sessions/{own['id']}", headers=headers, method="DELETE"
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 204
    assert kernel not in {k["id"] for k in call("GET", "api/kernels")}


def test_a_notebook_reports_last_activity_that_moves_with_use(
    notebook: tuple[LocalBackend, Handle],
) -> None:
    backend, handle = notebook
    before = backend.observe([handle])[handle.workload_id].last_activity
    assert before is not None and before.tzinfo is not None
    endpoint = backend.endpoint(handle)
    assert endpoint is not None
    time.sleep(0.05)
    assert get(endpoint.url + "api/contents", dict(endpoint.headers))[0] == 200
    after = backend.observe([handle])[handle.workload_id].last_activity
    assert after is not None and after > before


def test_a_notebook_keeps_its_token_off_logs_and_command_lines_and_its_config_private(
    notebook: tuple[LocalBackend, Handle],
) -> None:
    backend, handle = notebook
    token = handle.state["token"]
    assert token not in all_logs(backend, handle)
    workdir = backend.root / handle.workload_id
    processes = workload_processes(workdir.parent.parent)
    assert processes, "the notebook's processes are not visible"
    for process in processes:
        assert token not in " ".join(process.cmdline())
        env = process.environ()
        assert env["CUDA_VISIBLE_DEVICES"] == ""
        assert env["HOME"].endswith("/home/bob")
        assert env["JUPYTER_CONFIG_DIR"] == str(workdir / "run" / "jupyter" / "config")
    for private in (
        workdir / "state.json",
        workdir / "run/jupyter/config/jupyter_server_config.json",
    ):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600


def test_a_notebook_that_dies_unasked_fails_with_its_code_and_last_words(
    backend: LocalBackend, tmp_path: Path
) -> None:
    home = tmp_path / "home" / "bob"  # in the home: a sandboxed notebook sees nothing else
    fake = home / "fake" / "jupyterlab"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "commands.py").write_text("")
    (fake / "labapp.py").write_text(
        "def main():\n    print('cannot bind: port in use')\n    return 2"
    )
    spec = WorkloadSpec(
        workload_id=str(uuid.uuid4()), kind="notebook", app="jupyter", owner="bob",
        base_url="/nb/x/", env={"PYTHONPATH": str(fake.parent)}, working_dir=str(home),
    )  # fmt: skip
    handle = backend.submit(spec)
    observation = wait_for(backend, handle, *TERMINAL_PHASES)
    assert observation.phase == Phase.FAILED
    assert str(observation.reason) == "JupyterLab exited with code 2: cannot bind: port in use"
    assert backend.endpoint(handle) is None


# -- a real distributed job ------------------------------------------------------------------

DDP_SCRIPT = """
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

torch.set_num_threads(1)
dist.init_process_group("gloo")  # MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE from the env
rank, world = dist.get_rank(), dist.get_world_size()
x = torch.linspace(-1, 1, 64).unsqueeze(1)[rank::world]  # each rank its share of the data
y = 3 * x + 1
model = DistributedDataParallel(torch.nn.Linear(1, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
for step in range(1, 2001):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    mean = loss.detach().clone()
    dist.all_reduce(mean)  # every rank sees the same mean loss, so all stop together
    mean /= world
    if mean.item() < 1e-4:
        break
weight, bias = model.module.weight.item(), model.module.bias.item()
print(f"rank {rank}/{world} step {step} w={weight:.3f} b={bias:.3f} final loss {mean.item():.2e}")
# Tear down in order: DDP's reducer first, then wait for the peer, then the process group.
# Destroying it while the other rank is still in a collective can abort gloo at exit.
del model, optimizer
dist.barrier()
dist.destroy_process_group()
"""


def test_a_two_process_pytorch_ddp_job_trains_and_both_ranks_log_the_final_loss(
    backend: LocalBackend, tmp_path: Path
) -> None:
    pytest.importorskip("torch", reason="torch is not installed in this environment")
    home = tmp_path / "home" / "bob"
    home.mkdir(parents=True)
    (home / "train.py").write_text(textwrap.dedent(DDP_SCRIPT))
    spec = job(
        ("python", "train.py"), workers=2, working_dir=str(home), env={"OMP_NUM_THREADS": "1"}
    )
    handle = backend.submit(spec)
    observation = wait_for(backend, handle, *TERMINAL_PHASES, timeout=120)
    logs = [all_logs(backend, handle, task=rank) for rank in (0, 1)]
    assert observation.phase == Phase.SUCCEEDED, f"{observation.reason}\n{logs}"
    for rank, text in enumerate(logs):
        found = re.search(r"rank (\d)/2 step \d+ w=(\S+) b=(\S+) final loss (\S+)", text)
        assert found, text
        assert int(found[1]) == rank
        assert abs(float(found[2]) - 3) < 0.05 and abs(float(found[3]) - 1) < 0.05
        assert float(found[4]) < 1e-4


def test_a_notebook_listens_on_the_loopback_and_any_backend_over_its_root_finds_it(
    notebook: tuple[LocalBackend, Handle],
) -> None:
    """The reachability rule of docker-compose.yml: the server binds 127.0.0.1 only and the
    recorded endpoint names 127.0.0.1, so the proxy must share the launcher's network
    namespace; another process's backend over the same root (the web container's, on the
    shared DATA_DIR volume, in the shared PID namespace) finds the same endpoint."""
    backend, handle = notebook
    listening = {
        conn.laddr.ip
        for proc in workload_processes(backend.root.parent)
        for conn in proc.net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN
    }
    assert listening == {"127.0.0.1"}
    endpoint = backend.endpoint(handle)
    assert endpoint is not None
    assert endpoint.url.startswith("http://127.0.0.1:")
    other = LocalBackend(backend.root)
    assert other.endpoint(handle) == endpoint
