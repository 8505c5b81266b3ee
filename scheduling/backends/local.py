"""The ``local`` backend: workloads as real processes on this host.

Every task runs under :mod:`scheduling.backends.local_runner` as the leader of its own session,
so it outlives the portal process and the backend can signal all of it. What the backend
knows of a workload lives in ``root/<workload_id>/state.json`` (and is returned as
``Handle.state``): a new instance over the same root, e.g. after a portal restart, re-attaches
to what is running. Processes are identified by pid *and* create time, so a reused pid is never
mistaken for, or signalled as, a task.

No Django here: the portal passes in everything the backend needs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import fcntl
import hashlib
import http.client
import importlib.util
import json
import logging
import math
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

from core.reasons import Reason
from scheduling import reasons as R
from scheduling.backends import sandbox as _sandbox
from scheduling.backends.base import (
    TERMINAL_PHASES,
    BackendError,
    DatasetMount,
    Endpoint,
    GpuInfo,
    GpuReading,
    Handle,
    LogChunk,
    NodeInfo,
    Observation,
    Phase,
    ReplicaStatus,
    Resources,
    ServingSpec,
    TaskPlacement,
    WorkloadSpec,
)
from scheduling.backends.gpus import device_usage, discover_gpus, utilisation

log = logging.getLogger(__name__)

RUNNER = Path(__file__).with_name("local_runner.py")
STATE_FILE = "state.json"
STATE_VERSION = 1

NOTEBOOK_APPS = frozenset({"jupyter", "terminal"})
APPS = NOTEBOOK_APPS | {"tensorboard"}  # tensorboard where it is installed (checked at submit)
# Apps that need programs beyond Python: offered (in ``LocalBackend.apps``) where this host
# has them, else listed in ``LocalBackend.unavailable`` with the reason.
DESKTOP_APPS = frozenset({"desktop", "pycharm-desktop"})
HOST_APPS = frozenset({"vscode"}) | DESKTOP_APPS
APP_NAMES = {
    "vscode": "VS Code",
    "desktop": "Desktop",
    "pycharm-desktop": "PyCharm",
    "tensorboard": "TensorBoard",
}
DESKTOP_LAUNCHER = Path(__file__).with_name("desktop_launcher.py")
# Put first on JupyterLab's PYTHONPATH: packages that defer their costly start-up work to
# first use (jupyter_lazy/rfc3987_syntax/__init__.py says what and why).
LAZY_IMPORTS = Path(__file__).with_name("jupyter_lazy")
WARM_KERNELS = Path(__file__).with_name("jupyter_warm.py")  # a Jupyter config file
# The start-up CPU boost of interactive apps (docs/local-backend.md, "Start-up CPU boost").
DEFAULT_STARTUP_CPU_MILLI = 2000
DEFAULT_STARTUP_BOOST_SECONDS = 30.0
STARTUP_BOOST_MAX_SECONDS = 180.0
MODEL_SERVER = Path(__file__).with_name("model_server.py")
SERVING_APP = "model-server"  # the template kind of serving workloads
DESKTOP_PROGRAMS = ("Xvnc", "xauth")
NOVNC_DIR = "/usr/share/novnc"
PYCHARM_LAUNCHERS = ("bin/pycharm.sh", "bin/pycharm")
SOCKET_PATH_MAX = 107  # sun_path holds 108 bytes with the NUL
# VS Code's user settings in a fresh workload: no GPU renderer (headless browsers, and the
# terminal's rows stay in the DOM), no telemetry, no welcome page.
VSCODE_SETTINGS = {
    "terminal.integrated.gpuAcceleration": "off",
    "telemetry.telemetryLevel": "off",
    "workbench.startupEditor": "none",
    "security.workspace.trust.enabled": False,
    "update.mode": "none",
    "extensions.autoCheckUpdates": False,
}

# The Terminal app's JupyterLab opens with this layout: one terminal named "1", full width.
# On load JupyterLab restores it with ``terminal:create-new {name: "1"}``, which reconnects
# to terminal 1 or starts it. The file name is jupyterlab_server's slug of "default".
TERMINAL_NAME = "1"
TERMINAL_WORKSPACE_FILE = "default-37a8.jupyterlab-workspace"
TERMINAL_WORKSPACE: dict[str, Any] = {
    "data": {
        "layout-restorer:data": {
            "main": {
                "dock": {
                    "type": "tab-area",
                    "currentIndex": 0,
                    "widgets": [f"terminal:{TERMINAL_NAME}"],
                },
                "current": f"terminal:{TERMINAL_NAME}",
            },
            "down": {"size": 0, "widgets": []},
            "left": {"collapsed": True, "visible": True, "widgets": []},
            "right": {"collapsed": True, "visible": True, "widgets": []},
            "relativeSizes": [0, 1, 0],
            "top": {"simpleVisibility": True},
        },
        f"terminal:{TERMINAL_NAME}": {"data": {"name": TERMINAL_NAME}},
    },
    "metadata": {"id": "default"},
}

# The portal's own environment carries its secrets (database URL, secret key): workloads get
# only this allow-list of it, plus whatever the spec and the backend set.
ENV_ALLOW = frozenset(
    {
        "PATH", "LANG", "LANGUAGE", "TZ", "TMPDIR", "SHELL", "USER", "LOGNAME", "TERM",
        "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "SSL_CERT_FILE", "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy",
        "https_proxy", "no_proxy",
    }
)  # fmt: skip
WORKLOAD_ID_VARIABLE = "QUANTA_WORKLOAD_ID"  # set on every task, inherited by its children
SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# Variables of a job's task that a command run beside it (over SSH) must not inherit.
EXEC_ENV_DROPPED = frozenset(
    {"RANK", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
     "MASTER_PORT", "QUANTA_ATTEMPT"}
)  # fmt: skip
LOOPBACK_OR_ANY = frozenset({"127.0.0.1", "0.0.0.0", "::1", "::", "::ffff:127.0.0.1"})
PROBE_TIMEOUT = 1.5  # seconds; a busy server just stays STARTING for one more poll
CREATE_TIME_SLACK = 0.05  # psutil create times are jiffy-rounded

# Popen objects of runners this process started, so they are reaped (no zombies) whichever
# LocalBackend instance notices they ended.
_children: dict[int, subprocess.Popen[bytes]] = {}
_children_lock = threading.Lock()


class LocalBackend:
    """Runs notebooks (JupyterLab) and jobs (N gang-started processes) on this host."""

    kind = "local"
    apps: frozenset[str] | None = APPS  # per instance: APPS and the HOST_APPS found here

    def __init__(
        self,
        root: Path,
        *,
        node_name: str | None = None,
        python: str = sys.executable,
        gpus: Sequence[GpuInfo] | None = None,
        cpu_milli: int | None = None,
        memory_mib: int | None = None,
        stop_grace_seconds: float = 10.0,
        sandbox: str = "auto",
        sandbox_network: str = "host",
        pids_max: int = 4096,
        cgroup_parent: str | None = None,
        readonly_paths: Sequence[Path] = (),
        bwrap: str = "bwrap",
        code_server: str | None = None,
        novnc_dir: str | None = NOVNC_DIR,
        pycharm_home: str | None = None,
        serving_python: str | None = None,
        warm_kernel: bool = True,
        startup_cpu_milli: int = DEFAULT_STARTUP_CPU_MILLI,
        startup_boost_seconds: float = DEFAULT_STARTUP_BOOST_SECONDS,
    ) -> None:
        if sandbox not in _sandbox.SANDBOX_MODES:
            raise ValueError(f"sandbox must be one of {_sandbox.SANDBOX_MODES}, not {sandbox!r}")
        if sandbox_network not in _sandbox.NETWORK_MODES:
            raise ValueError(f"sandbox_network must be one of {_sandbox.NETWORK_MODES}")
        self.sandbox_mode = sandbox
        # JupyterLab starts one kernel ahead and is Running once it answers (jupyter_warm.py).
        self.warm_kernel = warm_kernel
        # An interactive app starts with its CPU cap raised to this (never lowered below its
        # size) and keeps it for startup_boost_seconds after it first answers; 0: off.
        self.startup_cpu_milli = max(0, int(startup_cpu_milli))
        self.startup_boost_seconds = max(0.0, float(startup_boost_seconds))
        self.sandbox_network = sandbox_network
        self.pids_max = pids_max
        self.cgroup_parent = cgroup_parent
        self.bwrap = bwrap
        self._isolation: tuple[_sandbox.Isolation, _sandbox.Cgroups | None, Path | None] | None
        self._isolation = None
        self.root = Path(root)
        self.node_name = node_name or socket.gethostname()
        self.python = python
        self.cpu_milli = cpu_milli
        self.memory_mib = memory_mib
        self.stop_grace_seconds = stop_grace_seconds
        self._gpus = tuple(gpus) if gpus is not None else None
        self._tensorboard: bool | None = None
        self.code_server = shutil.which(code_server or "code-server")
        self.novnc_dir = novnc_dir or ""
        self.pycharm = _pycharm_launcher(pycharm_home)
        # The interpreter of the model servers (its own venv: scikit-learn and friends must
        # not move the portal's pins); None where it is not installed.
        self.serving_python = (
            serving_python if serving_python and os.access(serving_python, os.X_OK) else None
        )
        # What every task may read besides the system: the caller's paths, and the installs of
        # the apps this backend starts (code-server's package, PyCharm, the desktop launcher).
        installs = (_install_root(self.code_server), _pycharm_root(self.pycharm))
        extra = [DESKTOP_LAUNCHER, LAZY_IMPORTS, *(path for path in installs if path)]
        if self.serving_python:
            extra += [MODEL_SERVER, *_sandbox.python_prefixes(self.serving_python)]
        self.readonly_paths = tuple(dict.fromkeys([*map(Path, readonly_paths), *extra]))
        self.unavailable: dict[str, Reason] = self._unavailable(pycharm_home)
        self.apps = APPS | ({*HOST_APPS, SERVING_APP} - self.unavailable.keys())

    @property
    def isolation(self) -> _sandbox.Isolation:
        """What this host enforces for the workloads (detected once, by trying)."""
        return self._detected()[0]

    def _detected(self) -> tuple[_sandbox.Isolation, _sandbox.Cgroups | None, Path | None]:
        if self._isolation is None:
            self._isolation = _sandbox.detect(
                self.sandbox_mode,
                cgroup_parent=self.cgroup_parent,
                bwrap=self.bwrap,
                gpus=bool(self._inventory()),
            )
            for note in self._isolation[0].notes:
                log.info("local backend %s: %s", self.node_name, note)
        return self._isolation

    # -- the contract ------------------------------------------------------------------------

    def submit(self, spec: WorkloadSpec) -> Handle:
        """Start every task of ``spec`` (or none). The same (id, attempt) starts once; a
        higher attempt kills what is left of the previous one and starts afresh."""
        workdir = self._workload_dir(spec.workload_id)
        self._check_runnable(spec)
        placements = self._placements(spec)
        workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
        with self._locked(workdir):
            state = self._read_state(workdir)
            if state is not None and int(state["attempt"]) >= spec.attempt:
                return Handle(spec.workload_id, state)
            if state is not None:
                self._kill_tasks(state, signal.SIGKILL)
            if spec.kind == "job":
                state = self._start_job(spec, workdir, placements)
            elif spec.kind == "serving":
                state = self._start_serving(spec, workdir, placements)
            else:
                state = self._start_server(spec, workdir, placements[0])
            return Handle(spec.workload_id, state)

    def stop(self, handle: Handle) -> None:
        """SIGTERM every task; ``observe`` (or a later ``stop``) SIGKILLs what is left after
        ``stop_grace_seconds``. Unknown or finished workloads are left alone."""
        workdir, state = self._load(handle)
        if state is None:
            return
        with self._locked(workdir):
            state = self._read_state(workdir) or state
            before = _snapshot(state)
            now = time.time()
            if state.get("stop_requested_at") is None:
                observation = self._evaluate(workdir, state, now, probe=False)
                if observation.phase not in TERMINAL_PHASES:
                    state["stop_requested_at"] = now
                    for task in state["tasks"]:
                        if self._task_alive(task):
                            self._terminate_task(task)
                    _signal_escaped(state, signal.SIGTERM)
            self._sweep(state, now)
            self._save_if_changed(workdir, state, before)

    def observe(self, handles: Sequence[Handle]) -> dict[str, Observation]:
        """Phase of each workload; also escalates stops and clears stray processes."""
        observations: dict[str, Observation] = {}
        for handle in handles:
            observations[handle.workload_id] = self._observe_one(handle)
        return observations

    def endpoint(self, handle: Handle) -> Endpoint | None:
        """The server's URL and credentials once it answers; None before and after."""
        workdir, state = self._load(handle)
        if state is not None and state.get("kind") == "serving":
            ready = self.replicas(handle).ready
            return ready[0] if ready else None
        if state is None or state.get("kind") == "job":
            return None
        if state.get("port") is None and not state.get("socket"):
            return None
        with self._locked(workdir):
            state = self._read_state(workdir) or state
            if state.get("stop_requested_at") is not None or state.get("outcome"):
                return None
            if not self._task_alive(state["tasks"][0]):
                return None
            if not state.get("ready"):
                if self._probe(state) is None:
                    return None
                state["ready"] = True
                self._write_state(workdir, state)
        if state.get("socket"):
            # Served at "/" on a private socket: the proxy drops the /nb/<id> prefix.
            if state["app"] in DESKTOP_APPS:
                return Endpoint(
                    url="http://localhost/", rfb_socket=state["socket"], static_dir=self.novnc_dir
                )
            return Endpoint(url="http://localhost/", unix_socket=state["socket"])
        url = f"http://127.0.0.1:{state['port']}{state['base_url']}"
        token = state.get("token")
        return Endpoint(url=url, headers={"Authorization": f"token {token}"} if token else {})

    def logs(self, handle: Handle, task: int = 0, offset: int = 0, limit: int = 65536) -> LogChunk:
        """Bytes ``offset`` … ``offset + limit`` of the current attempt's log of ``task``."""
        workdir, state = self._load(handle)
        if state is None:
            return LogChunk(text="", next_offset=offset, tasks=0)
        tasks = state["tasks"]
        if not 0 <= task < len(tasks):
            return LogChunk(text="", next_offset=offset, tasks=len(tasks))
        try:
            with open(workdir / tasks[task]["log"], "rb") as file:
                file.seek(max(offset, 0))
                data = file.read(max(limit, 0))
        except FileNotFoundError:
            data = b""
        if len(data) == limit:
            data = _whole_utf8(data) or data  # never return nothing while bytes remain
        return LogChunk(
            text=data.decode("utf-8", errors="replace"),
            next_offset=max(offset, 0) + len(data),
            tasks=len(tasks),
        )

    def nodes(self) -> tuple[NodeInfo, ...]:
        """This host, with its CPUs, memory and GPUs (configured inventory, else NVML)."""
        cpu_milli = self.cpu_milli
        if cpu_milli is None:
            cpu_milli = (os.cpu_count() or 1) * 1000
        memory_mib = self.memory_mib
        if memory_mib is None:
            memory_mib = int(psutil.virtual_memory().total) // (1024 * 1024)
        return (
            NodeInfo(
                name=self.node_name,
                cpu_milli=cpu_milli,
                memory_mib=memory_mib,
                gpus=self._inventory(),
                labels={"quanta.io/backend": "local", **self.isolation.labels()},
            ),
        )

    def gpu_readings(self) -> tuple[GpuReading, ...]:
        """This host's GPUs now, from NVML (``()`` without a driver: no reading). Which
        workload uses which device is the portal's allocations' to say."""
        return tuple(
            GpuReading(self.node_name, index, util, used) for index, util, used in device_usage()
        )

    def running(self) -> set[str]:
        """Ids under ``root`` with a live process, whatever the portal believes."""
        alive: set[str] = set()
        if not self.root.is_dir():
            return alive
        for workdir in sorted(self.root.iterdir()):
            if not (workdir / STATE_FILE).is_file():
                continue
            with self._locked(workdir):
                state = self._read_state(workdir)
                if state is None:
                    continue
                before = _snapshot(state)
                self._sweep(state, time.time())
                self._save_if_changed(workdir, state, before)
                if any(self._task_alive(task) for task in state["tasks"]) or _leftovers(state):
                    alive.add(workdir.name)
        return alive

    # -- starting ----------------------------------------------------------------------------

    def _check_runnable(self, spec: WorkloadSpec) -> None:
        """Refuse for good what this host cannot run, before anything starts."""
        if self.sandbox_mode == "required" and self.isolation.sandbox is None:
            problem = _sandbox.bwrap_problem(self.bwrap) or "it does not work"
            raise BackendError(
                "This host runs workloads only in a sandbox (LOCAL_SANDBOX=required), "
                f"and bubblewrap is not usable: {problem}."
            )
        for mount in spec.datasets:
            if not Path(mount.source).is_dir():
                raise BackendError(f"the dataset {mount.name} is missing on this host")
        if spec.kind == "job":
            if not spec.command:
                raise BackendError("a job needs a command to run")
            if spec.workers < 1:
                raise BackendError("a job needs at least one worker")
            return
        if spec.kind == "serving":
            if SERVING_APP in self.unavailable:
                reason = self.unavailable[SERVING_APP]
                raise BackendError(str(reason), reason=reason)
            if spec.serving is None:
                raise BackendError("a serving workload needs a model to serve")
            if not Path(spec.serving.model_dir).is_dir():
                raise BackendError(f"the model's files are missing: {spec.serving.model_dir}")
            return
        if spec.kind != "notebook":
            raise BackendError(f"the local backend does not know workloads of kind {spec.kind!r}")
        if spec.app in self.unavailable:
            reason = self.unavailable[spec.app]
            raise BackendError(str(reason), reason=reason)
        if spec.app in DESKTOP_APPS:
            self._desktop_program(spec)
            return
        if spec.app == "vscode":
            return
        if spec.app == "tensorboard":
            if not self._has_tensorboard():
                raise BackendError("tensorboard is not installed on this host")
            return
        if spec.app not in NOTEBOOK_APPS:
            raise BackendError(f"the local backend cannot run the app {spec.app!r}")

    def _placements(self, spec: WorkloadSpec) -> tuple[TaskPlacement, ...]:
        """One placement per task; none given means no GPU. Devices must exist here."""
        tasks = spec.workers if spec.kind == "job" else 1
        if spec.kind == "serving" and spec.placement:
            tasks = len(spec.placement)  # one per replica it may scale to (max_replicas)
        if not spec.placement:
            return tuple(TaskPlacement(node=self.node_name) for _ in range(tasks))
        if len(spec.placement) != tasks:
            raise BackendError(f"{len(spec.placement)} placements given for {tasks} task(s)")
        known = {gpu.index for gpu in self._inventory()}
        for placement in spec.placement:
            if placement.node != self.node_name:
                raise BackendError(
                    f"placed on node {placement.node!r}, but this backend runs {self.node_name!r}"
                )
            missing = sorted(set(placement.gpu_indices) - known)
            if missing:
                raise BackendError(f"GPU(s) {missing} do not exist on {self.node_name!r}")
        return spec.placement

    def _start_job(
        self, spec: WorkloadSpec, workdir: Path, placements: Sequence[TaskPlacement]
    ) -> dict[str, Any]:
        cwd = self._working_dir(spec, workdir)
        master_port = _free_port()
        state = self._new_state(spec, workdir, master_port=master_port)
        for rank, placement in enumerate(placements):
            env = self._env(spec, placement, cwd)
            env.update(
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(master_port),
                WORLD_SIZE=str(spec.workers),
                RANK=str(rank),
                LOCAL_RANK=str(rank),
                NODE_RANK="0",
                LOCAL_WORLD_SIZE=str(spec.workers),
                PYTHONUNBUFFERED="1",
            )
            self._launch(state, workdir, rank, spec, spec.command, cwd, env, placement)
        return state

    def _start_server(
        self, spec: WorkloadSpec, workdir: Path, placement: TaskPlacement
    ) -> dict[str, Any]:
        cwd = self._working_dir(spec, workdir)
        base_url = "/" + spec.base_url.strip("/") + "/" if spec.base_url.strip("/") else "/"
        port = _free_port()
        env = self._env(spec, placement, cwd)
        state = self._new_state(spec, workdir, port=port, base_url=base_url)
        if spec.app == "vscode":
            run_dir = self._app_dir(workdir, "code-server")
            socket_path = _socket_path(run_dir / "http.sock")
            state.update(port=None, socket=str(socket_path))
            command: list[str] = self._code_server_command(run_dir, socket_path, cwd)
            self._launch(state, workdir, 0, spec, command, cwd, env, placement)
            return state
        if spec.app in DESKTOP_APPS:
            run_dir = self._app_dir(workdir, "vnc")
            state.update(port=None, socket=str(_socket_path(run_dir / "rfb.sock")))
            command = [
                self.python, "-P", str(DESKTOP_LAUNCHER), "--run-dir", str(run_dir),
                "--", *self._desktop_program(spec),
            ]  # fmt: skip
            self._launch(state, workdir, 0, spec, command, cwd, env, placement)
            return state
        if spec.app == "tensorboard":
            command = [
                self.python, "-m", "tensorboard.main", "--logdir", str(cwd),
                "--host", "127.0.0.1", "--port", str(port),
                "--path_prefix", base_url.rstrip("/"),
            ]  # fmt: skip
        else:
            token = secrets.token_urlsafe(32)
            state["token"] = token
            terminal = spec.app == "terminal"
            state["warm_kernel"] = self.warm_kernel and not terminal
            env.update(
                self._jupyter_dirs(
                    workdir,
                    token,
                    port,
                    base_url,
                    cwd,
                    terminal=terminal,
                    warm=state["warm_kernel"],
                )
            )
            # JupyterLab's own entry point, without its "node yarn.js config" at import
            command = [self.python, "-m", "quanta_jupyterlab"]
            env["PYTHONPATH"] = os.pathsep.join(
                [str(LAZY_IMPORTS), *filter(None, [env.get("PYTHONPATH")])]
            )
        self._launch(state, workdir, 0, spec, command, cwd, env, placement)
        return state

    def _new_state(self, spec: WorkloadSpec, workdir: Path, **extra: Any) -> dict[str, Any]:
        """A fresh attempt: its directory is emptied, so its logs start from nothing."""
        attempt_dir = workdir / f"attempt-{spec.attempt}"
        shutil.rmtree(attempt_dir, ignore_errors=True)
        attempt_dir.mkdir(parents=True)
        state: dict[str, Any] = {
            "version": STATE_VERSION,
            "workload_id": spec.workload_id,
            "kind": spec.kind,
            "app": spec.app,
            "attempt": spec.attempt,
            "workers": spec.workers if spec.kind == "job" else 1,
            "node": self.node_name,
            "started_at": time.time(),
            "tasks": [],
            "stop_requested_at": None,
            "failed_at": None,
            "outcome": None,
            "port": None,
            "token": None,
            "base_url": "",
            "ready": False,
            "last_activity": None,
            "master_port": None,
            "memory_mib": spec.resources.memory_mib,
        }
        state.update(extra)
        return state

    def _launch(
        self,
        state: dict[str, Any],
        workdir: Path,
        index: int,
        spec: WorkloadSpec,
        command: Sequence[str],
        cwd: Path,
        env: dict[str, str],
        placement: TaskPlacement,
        binds: Sequence[tuple[str, str]] = (),
    ) -> None:
        """Start one task under the runner, in its sandbox and cgroup where the host has them;
        on failure kill the tasks already started (gang: all or none) and say why. State is
        written after each start so a portal crash in between still leaves every pid on
        disk."""
        relative = f"attempt-{state['attempt']}/task-{index}"
        log_path = workdir / f"{relative}.log"
        isolation, cgroups, mps = self._detected()
        if index == 0:
            self._remember_exec(state, cwd, env)
        argv = [
            self.python, "-P", str(RUNNER), "--log", str(log_path),
            "--exit-file", str(workdir / f"{relative}.exit"), "--cwd", str(cwd),
        ]  # fmt: skip
        directories: tuple[str, ...] = ()
        resources = spec.resources
        if cgroups is not None:
            name = f"quanta-{_root_tag(self.root)}-{spec.workload_id}-{spec.attempt}-{index}"
            boost = self.startup_cpu_milli if spec.kind == "notebook" else 0
            if boost > resources.cpu_milli:
                state["cpu_boost"] = {"cpu_milli": resources.cpu_milli}  # lowered to this
            try:
                directories = cgroups.create(
                    name,
                    cpu_milli=resources.cpu_milli,
                    memory_mib=resources.memory_mib,
                    pids_max=self.pids_max,
                    cpu_cap_milli=boost or None,
                )
            except OSError as error:
                self._kill_tasks(state, signal.SIGKILL)
                (workdir / STATE_FILE).unlink(missing_ok=True)
                raise BackendError(f"cannot make the cgroup of task {index}: {error}") from error
            for directory in directories:
                argv += ["--cgroup", directory]
        elif resources.memory_mib:
            argv += ["--rlimit-as", str(resources.memory_mib * 1024 * 1024)]
        if isolation.sandbox:
            argv += ["--sandboxed", "--program", command[0]]
            command = _sandbox.wrap(
                command,
                home=cwd,
                run_dir=self._run_dir(workdir),
                python=self.python,
                readonly_paths=self.readonly_paths,
                readonly_binds=[
                    *((mount.source, mount.target) for mount in spec.datasets),
                    *binds,
                ],
                network=self.sandbox_network,
                gpu_devices=bool(placement.gpu_indices),
                mps_pipe_directory=mps if placement.gpu_indices else None,
                bwrap=self.bwrap,
            )
        argv += ["--", *command]
        try:
            with open(log_path, "ab") as output:
                process = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            create_time = float(psutil.Process(process.pid).create_time())
        except (OSError, psutil.Error) as error:
            # All or none: kill what started and forget the attempt, so that the portal's
            # retry of the same attempt starts it afresh.
            self._kill_tasks(state, signal.SIGKILL)
            _sandbox.remove(directories)
            (workdir / STATE_FILE).unlink(missing_ok=True)
            permanent = isinstance(error, FileNotFoundError | PermissionError)
            raise BackendError(
                f"cannot start task {index}: {error}", transient=not permanent
            ) from error
        with _children_lock:
            _children[process.pid] = process
        state["tasks"].append(
            {
                "pid": process.pid,
                "create_time": create_time,
                "log": f"{relative}.log",
                "exit_file": f"{relative}.exit",
                "gone": False,
                "cgroups": list(directories),
            }
        )
        state["sandbox"] = bool(isolation.sandbox)
        state["home"] = str(cwd)
        self._write_state(workdir, state)

    def _env(self, spec: WorkloadSpec, placement: TaskPlacement, cwd: Path) -> dict[str, str]:
        """Allow-listed host env, then the spec's env, then what the backend must control
        (GPU pinning, identity), which the spec cannot override."""
        env = {k: v for k, v in os.environ.items() if k in ENV_ALLOW or k.startswith("LC_")}
        env["PATH"] = os.pathsep.join([str(Path(self.python).parent), env.get("PATH", os.defpath)])
        env.setdefault("LANG", "C.UTF-8")
        env.setdefault("SHELL", "/bin/bash" if Path("/bin/bash").exists() else "/bin/sh")
        env.update(spec.env)
        env.update(
            HOME=str(cwd),
            CUDA_DEVICE_ORDER="PCI_BUS_ID",
            CUDA_VISIBLE_DEVICES=",".join(str(index) for index in placement.gpu_indices),
            QUANTA_WORKLOAD_ID=spec.workload_id,  # stop finds every process by it
            QUANTA_ATTEMPT=str(spec.attempt),
        )
        sandboxed = self._detected()[0].sandbox
        for mount in spec.datasets:  # where each dataset is seen: bound in, or the host's
            variable = "DATASET_" + re.sub(r"[^A-Z0-9]", "_", mount.name.upper())
            env[variable] = mount.target if sandboxed else mount.source
        if spec.resources.gpu_milli:
            env["QUANTA_GPU_MILLI"] = str(spec.resources.gpu_milli)
            env["QUANTA_GPU_MEMORY_MIB"] = str(spec.resources.gpu_memory_mib)
            mps = self._detected()[2]
            if mps is not None and placement.gpu_indices:
                env["CUDA_MPS_PIPE_DIRECTORY"] = str(mps)
                env.update(
                    _sandbox.mps_env(
                        placement.gpu_indices,
                        spec.resources.gpu_milli,
                        spec.resources.gpu_memory_mib,
                    )
                )
        return env

    def _jupyter_dirs(
        self,
        workdir: Path,
        token: str,
        port: int,
        base_url: str,
        cwd: Path,
        *,
        terminal: bool = False,
        warm: bool = False,
    ) -> dict[str, str]:
        """Private Jupyter config/data/runtime dirs, so nothing global interferes, with a
        config file (mode 0600) that carries the token: never on the command line, never in
        the log (jupyter_server prints ``token=...`` for a token it did not generate). For the
        Terminal app, a default workspace that opens terminal ``1`` (JupyterLab 4 has no
        terminal URL of its own: the workspace's layout creates it, or reconnects to it)."""
        jupyter = self._run_dir(workdir) / "jupyter"
        dirs = {
            "JUPYTER_CONFIG_DIR": jupyter / "config",
            "JUPYTER_DATA_DIR": jupyter / "data",
            "JUPYTER_RUNTIME_DIR": jupyter / "runtime",
        }
        workspaces = jupyter / "workspaces"
        for path in dirs.values():
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
        server: dict[str, Any] = {
            "ip": "127.0.0.1",
            "port": port,
            "port_retries": 0,  # another port would not be the one in state.json
            "open_browser": False,
            "base_url": base_url,
            "root_dir": str(cwd),
            "allow_remote_access": True,  # the portal's proxy may keep its own Host header
            "quit_button": False,  # the portal stops notebooks
            # No "build needed?" check on each page load (1.3 s of the server's CPU while the
            # page waits on its other calls): the install is read-only to the student anyway.
            # No language-server discovery at start (none is installed with the portal's
            # Python: it only logs them all as skipped, on the workload's CPU).
            "jpserver_extensions": {"jupyter_lsp": False},
            "tornado_settings": {
                "page_config_data": {"buildCheck": False, "buildAvailable": False}
            },
        }
        if os.geteuid() == 0:
            server["allow_root"] = True
        config = {
            "IdentityProvider": {"token": token},
            "ServerApp": server,
            "LabApp": {
                "news_url": None,
                "check_for_updates_class": (
                    "jupyterlab.handlers.announcements.NeverCheckForUpdate"
                ),
                "extension_manager": "readonly",
                "workspaces_dir": str(workspaces),
            },
        }
        if terminal:
            server["terminals_enabled"] = True
            workspaces.mkdir(parents=True, exist_ok=True, mode=0o700)
            (workspaces / TERMINAL_WORKSPACE_FILE).write_text(
                json.dumps(TERMINAL_WORKSPACE), encoding="utf-8"
            )
        if warm:  # a kernel is up before the first notebook asks (jupyter_warm.py)
            shutil.copyfile(WARM_KERNELS, dirs["JUPYTER_CONFIG_DIR"] / "jupyter_server_config.py")
        config_file = dirs["JUPYTER_CONFIG_DIR"] / "jupyter_server_config.json"
        descriptor = os.open(config_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            json.dump(config, file, indent=1)
        return {name: str(path) for name, path in dirs.items()}

    @staticmethod
    def _run_dir(workdir: Path) -> Path:
        """The workload's private runtime dir (config, sockets, tokens), visible inside its
        sandbox at the same path; the rest of ``workdir`` (state, logs) is not."""
        run = workdir / "run"
        run.mkdir(mode=0o700, exist_ok=True)
        return run

    def _sandbox_enter_prefix(self, state: Mapping[str, Any]) -> list[str]:
        """The argv prefix that runs a new process inside the running workload's sandbox: in
        its mount, PID, UTS and IPC namespaces (so Stop ends it with the rest, and it sees the
        sandbox's host name, which X authority entries name), joined to task 0's
        cgroups, in the home, marked with the workload's id. [] without a sandbox, or when
        task 0's sandbox is not running. The caller's environment passes through: give it an
        allow-listed one."""
        tasks = state.get("tasks") or []
        if not state.get("sandbox") or not tasks or tasks[0].get("gone"):
            return []
        task = tasks[0]
        init = _sandbox.sandbox_init(int(task["pid"]), float(task["create_time"]))
        if init is None:
            return []
        home = str(state.get("home") or self._workload_dir(str(state["workload_id"])) / "work")
        prefix = [self.python, "-P", str(RUNNER), "--enter"]
        for directory in task.get("cgroups") or ():
            prefix += ["--cgroup", directory]
        return [
            *prefix, "--", shutil.which("nsenter") or "nsenter", f"--target={init}", "--mount",
            "--pid", "--uts", "--ipc", f"--wdns={home}", "--", "/usr/bin/env",
            f"{WORKLOAD_ID_VARIABLE}={state['workload_id']}",
            f"QUANTA_ATTEMPT={state.get('attempt', 0)}",
        ]  # fmt: skip

    def _unavailable(self, pycharm_home: str | None) -> dict[str, Reason]:
        """The HOST_APPS this host cannot run, each with the reason (the admin catalog's)."""
        missing: dict[str, Reason] = {}
        if self.code_server is None:
            missing["vscode"] = R.VSCODE_NOT_INSTALLED()
        lacking = [name for name in (*DESKTOP_PROGRAMS, "openbox") if shutil.which(name) is None]
        if not self.novnc_dir or not (Path(self.novnc_dir) / "vnc.html").is_file():
            lacking.append(f"noVNC ({self.novnc_dir or 'NOVNC_DIR'})")
        if lacking:
            missing["desktop"] = missing["pycharm-desktop"] = R.DESKTOP_NOT_INSTALLED(
                missing=", ".join(lacking)
            )
        elif not pycharm_home:
            missing["pycharm-desktop"] = R.PYCHARM_NOT_CONFIGURED()
        elif self.pycharm is None:
            missing["pycharm-desktop"] = R.PYCHARM_NOT_FOUND(path=pycharm_home)
        if self.serving_python is None:
            missing[SERVING_APP] = R.MODEL_SERVER_NOT_INSTALLED()
        return missing

    def _desktop_program(self, spec: WorkloadSpec) -> list[str]:
        """The program a desktop starts (PyCharm's launcher for pycharm-desktop); refused
        for good where it is not on this host."""
        if spec.app == "pycharm-desktop" and self.pycharm is not None:
            return [self.pycharm, *spec.program]
        if not spec.program:
            reason = R.DESKTOP_NEEDS_PROGRAM()
            raise BackendError(str(reason), reason=reason)
        path = os.pathsep.join([str(Path(self.python).parent), os.environ.get("PATH", "")])
        if shutil.which(spec.program[0], path=path) is None:
            reason = R.APP_NOT_INSTALLED(program=spec.program[0])
            raise BackendError(str(reason), reason=reason)
        return list(spec.program)

    def _code_server_command(self, run_dir: Path, socket_path: Path, cwd: Path) -> list[str]:
        """code-server on a private socket, no password (the socket is the gate), its
        config and state in the run dir, extensions in the home (they persist)."""
        if self.code_server is None:
            reason = R.VSCODE_NOT_INSTALLED()
            raise BackendError(str(reason), reason=reason)
        data = run_dir / "data"
        user = data / "User"
        user.mkdir(parents=True, exist_ok=True, mode=0o700)
        settings_file = user / "settings.json"
        if not settings_file.exists():
            settings_file.write_text(json.dumps(VSCODE_SETTINGS, indent=1), encoding="utf-8")
        config = run_dir / "config.yaml"
        config.write_text("auth: none\n", encoding="utf-8")
        return [
            self.code_server, "--config", str(config), "--socket", str(socket_path),
            "--socket-mode", "600", "--auth", "none", "--disable-telemetry",
            "--disable-update-check", "--disable-workspace-trust",
            "--user-data-dir", str(data),
            "--extensions-dir", str(cwd / ".local" / "share" / "code-server" / "extensions"),
            str(cwd),
        ]  # fmt: skip

    @classmethod
    def _app_dir(cls, workdir: Path, app: str) -> Path:
        """The workload's private runtime dir for ``app`` (sockets, config, cookies)."""
        path = cls._run_dir(workdir) / app
        path.mkdir(mode=0o700, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            (path / "http.sock").unlink()
        return path

    def _working_dir(self, spec: WorkloadSpec, workdir: Path) -> Path:
        cwd = Path(spec.working_dir) if spec.working_dir else workdir / "work"
        cwd.mkdir(parents=True, exist_ok=True)
        return cwd

    def _has_tensorboard(self) -> bool:
        """Asked of the interpreter that will run it, which need not be the portal's."""
        if self._tensorboard is None:
            if self.python == sys.executable:
                self._tensorboard = importlib.util.find_spec("tensorboard") is not None
            else:
                probe = (
                    "import importlib.util as u, sys; sys.exit(u.find_spec('tensorboard') is None)"
                )
                result = subprocess.run(
                    [self.python, "-c", probe], capture_output=True, timeout=30, check=False
                )
                self._tensorboard = result.returncode == 0
        return self._tensorboard

    def _inventory(self) -> tuple[GpuInfo, ...]:
        if self._gpus is None:
            self._gpus = discover_gpus()
        return self._gpus

    # -- observing ---------------------------------------------------------------------------

    def _observe_one(self, handle: Handle) -> Observation:
        workdir, state = self._load(handle)
        if state is None:
            return Observation(handle.workload_id, Phase.UNKNOWN, R.NO_SUCH_WORKLOAD())
        with self._locked(workdir):
            state = self._read_state(workdir) or state
            before = _snapshot(state)
            observation = self._evaluate(workdir, state, time.time())
            self._save_if_changed(workdir, state, before)
        return observation

    def _evaluate(
        self, workdir: Path, state: dict[str, Any], now: float, *, probe: bool = True
    ) -> Observation:
        """Decide the phase from the tasks' liveness and exit files, record a terminal outcome
        once, and kill what must not outlive it (the rest of a failed gang, strays). Without
        ``probe``, a live server is not asked whether it answers yet."""
        workload_id, attempt = state["workload_id"], int(state["attempt"])
        self._sweep(state, now)
        outcome = state.get("outcome")
        if outcome:
            return _observation(workload_id, attempt, outcome, state)
        self._end_boost_if_due(state, now)
        tasks = state["tasks"]
        if len(tasks) < int(state.get("workers", 1)):
            # The portal died halfway through a submit: a partial gang must not run.
            self._kill_tasks(state, signal.SIGKILL)
            state["failed_at"] = now
            reason = R.TASKS_NOT_STARTED(n=len(tasks), m=int(state["workers"]))
            state["outcome"] = {"phase": Phase.FAILED.value, "reason": reason.to_json()}
            return _observation(workload_id, attempt, state["outcome"], state)
        # Liveness first: a runner writes its exit file before it exits, so a task seen dead
        # here has its exit file by the time it is read (unless it was killed).
        alive = [self._task_alive(task) for task in tasks]
        exits = [_read_exit(workdir / task["exit_file"]) for task in tasks]
        if state.get("stop_requested_at") is not None:
            if any(alive) or _leftovers(state):
                phase = Phase.RUNNING if state.get("ready") or state["kind"] == "job" else None
                return Observation(
                    workload_id,
                    phase or Phase.STARTING,
                    R.STOPPING_PROCESSES(),
                    attempt=attempt,
                )
            outcome = {"phase": Phase.STOPPED.value, "reason": R.STOPPED_ON_REQUEST().to_json()}
        elif state["kind"] == "job":
            outcome = self._job_outcome(workdir, state, exits, alive, now)
        elif state["kind"] == "serving":
            outcome = self._serving_outcome(workdir, state, exits, alive)
        else:
            outcome = self._server_outcome(workdir, state, exits, alive)
        if outcome is None:
            return self._live_observation(state, attempt, probe=probe)
        state["outcome"] = outcome
        self._sweep(state, now)
        return _observation(workload_id, attempt, outcome, state)

    @staticmethod
    def _end_boost_if_due(state: dict[str, Any], now: float) -> None:
        """Lower a start-up boost to the size's cap once it is due: ``startup_boost_seconds``
        after the app first answered, or ``STARTUP_BOOST_MAX_SECONDS`` after the start for
        one that never does (and at once for one being stopped)."""
        boost = state.get("cpu_boost")
        if not boost or boost.get("ended_at"):
            return
        ends_at = min(
            float(boost.get("ends_at") or math.inf),
            float(state["started_at"]) + STARTUP_BOOST_MAX_SECONDS,
        )
        if now < ends_at and state.get("stop_requested_at") is None:
            return
        for task in state["tasks"]:
            _sandbox.set_cpu_cap(task.get("cgroups") or (), int(boost["cpu_milli"]))
        boost["ended_at"] = now

    def _job_outcome(
        self,
        workdir: Path,
        state: dict[str, Any],
        exits: list[dict[str, Any] | None],
        alive: list[bool],
        now: float,
    ) -> dict[str, Any] | None:
        failures: list[tuple[float, int, int | None, str, bool]] = []
        for rank, ended in enumerate(exits):
            if ended is not None and ended["exit_code"] != 0:
                failures.append(
                    (ended["at"], rank, ended["exit_code"], _signal_name(ended), ended["oom"])
                )
            elif ended is None and not alive[rank]:
                failures.append((now, rank, None, "", False))
        if failures:
            _, rank, code, killer, oom = min(failures)  # the first to fail is the cause
            mib = state.get("memory_mib")
            reason = (
                R.WORKER_DISAPPEARED(n=rank)
                if code is None
                else R.WORKER_OUT_OF_MEMORY(n=rank, mib=mib, code=code)
                if oom
                else R.WORKER_KILLED(n=rank, signal=killer, code=code)
                if killer
                else R.WORKER_EXITED(n=rank, code=code)
            )
            last = _last_line(workdir / state["tasks"][rank]["log"])
            if last:
                reason = R.WITH_DETAIL(reason=reason, detail=last)
            state["failed_at"] = now
            for task, running in zip(state["tasks"], alive, strict=True):
                if running:
                    self._terminate_task(task)
            return {"phase": Phase.FAILED.value, "reason": reason.to_json(), "exit_code": code}
        if all(ended is not None for ended in exits):
            workers = len(exits)
            reason = R.EXITED_0() if workers == 1 else R.ALL_EXITED_0(n=workers)
            return {"phase": Phase.SUCCEEDED.value, "reason": reason.to_json(), "exit_code": 0}
        return None

    def _server_outcome(
        self,
        workdir: Path,
        state: dict[str, Any],
        exits: list[dict[str, Any] | None],
        alive: list[bool],
    ) -> dict[str, Any] | None:
        ended = exits[0]
        if ended is None and alive[0]:
            return None
        app = str(state["app"])
        name = "JupyterLab" if state.get("token") else APP_NAMES.get(app, app.capitalize())
        if ended is not None and ended["exit_code"] == 0:
            # Nobody asked for a stop, but nothing went wrong either: it shut itself down.
            reason = R.APP_SHUT_DOWN(app=name)
            return {"phase": Phase.STOPPED.value, "reason": reason.to_json(), "exit_code": 0}
        killer = _signal_name(ended) if ended else ""
        reason = (
            R.APP_DISAPPEARED(app=name)
            if ended is None
            else R.APP_OUT_OF_MEMORY(app=name, mib=state.get("memory_mib"), code=ended["exit_code"])
            if ended["oom"]
            else R.APP_KILLED(app=name, signal=killer, code=ended["exit_code"])
            if killer
            else R.APP_EXITED(app=name, code=ended["exit_code"])
        )
        last = _last_line(workdir / state["tasks"][0]["log"])
        if last:
            reason = R.WITH_DETAIL(reason=reason, detail=last)
        code = ended["exit_code"] if ended else None
        return {"phase": Phase.FAILED.value, "reason": reason.to_json(), "exit_code": code}

    def _live_observation(
        self, state: dict[str, Any], attempt: int, *, probe: bool = True
    ) -> Observation:
        workload_id = state["workload_id"]
        if state["kind"] == "job":
            return Observation(workload_id, Phase.RUNNING, attempt=attempt)
        if state["kind"] == "serving":
            return self._serving_observation(state, attempt, probe=probe)
        status = self._probe(state) if probe else None
        if status is None:
            if state.get("ready"):  # answered before: a slow reply does not make it STARTING
                return Observation(
                    workload_id,
                    Phase.RUNNING,
                    last_activity=_parse_time(state.get("last_activity")),
                    attempt=attempt,
                )
            return Observation(
                workload_id, Phase.STARTING, R.WAITING_FOR_SERVER_ANSWER(), attempt=attempt
            )
        if not state.get("ready") and state.get("cpu_boost"):
            state["cpu_boost"]["ends_at"] = time.time() + self.startup_boost_seconds
        state["ready"] = True
        if isinstance(status.get("last_activity"), str):
            state["last_activity"] = status["last_activity"]
        return Observation(
            workload_id,
            Phase.RUNNING,
            last_activity=_parse_time(state.get("last_activity")),
            attempt=attempt,
        )

    def _probe(self, state: dict[str, Any]) -> dict[str, Any] | None:
        """Jupyter's ``api/status`` (with the token) or TensorBoard's page: the body when it
        answers 200, else None. On a socket: code-server's ``/healthz``, a desktop's RFB
        greeting."""
        if state.get("socket"):
            if state["app"] in DESKTOP_APPS:
                if state.get("ready"):  # answered once: not asked again (each ask is a client)
                    return {} if os.path.exists(state["socket"]) else None
                return {} if _rfb_answers(state["socket"]) else None
            return _code_server_health(state["socket"])
        base = f"http://127.0.0.1:{state['port']}{state['base_url']}"
        token = state.get("token")
        request = urllib.request.Request(base + "api/status" if token else base)
        if token:
            request.add_header("Authorization", f"token {token}")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(request, timeout=PROBE_TIMEOUT) as response:
                if response.status != 200:
                    return None
                if not token:
                    return {}
                body = json.loads(response.read())
                body = body if isinstance(body, dict) else {}
            if state.get("warm_kernel") and not state.get("ready"):
                # Running means usable: the warm kernel (jupyter_warm.py) answers too.
                request = urllib.request.Request(base + "api/kernels")
                request.add_header("Authorization", f"token {token}")
                with opener.open(request, timeout=PROBE_TIMEOUT) as response:
                    kernels = json.loads(response.read()) if response.status == 200 else []
                if not any(
                    isinstance(k, dict) and k.get("execution_state") in ("idle", "busy")
                    for k in kernels
                ):
                    return None
            return body
        except (OSError, ValueError, urllib.error.URLError):
            return None

    # -- serving (model-server replicas, docs/serving.md) ------------------------------------

    supports_scaling = True

    def _start_serving(
        self, spec: WorkloadSpec, workdir: Path, placements: Sequence[TaskPlacement]
    ) -> dict[str, Any]:
        """The first replicas: at least one, so that a model that does not load fails the
        endpoint now rather than at its first request."""
        assert spec.serving is not None
        serving = spec.serving
        self._working_dir(spec, workdir)
        state = self._new_state(
            spec,
            workdir,
            workers=0,  # replicas come and go: no gang to check
            desired=0,
            serving_spec=_spec_to_json(spec),
            placements=[{"node": p.node, "gpu_indices": list(p.gpu_indices)} for p in placements],
        )
        self._scale_to(workdir, state, max(1, serving.min_replicas))
        return state

    def scale(self, handle: Handle, replicas: int) -> None:
        """Start or stop replicas until ``replicas`` run (within 0 … max_replicas)."""
        workdir, state = self._load(handle)
        if state is None or state.get("kind") != "serving":
            raise BackendError("not a serving workload of this backend")
        with self._locked(workdir):
            state = self._read_state(workdir) or state
            if state.get("outcome") or state.get("stop_requested_at") is not None:
                return
            self._scale_to(workdir, state, replicas)

    def replicas(self, handle: Handle) -> ReplicaStatus:
        """The replicas that answer ``/v2/health/ready`` (asked until each answers once)."""
        workdir, state = self._load(handle)
        if state is None or state.get("kind") != "serving":
            return ReplicaStatus(desired=0)
        with self._locked(workdir):
            state = self._read_state(workdir) or state
            before = _snapshot(state)
            if state.get("outcome") or state.get("stop_requested_at") is not None:
                return ReplicaStatus(desired=0)
            ready, starting = self._replica_sockets(state)
            self._save_if_changed(workdir, state, before)
            placements = state.get("placements") or []
            devices = sorted(
                {
                    index
                    for task in state["tasks"]
                    if task.get("ready") and not task.get("retired") and task.get("gone") is False
                    and task.get("slot") is not None and task["slot"] < len(placements)
                    for index in placements[task["slot"]]["gpu_indices"]
                }
            )  # fmt: skip
        return ReplicaStatus(
            desired=int(state.get("desired", 0)),
            ready=tuple(Endpoint(url="http://localhost/", unix_socket=path) for path in ready),
            starting=starting,
            gpu_utilisation=utilisation(devices) if devices else None,
        )

    def _replica_sockets(self, state: dict[str, Any]) -> tuple[list[str], int]:
        ready, starting = [], 0
        for task in state["tasks"]:
            if task.get("retired") or not self._task_alive(task):
                continue
            if not task.get("ready") and _v2_ready(task["socket"]):
                task["ready"] = True
                state["ready"] = True
            if task.get("ready"):
                ready.append(task["socket"])
            else:
                starting += 1
        return ready, starting

    def _scale_to(self, workdir: Path, state: dict[str, Any], replicas: int) -> None:
        spec = _spec_from_json(state["serving_spec"])
        assert spec.serving is not None
        replicas = max(0, min(replicas, spec.serving.max_replicas))
        active = [
            task for task in state["tasks"] if not task.get("retired") and self._task_alive(task)
        ]
        for task in active[replicas:][::-1]:  # the newest go first
            task["retired"] = True
            self._terminate_task(task)
        for _ in range(replicas - len(active)):
            self._start_replica(workdir, state, spec)
        state["desired"] = replicas
        self._write_state(workdir, state)

    def _start_replica(self, workdir: Path, state: dict[str, Any], spec: WorkloadSpec) -> None:
        serving = spec.serving
        assert serving is not None and self.serving_python is not None
        index = len(state["tasks"])
        placements = state.get("placements") or [{"node": self.node_name, "gpu_indices": []}]
        # Each replica on a placement of its own (its GPUs): the first no live replica holds.
        taken = {
            task.get("slot")
            for task in state["tasks"]
            if not task.get("retired") and self._task_alive(task)
        }
        slot = next((n for n in range(len(placements)) if n not in taken), 0)
        where = placements[slot]
        placement = TaskPlacement(node=where["node"], gpu_indices=tuple(where["gpu_indices"]))
        cwd = self._working_dir(spec, workdir)
        run_dir = self._app_dir(workdir, "serving")
        socket_path = _socket_path(run_dir / f"r{index}.sock")
        with contextlib.suppress(FileNotFoundError):
            socket_path.unlink()
        env = self._env(spec, placement, cwd)
        env["PYTHONUNBUFFERED"] = "1"
        command = [
            self.serving_python, "-P", str(MODEL_SERVER), "--socket", str(socket_path),
            "--model-dir", serving.model_dir, "--model-name", serving.model_name,
            "--framework", serving.framework,
            "--version", str(spec.labels.get("quanta.model-version", "1")),
        ]  # fmt: skip
        binds = [(serving.model_dir, serving.model_dir)]
        self._launch(state, workdir, index, spec, command, cwd, env, placement, binds)
        state["tasks"][-1].update(socket=str(socket_path), ready=False, retired=False, slot=slot)

    def _serving_outcome(
        self,
        workdir: Path,
        state: dict[str, Any],
        exits: list[dict[str, Any] | None],
        alive: list[bool],
    ) -> dict[str, Any] | None:
        """A replica that ends before it ever answered fails the endpoint with the server's
        last words (a model that does not load); one that dies later is replaced."""
        replace = 0
        for index, (task, ended, running) in enumerate(
            zip(state["tasks"], exits, alive, strict=True)
        ):
            if task.get("retired") or running:
                continue
            if task.get("ready"):
                task["retired"] = True
                replace += 1
                continue
            code = ended["exit_code"] if ended else None
            reason = R.MODEL_NOT_LOADED(n=index, code=code)
            last = _last_line(workdir / task["log"])
            if last:
                reason = R.WITH_DETAIL(reason=reason, detail=last)
            for other, other_running in zip(state["tasks"], alive, strict=True):
                if other_running:
                    self._terminate_task(other)
            state["failed_at"] = time.time()
            return {"phase": Phase.FAILED.value, "reason": reason.to_json(), "exit_code": code}
        if replace:
            spec = _spec_from_json(state["serving_spec"])
            for _ in range(replace):
                self._start_replica(workdir, state, spec)
        return None

    def _serving_observation(
        self, state: dict[str, Any], attempt: int, *, probe: bool = True
    ) -> Observation:
        workload_id = state["workload_id"]
        if probe:
            self._replica_sockets(state)
        if state.get("ready"):  # answered once: scaled down (even to zero) it still runs
            return Observation(workload_id, Phase.RUNNING, attempt=attempt)
        return Observation(
            workload_id, Phase.STARTING, R.WAITING_FOR_SERVER_ANSWER(), attempt=attempt
        )

    # -- processes ---------------------------------------------------------------------------

    def _task_alive(self, task: dict[str, Any]) -> bool:
        """The runner lives, or something of its session does (e.g. the command after a
        SIGKILLed runner)."""
        if task.get("gone"):
            return False
        runner = _identify(task)
        if runner is False:
            task["gone"] = True  # the pid now belongs to someone else: our session is over
            return False
        if runner is not None:
            return True
        if _session_members(int(task["pid"]), float(task["create_time"])):
            return True
        task["gone"] = True
        return False

    def _terminate_task(self, task: dict[str, Any]) -> None:
        """SIGTERM the runner's group (the runner alone), which forwards it once to the
        command's group; without a runner, SIGTERM what is left of the session."""
        runner = _identify(task)
        if runner is False:
            return
        if runner is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(task["pid"]), signal.SIGTERM)
            return
        _signal_session(task, signal.SIGTERM)

    def _kill_tasks(self, state: dict[str, Any], sig: signal.Signals) -> None:
        for task in state["tasks"]:
            if not task.get("gone") and _identify(task) is not False:
                _signal_session(task, sig)
            if sig == signal.SIGKILL:
                _sandbox.kill(task.get("cgroups") or ())
        _signal_marked(state["workload_id"], sig)

    def _sweep(self, state: dict[str, Any], now: float) -> None:
        """SIGKILL what may no longer run: every session once its grace after a stop or a
        gang failure is over, and the leftovers of a task whose command has exited. Then also
        every process marked with this workload's id, wherever it went (``setsid``, double
        fork): once the grace is over, or, without a stop or failure, once no task is left."""
        deadlines = [
            float(at) + self.stop_grace_seconds
            for at in (state.get("stop_requested_at"), state.get("failed_at"))
            if at is not None
        ]
        overdue = bool(deadlines) and now >= min(deadlines)
        workdir = self.root / state["workload_id"]
        for task in state["tasks"]:
            if task.get("gone"):
                continue
            finished = (workdir / task["exit_file"]).exists()
            if (overdue or finished) and _identify(task) is not False:
                _signal_session(task, signal.SIGKILL)
            if (overdue or (finished and not deadlines)) and task.get("cgroups"):
                _sandbox.kill(task["cgroups"])  # the whole sandbox, setsid children included
            self._task_alive(task)
        if overdue or (not deadlines and all(task.get("gone") for task in state["tasks"])):
            _signal_marked(state["workload_id"], signal.SIGKILL)
        if state.get("outcome") or all(task.get("gone") for task in state["tasks"]):
            for task in state["tasks"]:
                if task.get("cgroups") and task.get("gone") and _sandbox.remove(task["cgroups"]):
                    task["cgroups"] = []

    # -- state -------------------------------------------------------------------------------

    def _workload_dir(self, workload_id: str) -> Path:
        if not SAFE_ID.match(workload_id):
            raise BackendError(f"unsafe workload id {workload_id!r}")
        return self.root / workload_id

    def _load(self, handle: Handle) -> tuple[Path, dict[str, Any] | None]:
        """State from disk; else from the handle (the portal's copy), written back to disk."""
        workdir = self._workload_dir(handle.workload_id)
        state = self._read_state(workdir)
        if state is None and handle.state.get("tasks"):
            state = dict(handle.state)
            workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._write_state(workdir, state)
        return workdir, state

    @staticmethod
    def _read_state(workdir: Path) -> dict[str, Any] | None:
        try:
            state = json.loads((workdir / STATE_FILE).read_text(encoding="utf-8"))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except ValueError as error:
            raise BackendError(f"unreadable {workdir / STATE_FILE}: {error}") from error
        return state if isinstance(state, dict) else None

    def _save_if_changed(self, workdir: Path, state: dict[str, Any], before: str) -> None:
        if _snapshot(state) != before:
            self._write_state(workdir, state)

    @staticmethod
    def _write_state(workdir: Path, state: dict[str, Any]) -> None:
        """Atomic (write-then-rename) and private: the state holds the notebook token."""
        temporary = workdir / f".{STATE_FILE}.{os.getpid()}.{threading.get_ident()}"
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            json.dump(state, file, indent=1)
        os.replace(temporary, workdir / STATE_FILE)

    @staticmethod
    @contextlib.contextmanager
    def _locked(workdir: Path) -> Iterator[None]:
        """One caller at a time per workload, across threads and processes (web, workers)."""
        with open(workdir / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    # -- commands inside a running workload (the SSH gateway, docs/ssh.md) ------------------

    supports_exec = True

    def _remember_exec(self, state: dict[str, Any], cwd: Path, env: Mapping[str, str]) -> None:
        """Keep the first task's environment and home in the state, so a command the SSH
        gateway runs later sees what the workload's tasks see (a job's rank variables left
        out: a shell is no rank of the gang)."""
        state["exec"] = {
            "home": str(cwd),
            "env": {k: v for k, v in env.items() if k not in EXEC_ENV_DROPPED},
        }

    def exec_argv(
        self, handle: Handle, argv: Sequence[str]
    ) -> tuple[list[str], dict[str, str], str]:
        """(argv, env, cwd) that run ``argv`` inside the running workload: its tasks'
        environment, ``QUANTA_WORKLOAD_ID`` set (so Stop ends it too), HOME and cwd its home.
        BackendError when the workload does not run (any more)."""
        if not argv:
            raise BackendError("nothing to run")
        workdir, state = self._load(handle)
        if state is None:
            raise BackendError("the workload is not running")
        with self._locked(workdir):
            state = self._read_state(workdir) or state
            stopped = state.get("outcome") or state.get("stop_requested_at") is not None
            if stopped or not any(self._task_alive(task) for task in state["tasks"]):
                raise BackendError("the workload is not running")
        saved = state.get("exec") or {}
        home = str(saved.get("home") or workdir / "work")
        if saved.get("env"):
            env = {str(k): str(v) for k, v in saved["env"].items()}
        else:  # started before the state kept its environment
            env = {k: v for k, v in os.environ.items() if k in ENV_ALLOW or k.startswith("LC_")}
            env.setdefault("LANG", "C.UTF-8")
        env.setdefault("SHELL", "/bin/bash" if Path("/bin/bash").exists() else "/bin/sh")
        env[WORKLOAD_ID_VARIABLE] = str(state["workload_id"])
        env["HOME"] = home
        Path(home).mkdir(parents=True, exist_ok=True)
        return [*self._sandbox_enter_prefix(state), *argv], env, home

    def listening_ports(self, handle: Handle) -> set[int]:
        """TCP ports on the loopback (or every address) that processes of this workload
        listen on: its tasks' sessions, their descendants and every marked process."""
        _workdir, state = self._load(handle)
        if state is None:
            return set()
        processes: dict[int, Any] = {}
        for task in state["tasks"]:
            if task.get("gone"):
                continue
            for member in _session_members(int(task["pid"]), float(task["create_time"])):
                processes[member.pid] = member
                with contextlib.suppress(psutil.Error):
                    for child in member.children(recursive=True):
                        processes[child.pid] = child
        for process in _marked_processes(str(state["workload_id"])):
            processes[process.pid] = process
        ports: set[int] = set()
        for process in processes.values():
            with contextlib.suppress(psutil.Error, OSError):
                for connection in process.net_connections(kind="tcp"):
                    if connection.status != psutil.CONN_LISTEN or not connection.laddr:
                        continue
                    if connection.laddr.ip in LOOPBACK_OR_ANY:
                        ports.add(int(connection.laddr.port))
        return ports

    # -- end of the SSH gateway's section ---------------------------------------------------


# -- helpers -----------------------------------------------------------------------------------


def _identify(task: Mapping[str, Any]) -> bool | None:
    """True: the runner lives. None: no process has its pid (or it just became a zombie,
    now reaped). False: the pid belongs to another process, so our session is gone too."""
    pid = int(task["pid"])
    try:
        process = psutil.Process(pid)
        if abs(float(process.create_time()) - float(task["create_time"])) > CREATE_TIME_SLACK:
            return False
        if process.status() != psutil.STATUS_ZOMBIE:
            return True
    except psutil.NoSuchProcess:
        return None
    except psutil.AccessDenied:
        return False
    _reap(pid)
    return None


def _reap(pid: int) -> None:
    with _children_lock:
        child = _children.pop(pid, None)
    if child is not None:
        child.poll()
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _session_members(sid: int, create_time: float) -> list[Any]:
    """Live processes of the session ``sid``. The kernel does not hand out a pid that is
    still a session id, so members are ours; the create time check guards the rest."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) != sid:
                continue
            if float(process.create_time()) < create_time - CREATE_TIME_SLACK:
                continue
            if process.status() == psutil.STATUS_ZOMBIE:
                _reap(process.pid)
                continue
            members.append(process)
        except (OSError, psutil.Error):
            continue
    return members


def _signal_session(task: Mapping[str, Any], sig: signal.Signals) -> None:
    """Signal every process of the task's session and their descendants (a Jupyter server's
    kernels start sessions of their own)."""
    targets: dict[int, Any] = {}
    for member in _session_members(int(task["pid"]), float(task["create_time"])):
        targets[member.pid] = member
        with contextlib.suppress(psutil.Error):
            for child in member.children(recursive=True):
                targets[child.pid] = child
    for process in targets.values():
        with contextlib.suppress(psutil.Error):
            process.send_signal(sig)


def _marked_processes(workload_id: str) -> list[Any]:
    """Live processes of this user whose environment carries ``QUANTA_WORKLOAD_ID`` =
    ``workload_id``: every task sets it and children inherit it, so this finds what left the
    task's session (``setsid``, a double fork) and is no longer anyone's descendant. Never
    this process or its ancestors (a portal started from inside a workload)."""
    me = os.getpid()
    uid = os.getuid()
    spared = {me}
    with contextlib.suppress(psutil.Error):
        spared.update(parent.pid for parent in psutil.Process(me).parents())
    marked = []
    for process in psutil.process_iter():
        if process.pid in spared:
            continue
        try:
            if process.uids().real != uid:
                continue
            if process.environ().get(WORKLOAD_ID_VARIABLE) != workload_id:
                continue
            if process.status() == psutil.STATUS_ZOMBIE:
                _reap(process.pid)
                continue
            marked.append(process)
        except (OSError, psutil.Error):
            continue
    return marked


def _leftovers(state: Mapping[str, Any]) -> bool:
    """Something of the workload still lives outside its tasks' sessions: marked with its id,
    or in one of its tasks' cgroups."""
    if _marked_processes(str(state["workload_id"])):
        return True
    return any(_sandbox.members(task.get("cgroups") or ()) for task in state["tasks"])


def _root_tag(root: Path) -> str:
    """A short tag of the backend's root, so two backends' cgroups never share a name."""
    return hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:8]


