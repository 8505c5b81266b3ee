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
  program with a graceful-shutdown handler sees one SIGTERM, not two.

Usage: ``python local_runner.py --log FILE --exit-file FILE [--cwd DIR] -- ARGV...``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from types import FrameType

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def write_exit_file(path: str, exit_code: int, signal_number: int | None) -> None:
    """Write-then-rename, so a reader never sees half a file."""
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="utf-8") as file:
        json.dump({"exit_code": exit_code, "signal": signal_number}, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


def run(command: Sequence[str], *, log_path: str, exit_path: str, cwd: str | None) -> int:
    """Run ``command`` with output appended to ``log_path``; return its shell-style code."""
    child: subprocess.Popen[bytes] | None = None
    pending: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        if child is None:
            pending.append(signum)  # before the child exists: handled after Popen
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signum)

    for sig in FORWARDED:
        signal.signal(sig, forward)

    with open(log_path, "ab", buffering=0) as log:
        if pending:  # stopped before it started: do not start it at all
            write_exit_file(exit_path, 128 + pending[0], pending[0])
            return 128 + pending[0]
        try:
            child = subprocess.Popen(
                list(command),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=0,
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
    code = 128 + signal_number if signal_number is not None else returncode
    write_exit_file(exit_path, code, signal_number)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", required=True, help="file that receives stdout and stderr")
    parser.add_argument("--exit-file", required=True, help="where the exit code is written")
    parser.add_argument("--cwd", default=None, help="working directory of the command")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the argv to run")
    args = parser.parse_args(argv)
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        parser.error("no command given after --")
    return run(command, log_path=args.log, exit_path=args.exit_file, cwd=args.cwd)


if __name__ == "__main__":
    sys.exit(main())
