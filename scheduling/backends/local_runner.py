"""Runs one task of a local workload and leaves its exit code behind.

The local backend starts this file (by path, with the interpreter it was given) as the leader
of a new session, so the task survives a portal restart and the backend can find all of it
again. It imports nothing but the standard library: the portal's code and settings must not
load inside users' workloads.

What it adds over a bare ``Popen``:

* the exit code lands in ``--exit-file`` atomically once the command ends, so a restarted
  portal, which is no longer the parent and cannot ``wait()``, still learns how a task ended;
* the command runs in its own process group, and SIGTERM / SIGINT / SIGHUP sent to the runner
  are forwarded to that group exactly once. The backend signals only the runner's group, so a
  program with a graceful-shutdown handler sees one SIGTERM, not two;
* with ``--cgroup DIR`` (repeatable), it joins those cgroups before it starts the command, so
  the task's limits hold for all of it; with ``--rlimit-as BYTES`` (no cgroup on this host), the
  command gets that address-space limit instead. A task killed by the memory cgroup's OOM
  killer is written down as such (``"oom": true``);
* with ``--sandboxed`` the command is bubblewrap: its two bwrap processes (the monitor and the
  sandbox's init) are spared the forwarded signal, which goes to the sandboxed processes of the
  group, and an exit code 128 + n from bwrap counts as signal n.

Usage: ``python local_runner.py --log FILE --exit-file FILE [--cwd DIR] [--cgroup DIR]...
[--rlimit-as BYTES] [--sandboxed] -- ARGV...``; ``python local_runner.py --enter
[--cgroup DIR]... -- ARGV...`` joins the cgroups and execs ARGV (a process entering a running
sandbox).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from types import FrameType

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def write_exit_file(
    path: str, exit_code: int, signal_number: int | None, *, oom: bool = False
) -> None:
    """Write-then-rename, so a reader never sees half a file."""
    temporary = f"{path}.tmp"
    data: dict[str, object] = {"exit_code": exit_code, "signal": signal_number}
    if oom:
        data["oom"] = True
    with open(temporary, "w", encoding="utf-8") as file:
        json.dump(data, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


def join_cgroups(directories: Sequence[str]) -> None:
    for directory in directories:
        with open(os.path.join(directory, "cgroup.procs"), "w", encoding="ascii") as file:
            file.write(str(os.getpid()))


def oom_kills(directories: Sequence[str]) -> int:
    """The memory cgroup's OOM kill count (v1 ``memory.oom_control``, v2 ``memory.events``)."""
    total = 0
    for directory in directories:
        for name in ("memory.oom_control", "memory.events"):
            with (
                contextlib.suppress(OSError, ValueError),
                open(os.path.join(directory, name), encoding="ascii") as file,
            ):
                for line in file:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        total += int(value)
    return total


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, process group) of ``pid`` from /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            fields = file.read().rpartition(b")")[2].split()
        return int(fields[1]), int(fields[2])
    except (OSError, ValueError, IndexError):
        return None


def _findable(program: str, cwd: str | None) -> bool:
    """``program`` resolves (on PATH, or as a path from ``cwd``); the sandbox shows the same
    /usr, Python and home at the same paths."""
    if "/" in program:
        return os.access(os.path.join(cwd or ".", program), os.X_OK)
    return shutil.which(program) is not None


def signal_sandboxed(group: int, signum: int) -> None:
    """Signal the group ``group`` (bwrap's) but not bwrap itself nor its child, the sandbox's
    init: bwrap dies of SIGTERM, and then its --die-with-parent kills everything inside."""
    spared = {group}
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                stats[int(entry)] = stat
    spared.update(pid for pid, (parent, _) in stats.items() if parent == group)
    for pid, (_, pgrp) in stats.items():
        if pgrp == group and pid not in spared:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)


def run(
    command: Sequence[str],
    *,
    log_path: str,
    exit_path: str,
    cwd: str | None,
    cgroups: Sequence[str] = (),
    rlimit_as: int | None = None,
    sandboxed: bool = False,
    program: str | None = None,
) -> int:
    """Run ``command`` with output appended to ``log_path``; return its shell-style code."""
    child: subprocess.Popen[bytes] | None = None
    pending: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        if child is None:
            pending.append(signum)  # before the child exists: handled after Popen
            return
        if sandboxed:
            signal_sandboxed(child.pid, signum)
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signum)

    def limit() -> None:
        if rlimit_as is not None:
            resource.setrlimit(resource.RLIMIT_AS, (rlimit_as, rlimit_as))

    for sig in FORWARDED:
        signal.signal(sig, forward)

    with open(log_path, "ab", buffering=0) as log:
        try:
            join_cgroups(cgroups)
        except OSError as error:
            log.write(f"quanta: cannot join the task's cgroup: {error}\n".encode())
            write_exit_file(exit_path, 125, None)
            return 125
        if pending:  # stopped before it started: do not start it at all
            write_exit_file(exit_path, 128 + pending[0], pending[0])
            return 128 + pending[0]
        if program is not None and not _findable(program, cwd):
            # bwrap would say "execvp …" and exit 1: say it the way an unsandboxed start does.
            log.write(f"quanta: cannot start {program!r}: No such file or directory\n".encode())
            write_exit_file(exit_path, 127, None)
            return 127
        try:
            child = subprocess.Popen(
                list(command),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=0,
                preexec_fn=limit if rlimit_as is not None else None,
            )
        except OSError as error:
            log.write(f"quanta: cannot start {command[0]!r}: {error.strerror}\n".encode())
            code = 126 if isinstance(error, PermissionError) else 127
            write_exit_file(exit_path, code, None)
            return code
        for number in pending:
            forward(number, None)
        returncode = child.wait()

    signal_number = -returncode if returncode < 0 else None
    if sandboxed and signal_number is None and 128 < returncode <= 128 + 64:
        signal_number = returncode - 128  # bwrap's init reports its child's signal so
    code = 128 + signal_number if signal_number is not None else returncode
    write_exit_file(exit_path, code, signal_number, oom=bool(cgroups) and oom_kills(cgroups) > 0)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", help="file that receives stdout and stderr")
    parser.add_argument("--exit-file", help="where the exit code is written")
    parser.add_argument("--cwd", default=None, help="working directory of the command")
    parser.add_argument("--cgroup", action="append", default=[], help="cgroup to join first")
    parser.add_argument("--rlimit-as", type=int, default=None, help="address-space limit")
    parser.add_argument("--sandboxed", action="store_true", help="the command is bwrap")
    parser.add_argument("--program", help="the program the sandbox will run: found first")
    parser.add_argument("--enter", action="store_true", help="join the cgroups and exec")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the argv to run")
    args = parser.parse_args(argv)
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        parser.error("no command given after --")
    if args.enter:
        join_cgroups(args.cgroup)
        os.execvp(command[0], command)
    if not args.log or not args.exit_file:
        parser.error("--log and --exit-file are required")
    return run(
        command,
        log_path=args.log,
        exit_path=args.exit_file,
        cwd=args.cwd,
        cgroups=args.cgroup,
        rlimit_as=args.rlimit_as,
        sandboxed=args.sandboxed,
        program=args.program,
    )


if __name__ == "__main__":
    sys.exit(main())