def _signal_marked(workload_id: str, sig: signal.Signals) -> None:
    for process in _marked_processes(workload_id):
        with contextlib.suppress(psutil.Error):
            process.send_signal(sig)


def _signal_escaped(state: Mapping[str, Any], sig: signal.Signals) -> None:
    """Signal the marked processes outside every task's session: the runner forwards the
    stop to its command's group only, and the command must see one SIGTERM, not two."""
    sessions = {int(task["pid"]) for task in state["tasks"]}
    for process in _marked_processes(str(state["workload_id"])):
        with contextlib.suppress(OSError, psutil.Error):
            if os.getsid(process.pid) not in sessions:
                process.send_signal(sig)


def _read_exit(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        at = path.stat().st_mtime
    except (FileNotFoundError, ValueError):
        return None
    return {
        "exit_code": int(data["exit_code"]),
        "signal": data.get("signal"),
        "at": at,
        "oom": bool(data.get("oom")),
    }


def _signal_name(ended: Mapping[str, Any]) -> str:
    """The signal that ended a task ("SIGKILL"), or "" when it exited."""
    number = ended.get("signal")
    if not number:
        return ""
    try:
        return signal.Signals(int(number)).name
    except ValueError:
        return f"signal {number}"


def _last_line(path: Path, limit: int = 300) -> str:
    """The last non-empty line of a log, for a failure's reason."""
    try:
        with open(path, "rb") as file:
            file.seek(max(file.seek(0, os.SEEK_END) - 4096, 0))
            tail = file.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1][:limit] if lines else ""


