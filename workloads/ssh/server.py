"""The portal's SSH gateway (asyncssh): ``ssh <workload>@<portal> -p <port>`` reaches a shell
inside that workload, for remote IDEs (VS Code Remote-SSH, JetBrains Gateway), ``scp`` and
``sftp``. See docs/ssh.md.

- Public keys only (the keys on people's accounts); no passwords, no keyboard-interactive.
- The user name names the workload (``workloads.ssh.access``); every refusal looks the same
  to the client ("Permission denied (publickey)").
- Sessions run inside the workload through its backend (``workloads.ssh.sessions``).
- Port forwarding (direct-tcpip) only to loopback ports that the workload's own processes
  listen on; no remote forwarding, no agent forwarding, no X11.
- A workload that stops ends its SSH connections.

Nothing listens per workload: one port for the whole portal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, TypeVar

import asyncssh
from asyncssh.constants import EXTENDED_DATA_STDERR
from django.db import close_old_connections

from scheduling.backends.base import ExecBackend
from scheduling.backends.registry import get_backend
from workloads.ssh import access, sessions

logger = logging.getLogger(__name__)

T = TypeVar("T")

WATCH_SECONDS = 3.0  # how often a connection checks that its workload still runs
LOGIN_TIMEOUT_SECONDS = 60
FORWARD_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "ip6-localhost"})

_executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="ssh-db")
_in_flight: set[Future[Any]] = set()


async def in_thread(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run blocking work (the database, the backend) off the event loop, with Django's
    connection hygiene around it."""

    def call() -> Any:
        close_old_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    future = _executor.submit(call)
    _in_flight.add(future)
    future.add_done_callback(_in_flight.discard)
    return await asyncio.wrap_future(future)


def wait_for_work(timeout: float = 10.0) -> None:
    """Until the blocking work under way (an audit row of a session that just ended) is done."""
    wait(list(_in_flight), timeout=timeout)


class GatewayServer(asyncssh.SSHServer):
    """One client connection."""

    def __init__(self) -> None:
        self.conn: asyncssh.SSHServerConnection | None = None
        self.client = ""
        self.login: sessions.Login | None = None
        self._tried: dict[tuple[str, str], access.Resolved] = {}
        self._watcher: asyncio.Task[None] | None = None
        self._forwarded: set[int] = set()

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn
        peer = conn.get_extra_info("peername") or ("?", 0)
        self.client = f"{peer[0]}:{peer[1]}"

    def connection_lost(self, exc: Exception | None) -> None:
        if self._watcher is not None:
            self._watcher.cancel()

    # -- authentication ----------------------------------------------------------------------

    def begin_auth(self, username: str) -> bool:
        return True

    def password_auth_supported(self) -> bool:
        return False

    def kbdint_auth_supported(self) -> bool:
        return False

    def public_key_auth_supported(self) -> bool:
        return True

    async def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        """Called for the client's offer and again with its signature: resolved once."""
        fingerprint = key.get_fingerprint("sha256")
        tried = self._tried.get((username, fingerprint))
        if tried is None:
            try:
                tried = await in_thread(access.resolve, fingerprint, username)
            except Exception:
                logger.exception("ssh: resolving %r failed", username)
                return False
            self._tried[(username, fingerprint)] = tried
            if tried.workload is None:
                await self._refused(tried, username, fingerprint)
        if tried.workload is None:
            return False
        login = self.login
        # The last key that may go in is the one that signs in (a client offers several).
        if login is None or (login.key.pk, login.workload.pk) != (
            tried.key.pk if tried.key else None,
            tried.workload.pk,
        ):
            try:
                backend = await in_thread(get_backend, tried.workload.cluster)
            except Exception:
                logger.exception("ssh: no backend for %s", tried.workload.pk)
                return False
            self.login = sessions.Login(
                key=tried.key,  # type: ignore[arg-type]
                workload=tried.workload,
                client=self.client,
                backend=backend,
                in_thread=in_thread,
            )
        return True

    async def _refused(self, tried: access.Resolved, username: str, fingerprint: str) -> None:
        if tried.key is None:
            logger.info("ssh: unknown key %s from %s for %r", fingerprint, self.client, username)
            return
        why = "ambiguous" if tried.choices else "no_workload"
        logger.info(
            "ssh: %s refused for %r from %s (%s)", tried.key.user, username, self.client, why
        )
        if tried.choices and self.conn is not None:
            # Only workloads this person may open are listed.
            self.conn.send_auth_banner(access.ambiguous_message(tried.choices, username))
        with contextlib.suppress(Exception):
            await in_thread(access.refused, tried.key, username, self.client, why)

    def auth_completed(self) -> None:
        login = self.login
        assert login is not None
        logger.info("ssh: %s into %s from %s", login.key.user, login.workload.pk, self.client)
        self._watcher = asyncio.ensure_future(self._signed_in(login))

    async def _signed_in(self, login: sessions.Login) -> None:
        """The login's audit row (before any of its sessions' rows), then the watch."""
        try:
            await in_thread(access.signed_in, login.key, login.workload, self.client)
        except Exception:
            logger.exception("ssh: recording the sign-in to %s failed", login.workload.pk)
        finally:
            login.ready.set()
        await self._watch(login)

    async def _watch(self, login: sessions.Login) -> None:
        """End the connection once the workload no longer runs (stopped, culled, failed)."""
        while True:
            await asyncio.sleep(WATCH_SECONDS)
            try:
                running = await in_thread(access.still_running, login.workload.pk)
            except Exception:
                logger.exception("ssh: checking %s failed", login.workload.pk)
                continue
            if not running and self.conn is not None:
                logger.info("ssh: %s no longer runs: closing its connection", login.workload.pk)
                self.conn.disconnect(
                    asyncssh.DISC_BY_APPLICATION, "the workload is no longer running"
                )
                return

    # -- port forwarding ---------------------------------------------------------------------

    def connection_requested(
        self, dest_host: str, dest_port: int, orig_host: str, orig_port: int
    ) -> Any:
        if self.login is None or dest_host.lower() not in FORWARD_HOSTS:
            raise asyncssh.ChannelOpenError(
                asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED,
                "Forwarding is only to ports of this workload on localhost",
            )
        return self._forward(self.login, dest_port)

    async def _forward(self, login: sessions.Login, port: int) -> Any:
        backend = login.backend
        ports: set[int] = set()
        if isinstance(backend, ExecBackend):
            try:
                ports = await in_thread(backend.listening_ports, login.handle)
            except Exception:
                logger.exception("ssh: ports of %s unknown", login.workload.pk)
        if port not in ports:
            raise asyncssh.ChannelOpenError(
                asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED,
                f"Port {port} is not a port this workload listens on",
            )
        await login.ready.wait()
        if port not in self._forwarded:
            self._forwarded.add(port)
            await login.audit(access.session_started, "forward", port=port)
        await login.touch()
        assert self.conn is not None
        return await self.conn.forward_connection("127.0.0.1", port)

    def session_requested(self) -> GatewayProcess:
        return GatewayProcess(_process, None, 3, False)

    def server_requested(self, listen_host: str, listen_port: int) -> bool:
        return False  # no remote (reverse) forwarding

    def unix_connection_requested(self, dest_path: str) -> bool:
        return False

    def unix_server_requested(self, listen_path: str) -> bool:
        return False


