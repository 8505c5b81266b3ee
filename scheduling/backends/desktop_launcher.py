"""Runs one desktop of the local backend: an X server with VNC (TigerVNC's ``Xvnc``), a light
window manager (openbox), and the template's program, as one task.

The local backend starts this file under its runner (by path, with the interpreter it was
given): standard library only, like the runner. The VNC server listens on a UNIX socket in the
workload's private run directory and nowhere else (no TCP port): the portal bridges the
browser's noVNC WebSocket to it. X clients authenticate with a fresh cookie (an Xauthority
file in the run directory); the X server listens on its socket in /tmp/.X11-unix only (no TCP,
no abstract socket: the network namespace is shared between workloads).

The desktop ends when the program does (its exit code), or when Xvnc does. A program that is
not on this host ends the task at once with "<program>: not found on this host" (exit 127),
so the workload fails with that reason instead of waiting forever.

Usage: ``python desktop_launcher.py --run-dir DIR [--geometry WxH] -- PROGRAM ARGS...``
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from types import FrameType

XVNC = "Xvnc"
WINDOW_MANAGER = "openbox"
START_TIMEOUT = 30.0  # seconds for Xvnc to open its socket


def fail(message: str, code: int = 127) -> int:
    print(f"quanta desktop: {message}", flush=True)
    return code


def rfb_answers(path: str) -> bool:
    """The socket accepts and greets with an RFB version."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(1.0)
            probe.connect(path)
            return probe.recv(12).startswith(b"RFB ")
    except OSError:
        return False


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, help="private directory: sockets, cookie")
    parser.add_argument("--geometry", default="1600x900")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="-- then the program's argv")
    args = parser.parse_args(argv)
    program = list(args.program)
    if program[:1] == ["--"]:
        program = program[1:]
    if not program:
        parser.error("no program given after --")
    for needed in (XVNC, "xauth"):
        if shutil.which(needed) is None:
            return fail(f"{needed}: not found on this host")
    resolved = shutil.which(program[0])
    if resolved is None:
        return fail(f"{program[0]}: not found on this host")

    run_dir = args.run_dir
    os.makedirs(run_dir, mode=0o700, exist_ok=True)
    rfb = os.path.join(run_dir, "rfb.sock")
    authority = os.path.join(run_dir, "Xauthority")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(rfb)
    cookie = secrets.token_hex(16)
    # The cookie is written before the server starts: Xvnc reads -auth at startup.
    descriptor = os.open(authority, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.close(descriptor)

    children: list[subprocess.Popen[bytes]] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        for child in reversed(children):
            with contextlib.suppress(ProcessLookupError):
                child.terminate()
        sys.exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)

    read_fd, write_fd = os.pipe()
    # No TCP at all (-rfbport -1, -nolisten tcp): RFB on the private socket only.
    xvnc = [
        XVNC, "-displayfd", str(write_fd), "-auth", authority,
        "-rfbunixpath", rfb, "-rfbunixmode", "0600", "-rfbport", "-1",
        "-SecurityTypes", "None", "-nolisten", "tcp", "-nolisten", "local",
        "-geometry", args.geometry, "-depth", "24",
        # Every connection comes from the same socket "host", the portal's probes included:
        # TigerVNC's blacklist (5 early hang-ups) would lock the browser out.
        "-UseBlacklist=0",
    ]  # fmt: skip
    server = subprocess.Popen(
        xvnc,
        pass_fds=(write_fd,),
        stdin=subprocess.DEVNULL,
    )
    children.append(server)
    os.close(write_fd)
    display = b""
    with os.fdopen(read_fd, "rb") as reader:
        display = reader.readline().strip()
    if not display.isdigit():
        server.wait()
        return fail(f"{XVNC} did not start (exit code {server.returncode})", 1)
    display_name = f":{display.decode()}"
    subprocess.run(
        ["xauth", "-f", authority, "add", display_name, ".", cookie],
        check=False,
        stdin=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + START_TIMEOUT
    while not rfb_answers(rfb):
        if server.poll() is not None or time.monotonic() > deadline:
            server.terminate()
            return fail(f"{XVNC} did not open {rfb}", 1)
        time.sleep(0.1)

    env = dict(os.environ, DISPLAY=display_name, XAUTHORITY=authority)
    print(f"quanta desktop: {XVNC} on display {display_name}, RFB at {rfb}", flush=True)
    if shutil.which(WINDOW_MANAGER):
        children.append(subprocess.Popen([WINDOW_MANAGER], env=env, stdin=subprocess.DEVNULL))
    else:
        print(f"quanta desktop: {WINDOW_MANAGER} not found; no window manager", flush=True)
    app = subprocess.Popen([resolved, *program[1:]], env=env, stdin=subprocess.DEVNULL)
    children.append(app)
    print(f"quanta desktop: started {program[0]} (pid {app.pid})", flush=True)
    while True:
        code = app.poll()
        if code is not None:
            print(f"quanta desktop: {program[0]} exited with code {code}", flush=True)
            for child in reversed(children[:-1]):
                child.terminate()
            return code if code >= 0 else 128 - code
        if server.poll() is not None:
            app.terminate()
            return fail(f"{XVNC} exited with code {server.returncode}", 1)
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())