def _observation(
    workload_id: str, attempt: int, outcome: Mapping[str, Any], state: Mapping[str, Any]
) -> Observation:
    return Observation(
        workload_id,
        Phase(outcome["phase"]),
        Reason.from_json(outcome["reason"]) if outcome.get("reason") else None,
        exit_code=outcome.get("exit_code"),
        last_activity=_parse_time(state.get("last_activity")),
        attempt=attempt,
    )


def _parse_time(value: object) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _whole_utf8(data: bytes) -> bytes:
    """Drop a UTF-8 sequence cut off at the end of a chunk; the next read starts with it."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:  # a continuation byte: look further back for the lead
            continue
        if byte < 0x80:
            needed = 1
        elif byte >> 5 == 0b110:
            needed = 2
        elif byte >> 4 == 0b1110:
            needed = 3
        else:
            needed = 4
        return data if back >= needed else data[:-back]
    return data


def _snapshot(state: Mapping[str, Any]) -> str:
    return json.dumps(state, sort_keys=True)


def _free_port() -> int:
    """A port free right now; the short race with other binders is accepted."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _socket_path(path: Path) -> Path:
    if len(os.fsencode(path)) > SOCKET_PATH_MAX:
        reason = R.SOCKET_PATH_TOO_LONG(path=str(path))
        raise BackendError(str(reason), reason=reason)
    return path