class GatewayProcess(asyncssh.SSHServerProcess[bytes]):
    """A session channel. asyncssh would serve the ``sftp`` subsystem itself, on the portal's
    own files; here every subsystem goes to ``sessions.run``, which starts OpenSSH's
    sftp-server inside the workload (or refuses what it does not know)."""

    def subsystem_requested(self, subsystem: str) -> bool:
        return True

    def session_started(self) -> None:
        chan = self._chan
        stdin = asyncssh.SSHReader[bytes](self, chan)
        stdout = asyncssh.SSHWriter[bytes](self, chan)
        stderr = asyncssh.SSHWriter[bytes](self, chan, EXTENDED_DATA_STDERR)
        handler = self._start_process(stdin, stdout, stderr)
        assert self._conn is not None and handler is not None
        self._conn.create_task(handler, stdin.logger)


async def _process(process: asyncssh.SSHServerProcess[bytes]) -> None:
    owner = process.channel.get_connection().get_owner()
    login = getattr(owner, "login", None)
    if login is None:
        process.exit(1)
        return
    await login.ready.wait()
    await sessions.run(login, process)


def host_key(path: Path) -> asyncssh.SSHKey:
    """The gateway's host key, generated (Ed25519, mode 0600) on the first start."""
    path = Path(path)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        key = asyncssh.generate_private_key("ssh-ed25519", comment="quanta-ssh-gateway")
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as file:
            file.write(key.export_private_key())
        logger.info("ssh: generated the host key %s", path)
    return asyncssh.read_private_key(str(path))


async def start(host: str, port: int, key_file: Path) -> asyncssh.SSHAcceptor:
    """Listen on ``host``:``port`` (0: a free port; see ``acceptor.get_port()``)."""
    key = await asyncio.get_running_loop().run_in_executor(None, host_key, key_file)
    return await asyncssh.create_server(
        GatewayServer,
        host,
        port,
        server_host_keys=[key],
        encoding=None,
        line_editor=False,
        agent_forwarding=False,
        x11_forwarding=False,
        allow_scp=False,  # scp runs the client's "scp -t" inside the workload, like any command
        login_timeout=LOGIN_TIMEOUT_SECONDS,
        server_version="Quanta",
    )


class GatewayThread(threading.Thread):
    """The gateway on a thread with its own event loop (``manage.py serve``). A port that
    cannot be bound is logged; the portal runs on without SSH."""

    def __init__(self, host: str, port: int, key_file: Path) -> None:
        super().__init__(name="ssh-gateway", daemon=True)
        self.host, self.port, self.key_file = host, port, key_file
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.acceptor: asyncssh.SSHAcceptor | None = None
        self.error: Exception | None = None

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.acceptor = self.loop.run_until_complete(start(self.host, self.port, self.key_file))
        except Exception as error:  # OSError: in use, no permission; a bad key file
            self.error = error
            logger.error("ssh: the gateway cannot listen on %s:%s: %s", self.host, self.port, error)
            self.ready.set()
            return
        logger.info("ssh: gateway listening on %s:%s", self.host, self.acceptor.get_port())
        self.ready.set()
        self.loop.run_forever()

    def stop(self, timeout: float = 10.0) -> None:
        """Close the listener and every connection, let their last audit rows be written,
        then end the loop."""

        async def close() -> None:
            if self.acceptor is not None:
                self.acceptor.close()
                await self.acceptor.wait_closed()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self.loop.is_running():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(close(), self.loop).result(timeout)
            wait_for_work(timeout)
            self.loop.call_soon_threadsafe(self.loop.stop)
