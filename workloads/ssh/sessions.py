"""What one SSH channel runs inside a workload: a shell (with or without a PTY), a command
(``ssh host cmd``; VS Code Remote-SSH runs ``bash`` and feeds it scripts), or the ``sftp``
subsystem, which is OpenSSH's ``sftp-server`` started inside the workload like any other
command, so it sees exactly what the workload sees (never the portal's files).

The backend says how to run a command there (``exec_argv``); this module moves the bytes
between the SSH channel and that process, passes window size changes and signals on, and
sends back its exit status or the signal that ended it. When the channel goes away, the
process group is hung up and then killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import socket
import struct
import sys
import termios
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import asyncssh

from scheduling.backends.base import BackendError, ExecBackend, Handle
from tenants.models import SshKey
from workloads.models import Workload
from workloads.ssh import access

logger = logging.getLogger(__name__)

T = TypeVar("T")
InThread = Callable[..., Awaitable[Any]]

SFTP_SERVERS = (
    "/usr/lib/openssh/sftp-server",  # Debian, Ubuntu
    "/usr/libexec/openssh/sftp-server",  # Fedora, RHEL
    "/usr/libexec/sftp-server",
)
ACTIVITY_SECONDS = 10.0  # how often data through a session reports activity at most
EXIT_DRAIN_SECONDS = 2.0  # after the process exits, how long its last output may take
KILL_GRACE_SECONDS = 2.0  # after a hang-up, before SIGKILL
CHUNK = 65536
# What a client may set in the session's environment (``SendEnv``); the rest is ignored.
CLIENT_ENV_PREFIXES = ("LC_",)
CLIENT_ENV_NAMES = frozenset({"LANG", "LANGUAGE", "TZ", "COLORTERM"})


def find_sftp_server() -> str | None:
    for candidate in SFTP_SERVERS:
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def login_shell() -> str:
    return "/bin/bash" if Path("/bin/bash").exists() else "/bin/sh"


@dataclass
class Login:
    """One authenticated SSH connection: whose key, which workload, how to reach it."""

    key: SshKey
    workload: Workload
    client: str
    backend: Any
    in_thread: InThread
    ready: asyncio.Event = field(default_factory=asyncio.Event)  # once the login is recorded
    _last_activity: float = field(default=0.0)

    @property
    def handle(self) -> Handle:
        return Handle(str(self.workload.pk), dict(self.workload.backend_state or {}))

    async def touch(self) -> None:
        """Traffic counts as activity (idle culling), reported once per ACTIVITY_SECONDS."""
        now = time.monotonic()
        if now - self._last_activity < ACTIVITY_SECONDS:
            return
        self._last_activity = now
        try:
            await self.in_thread(access.used, self.workload.pk)
        except Exception:
            logger.exception("ssh: recording activity of %s failed", self.workload.pk)

    async def audit(self, fn: Callable[..., None], what: str, **details: Any) -> None:
        try:
            await self.in_thread(fn, self.key, self.workload, self.client, what, **details)
        except Exception:
            logger.exception("ssh: audit row for %s failed", self.workload.pk)


def what_runs(process: asyncssh.SSHServerProcess[bytes]) -> tuple[str, list[str], dict[str, Any]]:
    """(kind, argv, audit details) of a channel's request; kind "" when it is refused."""
    shell = login_shell()
    if process.subsystem is not None:
        if process.subsystem != "sftp":
            return "", [], {"subsystem": process.subsystem}
        server = find_sftp_server()
        if server is None:
            return "", [], {"subsystem": "sftp", "missing": "sftp-server"}
        return "sftp", [server], {}
    if process.command is not None:
        return "exec", [shell, "-c", process.command], {"command": process.command[:500]}
    return "shell", [shell], {"pty": process.get_terminal_type() is not None}