def _install_root(binary: str | None) -> Path | None:
    """The npm prefix a code-server binary belongs to (all of it is loaded), else its dir."""
    if binary is None:
        return None
    real = Path(os.path.realpath(binary))
    parts = real.parts
    if "node_modules" in parts:
        return Path(*parts[: parts.index("node_modules")])
    return real.parent


def _pycharm_launcher(home: str | None) -> str | None:
    if not home:
        return None
    for name in PYCHARM_LAUNCHERS:
        candidate = Path(home) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _pycharm_root(launcher: str | None) -> Path | None:
    return Path(launcher).parent.parent if launcher else None


def _rfb_answers(path: str) -> bool:
    """The VNC server accepts on its socket and greets with "RFB 003.00x"."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(PROBE_TIMEOUT)
            probe.connect(path)
            return probe.recv(12).startswith(b"RFB 003.")
    except OSError:
        return False


def _v2_ready(path: str) -> bool:
    """A model server's ``/v2/health/ready`` over its socket answers 200."""
    connection = http.client.HTTPConnection("localhost", timeout=PROBE_TIMEOUT)
    try:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(PROBE_TIMEOUT)
        probe.connect(path)
        connection.sock = probe
        connection.request("GET", "/v2/health/ready")
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


def _spec_to_json(spec: WorkloadSpec) -> dict[str, Any]:
    """What a replica started later needs of the spec (the replicas outlive the submit)."""
    assert spec.serving is not None
    serving = spec.serving
    return {
        "workload_id": spec.workload_id,
        "kind": spec.kind,
        "app": spec.app,
        "owner": spec.owner,
        "env": dict(spec.env),
        "resources": dataclasses.asdict(spec.resources),
        "attempt": spec.attempt,
        "working_dir": spec.working_dir,
        "labels": dict(spec.labels),
        "datasets": [dataclasses.asdict(mount) for mount in spec.datasets],
        "serving": {
            "model_name": serving.model_name,
            "framework": serving.framework,
            "model_dir": serving.model_dir,
            "max_replicas": serving.max_replicas,
            "min_replicas": serving.min_replicas,
        },
    }


