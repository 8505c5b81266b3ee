"""What the local backend can isolate on this host, and the pieces that do it.

* a **sandbox**: bubblewrap (``bwrap``) gives each task its own mount, PID, IPC and UTS
  namespaces. It sees the system read-only (``/usr``, ``/etc``, the Python it runs), its
  owner's home and its private run directory read-write, a private ``/tmp`` and nothing else
  of the host: not the portal's code, database, settings or data directory, not other homes,
  not other workloads' tokens or ``state.json``. Killing the sandbox's init kills everything
  in it, including processes that called ``setsid``.
* **limits**: a cgroup per task (v2 under a delegated parent, or the v1 ``memory``, ``pids``
  and ``cpu`` controllers) with the flavor's CPU and memory and a pids limit; without a
  writable cgroup, only an address-space rlimit for memory.
* **GPU shares**: NVIDIA MPS, where its control daemon runs, enforces a client's device memory
  and active-thread percentage.

:func:`detect` says which of these work (each is tried, not assumed) as an
:class:`Isolation`. No Django here: the portal passes in its settings.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

SANDBOX_MODES = ("auto", "required", "off")
NETWORK_MODES = ("host", "none")
V1_CONTROLLERS = ("memory", "pids", "cpu")
V2_CONTROLLERS = ("cpu", "memory", "pids")
CFS_PERIOD_US = 100_000
DEFAULT_MPS_PIPE_DIRECTORY = "/tmp/nvidia-mps"
CGROUP_ROOT = Path("/sys/fs/cgroup")

# Label keys the backend reports on its node (the hosts page reads them).
SANDBOX_LABEL = "quanta.io/sandbox"  # bubblewrap | none | off
LIMITS_LABEL = "quanta.io/limits"  # cgroup-v2 | cgroup-v1 | rlimit
GPU_SHARES_LABEL = "quanta.io/gpu-shares"  # mps | not-isolated


@dataclass(frozen=True)
class Isolation:
    """What is in force for the workloads of one local backend.

    ``sandbox``: ``"bubblewrap"`` or None. ``limits``: ``"cgroup-v2"``, ``"cgroup-v1"``,
    ``"rlimit"`` (memory only, as address space) or None. ``gpu_shares``: ``"mps"`` or None.
    ``notes``: why something is missing, in English, for logs and the docs."""

    sandbox: str | None
    limits: str | None
    gpu_shares: str | None
    notes: tuple[str, ...] = ()
    off: bool = False  # LOCAL_SANDBOX=off: not missing, switched off

    def labels(self) -> dict[str, str]:
        return {
            SANDBOX_LABEL: self.sandbox or ("off" if self.off else "none"),
            LIMITS_LABEL: self.limits or "none",
            GPU_SHARES_LABEL: self.gpu_shares or "not-isolated",
        }


# -- bubblewrap ----------------------------------------------------------------------------------


@functools.cache
def bwrap_problem(bwrap: str = "bwrap") -> str | None:
    """None where ``bwrap`` runs a command here (tried once: user namespaces or setuid may be
    missing), else why not."""
    path = shutil.which(bwrap)
    if path is None:
        return f"{bwrap} is not installed"
    try:
        result = subprocess.run(
            [path, "--ro-bind", "/", "/", "--unshare-pid", "--proc", "/proc", "--dev", "/dev",
             "true"],
            capture_output=True,
            timeout=20,
            check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{bwrap} does not run: {error}"
    if result.returncode != 0:
        words = result.stderr.decode(errors="replace").strip().splitlines()
        return f"{bwrap} does not work here: {words[-1] if words else result.returncode}"
    return None


def python_prefixes(python: str) -> tuple[Path, ...]:
    """The directories ``python`` needs to run: its prefix, base prefix and the directory of
    the binary it resolves to (a venv's ``python`` is a symlink into its base)."""
    return _python_prefixes(python, Path(python).resolve().as_posix())


@functools.cache
def _python_prefixes(python: str, resolved: str) -> tuple[Path, ...]:
    if python == sys.executable:
        found = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    else:
        probe = "import sys; print(sys.prefix); print(sys.base_prefix); print(sys.exec_prefix)"
        try:
            output = subprocess.run(
                [python, "-I", "-c", probe], capture_output=True, timeout=30, check=True
            ).stdout.decode()
        except (OSError, subprocess.SubprocessError):
            output = ""
        found = [line for line in output.splitlines() if line.strip()]
    found.append(str(Path(resolved).parent.parent))
    found.append(str(Path(python).parent.parent))
    return _outermost(Path(p) for p in found if p)


def _outermost(paths: Iterable[Path]) -> tuple[Path, ...]:
    """Distinct paths, without those inside another one (or inside /usr, bound anyway)."""
    kept: list[Path] = []
    for path in sorted(
        {p.resolve() if p.exists() else p for p in paths}, key=lambda p: len(p.parts)
    ):
        if path == Path("/") or any(path.is_relative_to(k) for k in (*kept, Path("/usr"))):
            continue
        kept.append(path)
    return tuple(kept)


def wrap(
    command: Sequence[str],
    *,
    home: Path,
    run_dir: Path,
    python: str = sys.executable,
    readonly_paths: Sequence[Path] = (),
    readonly_binds: Sequence[tuple[Path | str, Path | str]] = (),
    network: str = "host",
    gpu_devices: bool = False,
    mps_pipe_directory: Path | None = None,
    bwrap: str = "bwrap",
) -> list[str]:
    """The bubblewrap argv that runs ``command`` sandboxed.

    Visible read-only: ``/usr``, ``/etc`` and the merged-usr links, the prefixes of
    ``python``, ``readonly_paths`` (same path inside) and ``readonly_binds`` (``(source,
    destination)``: datasets). Read-write: ``home`` and ``run_dir``, at their own paths.
    Private: ``/tmp``, ``/dev/shm``, ``/proc`` (only the sandbox's processes), ``/dev``
    (null, zero, random, tty, a fresh devpts for terminals; the NVIDIA devices with
    ``gpu_devices``). Network: the host's (``"host"``) or none (``"none"``).

    No ``--new-session``: the tasks' session has no controlling terminal (the runner's stdin
    is /dev/null), so there is none to push input into, and Jupyter's terminals open their own
    ptys and sessions. The environment is the backend's allow-list, passed as it is."""
    if network not in NETWORK_MODES:
        raise ValueError(f"LOCAL_SANDBOX_NETWORK must be one of {NETWORK_MODES}, not {network!r}")
    path = shutil.which(bwrap) or bwrap
    argv = [
        path, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
        "--hostname", "quanta",
    ]  # fmt: skip
    if network == "none":
        argv.append("--unshare-net")
    argv += ["--ro-bind", "/usr", "/usr"]
    for name in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        link = Path(name)
        if link.is_symlink():
            argv += ["--symlink", os.readlink(link), name]
        elif link.is_dir():
            argv += ["--ro-bind", name, name]
    argv += ["--ro-bind", "/etc", "/etc", "--proc", "/proc", "--dev", "/dev"]
    argv += ["--tmpfs", "/tmp", "--tmpfs", "/dev/shm", "--tmpfs", "/run"]
    if gpu_devices:
        for device in sorted(Path("/dev").glob("nvidia*")):
            argv += ["--dev-bind", str(device), str(device)]
        if Path("/sys").is_dir():
            argv += ["--ro-bind", "/sys", "/sys"]
    for prefix in _outermost([*python_prefixes(python), *map(Path, readonly_paths)]):
        if prefix.exists():
            argv += ["--ro-bind", str(prefix), str(prefix)]
    for source, destination in readonly_binds:
        argv += ["--ro-bind", str(source), str(destination)]
    if mps_pipe_directory is not None and mps_pipe_directory.is_dir():
        argv += ["--bind", str(mps_pipe_directory), str(mps_pipe_directory)]
    argv += ["--bind", str(home), str(home), "--bind", str(run_dir), str(run_dir)]
    argv += ["--chdir", str(home), "--", *command]
    return argv


def sandbox_init(runner_pid: int, runner_create_time: float) -> int | None:
    """The host pid of the sandbox's init (bwrap's child, pid 1 inside), started by the runner
    ``runner_pid``: runner -> bwrap -> bwrap (init) -> command."""
    try:
        runner = psutil.Process(runner_pid)
        if abs(runner.create_time() - runner_create_time) > 0.05:
            return None
        for outer in runner.children():
            if outer.name() != "bwrap":
                continue
            for inner in outer.children():
                if inner.name() == "bwrap":
                    return int(inner.pid)
    except psutil.Error:
        return None
    return None


# -- cgroups -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cgroups:
    """Where per-task cgroups are made. ``version`` 2: ``parents`` holds one directory (with
    the controllers delegated to its children); 1: one directory per controller."""

    version: int
    parents: Mapping[str, Path] = field(default_factory=dict)

    def create(
        self,
        name: str,
        *,
        cpu_milli: int,
        memory_mib: int,
        pids_max: int,
        cpu_cap_milli: int | None = None,
    ) -> tuple[str, ...]:
        """Make the cgroup(s) of one task with its limits; their directories. The CPU weight
        always follows ``cpu_milli`` (its share when CPUs are contended, as the kubelet maps a
        request); the cap is ``cpu_cap_milli`` where given (a start-up boost, lowered to
        ``cpu_milli`` later with :func:`set_cpu_cap`)."""
        cap = max(cpu_milli, cpu_cap_milli or 0)
        made: list[str] = []
        try:
            if self.version == 2:
                directory = self.parents["unified"] / name
                directory.mkdir(exist_ok=True)
                made.append(str(directory))
                _write(directory / "memory.max", str(memory_mib * 1024 * 1024))
                with contextlib.suppress(OSError):
                    _write(directory / "memory.swap.max", "0")
                _write(directory / "pids.max", str(pids_max))
                _write(directory / "cpu.max", f"{_quota(cap)} {CFS_PERIOD_US}")
                with contextlib.suppress(OSError):
                    _write(directory / "cpu.weight", str(_weight(cpu_milli)))
                return tuple(made)
            for controller, parent in self.parents.items():
                directory = parent / name
                directory.mkdir(exist_ok=True)
                made.append(str(directory))
                if controller == "memory":
                    limit = str(memory_mib * 1024 * 1024)
                    _write(directory / "memory.limit_in_bytes", limit)
                    if (directory / "memory.memsw.limit_in_bytes").exists():
                        with contextlib.suppress(OSError):
                            _write(directory / "memory.memsw.limit_in_bytes", limit)
                    with contextlib.suppress(OSError):
                        _write(directory / "memory.swappiness", "0")
                elif controller == "pids":
                    _write(directory / "pids.max", str(pids_max))
                elif controller == "cpu":
                    _write(directory / "cpu.cfs_period_us", str(CFS_PERIOD_US))
                    _write(directory / "cpu.cfs_quota_us", str(_quota(cap)))
                    with contextlib.suppress(OSError):
                        _write(directory / "cpu.shares", str(_shares(cpu_milli)))
        except OSError:
            remove(made)
            raise
        return tuple(made)


def set_cpu_cap(directories: Iterable[str], cpu_milli: int) -> bool:
    """Set the CPU cap of a task's cgroup(s) (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``); False
    where none was written (the cgroup is gone)."""
    written = False
    for directory in directories:
        path = Path(directory)
        with contextlib.suppress(OSError):
            if (path / "cpu.max").exists():
                _write(path / "cpu.max", f"{_quota(cpu_milli)} {CFS_PERIOD_US}")
                written = True
            elif (path / "cpu.cfs_quota_us").exists():
                _write(path / "cpu.cfs_quota_us", str(_quota(cpu_milli)))
                written = True
    return written


def cpu_cap_milli(directories: Iterable[str]) -> int | None:
    """The CPU cap now in force, in millicores; None where there is none or it is unreadable."""
    for directory in directories:
        path = Path(directory)
        with contextlib.suppress(OSError, ValueError):
            if (path / "cpu.max").exists():
                limit, period = (path / "cpu.max").read_text(encoding="ascii").split()
                return None if limit == "max" else int(limit) * 1000 // int(period)
            if (path / "cpu.cfs_quota_us").exists():
                quota = int((path / "cpu.cfs_quota_us").read_text(encoding="ascii"))
                length = int((path / "cpu.cfs_period_us").read_text(encoding="ascii"))
                return None if quota < 0 else quota * 1000 // length
    return None


def _quota(cpu_milli: int) -> int:
    return max(1000, cpu_milli * CFS_PERIOD_US // 1000)


def _shares(cpu_milli: int) -> int:
    """cgroup v1 ``cpu.shares`` for a request, as the kubelet computes it (1,024 per core)."""
    return max(2, min(262_144, cpu_milli * 1024 // 1000))


def _weight(cpu_milli: int) -> int:
    """cgroup v2 ``cpu.weight`` for a request: the kubelet's mapping of shares onto 1..10,000."""
    return 1 + (_shares(cpu_milli) - 2) * 9999 // 262_142


def _write(path: Path, value: str) -> None:
    with open(path, "w", encoding="ascii") as file:
        file.write(value)


def members(directories: Iterable[str]) -> set[int]:
    """The pids in these cgroups."""
    pids: set[int] = set()
    for directory in directories:
        with contextlib.suppress(OSError, ValueError):
            text = Path(directory, "cgroup.procs").read_text(encoding="ascii")
            pids.update(int(line) for line in text.split())
    pids.discard(os.getpid())
    return pids


def kill(directories: Sequence[str]) -> None:
    """SIGKILL everything in these cgroups (``cgroup.kill`` where the kernel has it)."""
    for directory in directories:
        kill_file = Path(directory, "cgroup.kill")
        if kill_file.exists():
            with contextlib.suppress(OSError):
                _write(kill_file, "1")
    for pid in members(directories):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def remove(directories: Iterable[str]) -> bool:
    """rmdir the cgroups once empty; True when none is left."""
    left = False
    for directory in directories:
        try:
            os.rmdir(directory)
        except FileNotFoundError:
            continue
        except OSError as error:
            left = left or error.errno != errno.ENOENT
    return not left


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fstype, super options) of each cgroup mount."""
    found: list[tuple[str, str, set[str]]] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        head, _, tail = line.partition(" - ")
        fields, tail_fields = head.split(), tail.split()
        if len(fields) < 5 or len(tail_fields) < 3 or not tail_fields[0].startswith("cgroup"):
            continue
        found.append((fields[4], tail_fields[0], set(tail_fields[2].split(","))))
    return found


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and under "unified" for v2."""
    own: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            number, controllers, path = line.split(":", 2)
            if number == "0" and controllers == "":
                own["unified"] = path
            for controller in controllers.split(","):
                if controller:
                    own[controller] = path
    return own


def _probe_writable(parent: Path) -> bool:
    """We can make and remove a child cgroup under ``parent`` (made first if missing)."""
    probe = parent / f".quanta-probe-{os.getpid()}"
    try:
        parent.mkdir(parents=True, exist_ok=True)
        probe.mkdir()
        probe.rmdir()
    except OSError:
        return False
    return True


def detect_cgroups(parent: str | None = None) -> tuple[Cgroups | None, str]:
    """Per-task cgroups where the host lets us make them, else None and why.

    ``parent`` (LOCAL_CGROUP_PARENT): a path inside the cgroup hierarchy, e.g.
    ``/quanta.slice/workloads``; the same path under each v1 controller. By default: the
    portal's own cgroup plus ``/quanta`` (v1), or for v2 the portal's own cgroup when it is
    the root of the hierarchy (a container's) or already delegates the controllers."""
    mounts = _mounts()
    own = _own_cgroups()
    reasons: list[str] = []
    unified = next((Path(point) for point, kind, _ in mounts if kind == "cgroup2"), None)
    if unified is not None:
        cgroups, why = _detect_v2(unified, parent, own.get("unified", "/"))
        if cgroups is not None:
            return cgroups, ""
        reasons.append(why)
    v1_points = {
        controller: Path(point)
        for point, kind, options in mounts
        if kind == "cgroup"
        for controller in V1_CONTROLLERS
        if controller in options
    }
    if v1_points:
        parents: dict[str, Path] = {}
        for controller in V1_CONTROLLERS:
            point = v1_points.get(controller)
            if point is None:
                reasons.append(f"cgroup v1 has no {controller} controller mounted")
                break
            relative = parent if parent else own.get(controller, "/").rstrip("/") + "/quanta"
            directory = point / relative.lstrip("/")
            if not _probe_writable(directory):
                reasons.append(f"cgroup v1 {directory} is not writable")
                break
            parents[controller] = directory
        else:
            return Cgroups(1, parents), ""
    if not mounts:
        reasons.append("no cgroup filesystem is mounted")
    return None, "; ".join(reasons)


def _detect_v2(unified: Path, parent: str | None, own: str) -> tuple[Cgroups | None, str]:
    try:
        available = set((unified / "cgroup.controllers").read_text().split())
    except OSError:
        return None, f"cgroup v2 at {unified} cannot be read"
    missing = [c for c in V2_CONTROLLERS if c not in available]
    if missing:
        return None, f"cgroup v2 at {unified} lacks the {', '.join(missing)} controller(s)"
    if parent:
        directory = unified / parent.lstrip("/")
    elif own in ("", "/"):
        directory = unified / "quanta"
    else:
        directory = unified / own.lstrip("/")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for level in [
            *reversed(directory.relative_to(unified).parents),
            directory.relative_to(unified),
        ]:
            node = unified / level
            enabled = set((node / "cgroup.subtree_control").read_text().split())
            wanted = [c for c in V2_CONTROLLERS if c not in enabled]
            if wanted:
                _write(node / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
    except OSError as error:
        return None, (
            f"cgroup v2 {directory} does not delegate cpu, memory and pids ({error.strerror}); "
            "set LOCAL_CGROUP_PARENT to a delegated cgroup"
        )
    if not _probe_writable(directory):
        return None, f"cgroup v2 {directory} is not writable"
    return Cgroups(2, {"unified": directory}), ""


# -- NVIDIA MPS ----------------------------------------------------------------------------------


def detect_mps() -> Path | None:
    """The MPS pipe directory where an MPS control daemon runs, else None."""
    directory = Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_MPS_PIPE_DIRECTORY)
    if (directory / "control").exists():
        return directory
    for process in psutil.process_iter(["name"]):
        if process.info.get("name") == "nvidia-cuda-mps-control":
            return directory
    return None


def mps_env(gpu_indices: Sequence[int], gpu_milli: int, gpu_memory_mib: int) -> dict[str, str]:
    """The MPS client limits of a fractional share: its device memory and thread share.
    ``CUDA_VISIBLE_DEVICES`` is the one device, so inside it is device 0."""
    if not gpu_milli or not gpu_indices:
        return {}
    env = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(max(1, gpu_milli // 10))}
    if gpu_memory_mib:
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={gpu_memory_mib}M"
    return env


# -- all together --------------------------------------------------------------------------------


def detect(
    mode: str = "auto",
    *,
    cgroup_parent: str | None = None,
    bwrap: str = "bwrap",
    gpus: bool = False,
) -> tuple[Isolation, Cgroups | None, Path | None]:
    """What this host gives: the Isolation to report, the cgroups to use, MPS's pipe dir."""
    if mode not in SANDBOX_MODES:
        raise ValueError(f"LOCAL_SANDBOX must be one of {SANDBOX_MODES}, not {mode!r}")
    notes: list[str] = []
    sandbox = None
    if mode == "off":
        notes.append("the sandbox is switched off (LOCAL_SANDBOX=off)")
    else:
        problem = bwrap_problem(bwrap)
        if problem is None:
            sandbox = "bubblewrap"
        else:
            notes.append(f"no sandbox: {problem}")
    cgroups, why = detect_cgroups(cgroup_parent)
    limits = None
    if cgroups is not None:
        limits = f"cgroup-v{cgroups.version}"
    else:
        limits = "rlimit"
        notes.append(
            f"CPU and pids limits are not enforced and memory only as address space: {why}"
        )
    mps = detect_mps()
    if mps is None:
        notes.append("GPU shares are not isolated: NVIDIA MPS is not running")
    elif not gpus:
        notes.append("NVIDIA MPS runs, but this host reports no GPUs")
    isolation = Isolation(
        sandbox=sandbox,
        limits=limits,
        gpu_shares="mps" if mps is not None else None,
        notes=tuple(notes),
        off=mode == "off",
    )
    return isolation, cgroups, mps