async def run(login: Login, process: asyncssh.SSHServerProcess[bytes]) -> None:
    """Serve one session channel to its end; never raises."""
    started = time.monotonic()
    kind, argv, details = what_runs(process)
    status: int | str = 255
    try:
        if not kind:
            message = (
                "sftp-server is not installed on this host (package openssh-sftp-server)"
                if details.get("missing")
                else f"unknown subsystem {details.get('subsystem')!r}"
            )
            _fail(process, message)
            return
        if not isinstance(login.backend, ExecBackend):
            _fail(
                process,
                f"SSH into workloads on the {login.backend.kind} backend is not available yet",
            )
            return
        term = process.get_terminal_type() if kind != "sftp" else None
        # With a terminal, the PTY is opened inside the workload and handed over this pair.
        channel = socket.socketpair() if term else None
        try:
            run_argv = pty_argv(channel[1].fileno(), argv) if channel else argv
            try:
                command, env, cwd = await login.in_thread(
                    login.backend.exec_argv, login.handle, run_argv
                )
            except BackendError as error:
                _fail(process, str(error))
                return
            for name, value in process.env.items():
                if name in CLIENT_ENV_NAMES or name.startswith(CLIENT_ENV_PREFIXES):
                    env[str(name)] = str(value)
            await login.audit(access.session_started, kind, **details)
            await login.touch()
            if term and channel:
                status = await _run_with_pty(login, process, command, env, cwd, term, channel)
            else:
                status = await _run_with_pipes(login, process, command, env, cwd)
        finally:
            for end in channel or ():
                end.close()
    except Exception:
        logger.exception("ssh: session in %s failed", login.workload.pk)
        with contextlib.suppress(Exception):
            process.exit(255)
    finally:
        if kind:
            await login.audit(
                access.session_ended,
                kind,
                seconds=round(time.monotonic() - started, 1),
                exit_status=status,
            )


def _fail(process: asyncssh.SSHServerProcess[bytes], message: str) -> None:
    with contextlib.suppress(Exception):
        process.stderr.write(f"quanta: {message}\r\n".encode())
        process.exit(1)


def _finish(process: asyncssh.SSHServerProcess[bytes], returncode: int) -> int | str:
    """Send the exit status, or the signal that ended the process, back to the client."""
    with contextlib.suppress(Exception):
        if returncode < 0:
            try:
                name = signal.Signals(-returncode).name.removeprefix("SIG")
            except ValueError:
                name = "KILL"
            process.exit_with_signal(name)
            return f"SIG{name}"
        process.exit(returncode)
    return returncode


def _set_size(fd: int, size: tuple[int, int, int, int]) -> None:
    cols, rows, width, height = size
    if cols and rows:
        with contextlib.suppress(OSError):
            fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, width, height))


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


async def _pump_input(
    login: Login,
    process: asyncssh.SSHServerProcess[bytes],
    write: Callable[[bytes], Awaitable[None]],
    end: Callable[[], None],
    pid: int,
    tty: int | None,
) -> None:
    """The client's bytes to the process; window changes to the PTY; signals to its group."""
    while True:
        try:
            data = await process.stdin.read(CHUNK)
        except asyncssh.TerminalSizeChanged as change:
            if tty is not None:
                _set_size(tty, (change.width, change.height, change.pixwidth, change.pixheight))
            continue
        except asyncssh.BreakReceived:
            _signal_group(pid, signal.SIGINT)
            continue
        except asyncssh.SignalReceived as received:
            sig = getattr(signal, f"SIG{received.signal}", None)
            if sig is not None:
                _signal_group(pid, sig)
            continue
        except (asyncssh.Error, OSError):
            break
        if not data:
            end()
            break
        try:
            await write(data)
        except (OSError, ConnectionError):
            break
        await login.touch()


async def _pump_output(
    login: Login,
    read: Callable[[], Awaitable[bytes]],
    target: asyncssh.SSHWriter[bytes],
) -> None:
    while True:
        try:
            data = await read()
        except OSError:  # EIO: the PTY's other side is closed
            break
        if not data:
            break
        try:
            target.write(data)
            await target.drain()
        except (asyncssh.Error, OSError, ConnectionError):
            break
        await login.touch()


async def _supervise(
    process: asyncssh.SSHServerProcess[bytes],
    child: asyncio.subprocess.Process,
    outputs: list[asyncio.Task[None]],
    inputs: asyncio.Task[None],
) -> int | str:
    """Wait for the process to end (then for its last output) or for the channel to close
    (then hang up and kill its group)."""
    exited = asyncio.ensure_future(child.wait())
    closed = asyncio.ensure_future(process.channel.wait_closed())
    try:
        await asyncio.wait({exited, closed}, return_when=asyncio.FIRST_COMPLETED)
        if not exited.done():
            _signal_group(child.pid, signal.SIGHUP)
            try:
                await asyncio.wait_for(asyncio.shield(exited), KILL_GRACE_SECONDS)
            except TimeoutError:
                _signal_group(child.pid, signal.SIGKILL)
                await exited
            return child.returncode if child.returncode is not None else 255
        if outputs:
            await asyncio.wait(outputs, timeout=EXIT_DRAIN_SECONDS)
        return _finish(process, exited.result())
    finally:
        closed.cancel()
        inputs.cancel()
        for task in outputs:
            task.cancel()
        if child.returncode is None:
            _signal_group(child.pid, signal.SIGKILL)