def _spec_from_json(data: Mapping[str, Any]) -> WorkloadSpec:
    resources = dict(data["resources"])
    resources["gpu_models"] = tuple(resources.get("gpu_models") or ())
    return WorkloadSpec(
        workload_id=data["workload_id"],
        kind=data["kind"],
        app=data["app"],
        owner=data["owner"],
        env=dict(data["env"]),
        resources=Resources(**resources),
        attempt=int(data["attempt"]),
        working_dir=data["working_dir"],
        labels=dict(data["labels"]),
        datasets=tuple(DatasetMount(**mount) for mount in data["datasets"]),
        serving=ServingSpec(**data["serving"]),
    )


def _code_server_health(path: str) -> dict[str, Any] | None:
    """code-server's ``/healthz`` over its socket: {} or, after a heartbeat (someone uses it),
    {"last_activity": ISO time}; None until it answers 200."""
    connection = http.client.HTTPConnection("localhost", timeout=PROBE_TIMEOUT)
    try:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(PROBE_TIMEOUT)
        probe.connect(path)
        connection.sock = probe
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        if response.status != 200:
            return None
        body = json.loads(response.read())
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        connection.close()
    beat = body.get("lastHeartbeat") if isinstance(body, dict) else None
    if isinstance(beat, int | float) and beat > 0:
        at = dt.datetime.fromtimestamp(beat / 1000, tz=dt.UTC)
        return {"last_activity": at.isoformat()}
    return {}