async def _run_with_pipes(
    login: Login,
    process: asyncssh.SSHServerProcess[bytes],
    argv: list[str],
    env: dict[str, str],
    cwd: str,
) -> int | str:
    child = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    assert child.stdin and child.stdout and child.stderr
    stdin, stdout, stderr = child.stdin, child.stdout, child.stderr

    async def write(data: bytes) -> None:
        stdin.write(data)
        await stdin.drain()

    def end() -> None:
        with contextlib.suppress(OSError):
            stdin.close()

    outputs = [
        asyncio.ensure_future(_pump_output(login, lambda: stdout.read(CHUNK), process.stdout)),
        asyncio.ensure_future(_pump_output(login, lambda: stderr.read(CHUNK), process.stderr)),
    ]
    inputs = asyncio.ensure_future(_pump_input(login, process, write, end, child.pid, None))
    return await _supervise(process, child, outputs, inputs)


# Runs inside the workload (after the sandbox's prefix): opens the PTY there, so the shell's
# terminal lives in the workload's own /dev/pts (``tty`` names it, programs that look their
# terminal up find it), hands the master side back over the socket in argv[1] and becomes
# the shell, in a new session with that terminal as its controlling one. Standard library
# only: the portal's code does not load inside workloads.
PTY_HELPER = """
import fcntl, os, socket, sys, termios
channel = socket.socket(fileno=int(sys.argv[1]))
master, slave = os.openpty()
socket.send_fds(channel, [b"pty"], [master])
os.close(master)
channel.close()
os.setsid()
fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
for fd in (0, 1, 2):
    os.dup2(slave, fd)
if slave > 2:
    os.close(slave)
os.execvp(sys.argv[2], sys.argv[2:])
"""
PTY_HANDOVER_SECONDS = 15.0


def pty_argv(channel: int, argv: list[str]) -> list[str]:
    """``argv`` started by :data:`PTY_HELPER`, which sends its PTY over fd ``channel``."""
    return [sys.executable, "-I", "-S", "-c", PTY_HELPER, str(channel), *argv]


def _receive_master(sock: socket.socket) -> int:
    sock.settimeout(PTY_HANDOVER_SECONDS)
    _, fds, _, _ = socket.recv_fds(sock, 16, 1)
    if not fds:
        raise OSError("the workload's shell ended before it had a terminal")
    return fds[0]


async def _run_with_pty(
    login: Login,
    process: asyncssh.SSHServerProcess[bytes],
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    term: str,
    channel: tuple[socket.socket, socket.socket],
) -> int | str:
    """The process on a new PTY opened inside the workload (``argv`` starts with
    :func:`pty_argv`): job control, ^C and window sizes work as in any terminal."""
    loop = asyncio.get_running_loop()
    ours, theirs = channel
    env["TERM"] = term
    try:
        child = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            pass_fds=(theirs.fileno(),),
        )
    finally:
        theirs.close()
    try:
        master = await loop.run_in_executor(None, _receive_master, ours)
    except BaseException:
        _signal_group(child.pid, signal.SIGKILL)
        await child.wait()
        raise
    finally:
        ours.close()
    _set_size(master, process.get_terminal_size())
    reader = asyncio.StreamReader()
    read_transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(os.dup(master), "rb", 0)
    )
    write_transport, _ = await loop.connect_write_pipe(
        asyncio.Protocol, os.fdopen(os.dup(master), "wb", 0)
    )

    async def write(data: bytes) -> None:
        write_transport.write(data)
        while write_transport.get_write_buffer_size() > 4 * CHUNK:
            await asyncio.sleep(0.01)

    outputs = [
        asyncio.ensure_future(_pump_output(login, lambda: reader.read(CHUNK), process.stdout))
    ]
    inputs = asyncio.ensure_future(
        _pump_input(login, process, write, lambda: None, child.pid, master)
    )
    try:
        return await _supervise(process, child, outputs, inputs)
    finally:
        read_transport.close()
        write_transport.close()
        os.close(master)
