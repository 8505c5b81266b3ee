"""The SSH gateway end to end on this host: bob adds a key through the API, a real gateway
listens on a free port, bob's real local workload runs; an asyncssh client (and OpenSSH's
``ssh`` where installed) runs commands, a PTY shell and SFTP inside it, and forwards to its
ports. charlie's key, an unknown key, a workload that does not exist and a stopped one all
meet the same refusal."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncssh
import psutil
import pytest
from django.db import OperationalError

from core.models import AuditEvent
from scheduling.backends import registry
from scheduling.backends.base import ExecBackend, Handle
from scheduling.backends.local import LocalBackend
from scheduling.backends.simulated import SimulatedBackend
from scheduling.models import Cluster
from tests.workloads.conftest import local_catalog, wait_for
from workloads import services
from workloads.choices import State, WorkloadKind
from workloads.models import Flavor, Workload
from workloads.specs import home_dir
from workloads.ssh import server

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def gateway(settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A real gateway on a free port, its own thread and event loop, as ``serve`` runs it."""
    settings.DATA_DIR = tmp_path
    monkeypatch.setattr(server, "WATCH_SECONDS", 0.2)
    registry.forget()
    thread = server.GatewayThread("127.0.0.1", 0, tmp_path / "ssh_host_ed25519_key")
    thread.start()
    assert thread.ready.wait(30) and thread.acceptor is not None, thread.error
    assert (tmp_path / "ssh_host_ed25519_key").stat().st_mode & 0o777 == 0o600
    yield thread.acceptor.get_port()
    thread.stop()
    thread.join(10)
    registry.forget()


@pytest.fixture(autouse=True)
def _no_processes_left(tmp_path: Path) -> Iterator[None]:
    """Whatever the test's workloads started (their homes are under ``tmp_path``) ends with
    the test, whatever the database says by then."""
    yield
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.environ().get("HOME", "").startswith(str(tmp_path)):
                process.kill()


class Person:
    """Someone with a key pair whose public half is on their account (added through the API)."""

    def __init__(self, user: Any, api: Any) -> None:
        self.user = user
        self.key = asyncssh.generate_private_key("ssh-ed25519", comment=f"{user}@laptop")
        response = api(user).post(
            "/api/v1/ssh-keys/",
            {"name": "laptop", "key": self.key.export_public_key().decode()},
            format="json",
        )
        assert response.status_code == 201, response.json()


class Client(asyncssh.SSHClient):
    banners: list[str]

    def __init__(self) -> None:
        self.banners = []

    def auth_banner_received(self, msg: str, lang: str) -> None:
        self.banners.append(msg)


def connect(port: int, username: str, key: asyncssh.SSHKey) -> Any:
    return asyncssh.connect(
        "127.0.0.1",
        port,
        username=username,
        client_keys=[key],
        known_hosts=None,
        agent_path=None,
        config=None,
        preferred_auth="publickey",
        client_factory=Client,
    )


def ssh(coroutine_fn: Any) -> Any:
    """Run one client session (the test body is sync: the database is used around it)."""
    return asyncio.run(asyncio.wait_for(coroutine_fn(), 60))


def refusal(port: int, username: str, key: asyncssh.SSHKey) -> tuple[str, list[str]]:
    """What the client learns when refused: the exception's kind and any banners."""
    clients: list[Client] = []

    def factory() -> Client:
        clients.append(Client())
        return clients[-1]

    async def attempt() -> None:
        connection, _ = await asyncssh.create_connection(
            factory,
            "127.0.0.1",
            port,
            username=username,
            client_keys=[key],
            known_hosts=None,
            agent_path=None,
            config=None,
            preferred_auth="publickey",
        )
        connection.close()

    try:
        ssh(attempt)
    except asyncssh.PermissionDenied as denied:
        return type(denied).__name__, [b for client in clients for b in client.banners]
    raise AssertionError(f"{username} was let in")


def launch(world: Any, command: str, name: str = "train") -> Workload:
    cluster, _template, flavor = local_catalog(world, "jupyter")
    job = services.submit_job(
        actor=world.bob, tenant=world.class_a, flavor=flavor, command=command, name=name
    )
    return wait_for(cluster, job, State.RUNNING)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_bob_runs_a_command_and_uploads_a_file_with_sftp(
    world: Any, api: Any, gateway: int, tmp_path: Path
) -> None:
    bob = Person(world.bob, api)
    job = launch(world, "sleep 600")
    local = tmp_path / "data.csv"
    local.write_text("a,b\n1,2\n")

    async def session() -> tuple[Any, list[str]]:
        async with connect(gateway, "train", bob.key) as conn:
            done = await conn.run("echo $QUANTA_WORKLOAD_ID; pwd; exit 7")
            async with conn.start_sftp_client() as sftp:
                await sftp.put(str(local), "data.csv")
                listing = await sftp.listdir(".")
            return done, listing

    done, listing = ssh(session)
    home = home_dir(world.bob)
    assert done.stdout.split() == [str(job.pk), home]
    assert done.exit_status == 7
    assert "data.csv" in listing
    assert (Path(home) / "data.csv").read_text() == "a,b\n1,2\n"

    job.refresh_from_db()
    assert job.last_activity_at is not None
    key = world.bob.ssh_keys.get()
    assert key.last_used_at is not None
    rows = AuditEvent.objects.filter(actor=world.bob, target_id=str(job.pk))
    assert rows.filter(action="ssh.login", data__fingerprint=key.fingerprint).exists()
    assert {r.data["what"] for r in rows.filter(action="ssh.session")} == {"exec", "sftp"}
    ended = rows.get(action="ssh.session_end", data__what="exec")
    assert ended.data["exit_status"] == 7

    # The workload's id (its first 8 characters, as the pages show it) works as the user too.
    async def by_id() -> Any:
        async with connect(gateway, str(job.pk)[:8], bob.key) as conn:
            return await conn.run("echo $QUANTA_WORKLOAD_ID")

    assert ssh(by_id).stdout.strip() == str(job.pk)


def test_a_shell_with_a_pty_follows_the_window_and_passes_the_exit_status(
    world: Any, api: Any, gateway: int
) -> None:
    bob = Person(world.bob, api)
    launch(world, "sleep 600")

    async def session() -> tuple[str, Any]:
        async with connect(gateway, "train", bob.key) as conn:
            process = await conn.create_process(term_type="xterm-256color", term_size=(80, 24))
            process.stdin.write("stty size; echo TERM=$TERM\n")
            output = ""
            while "TERM=xterm-256color" not in output:
                chunk = await asyncio.wait_for(process.stdout.read(1024), 20)
                assert chunk, f"the shell ended: {output!r}"
                output += chunk
            process.change_terminal_size(120, 40)
            process.stdin.write("stty size; tty; exit 3\n")
            completed = await process.wait()
            return output + str(completed.stdout or ""), completed

    output, completed = ssh(session)
    assert "24 80" in output and "40 120" in output
    assert "/dev/pts/" in output
    assert completed.exit_status == 3


def test_others_unknown_keys_missing_and_stopped_workloads_meet_the_same_refusal(
    world: Any, api: Any, gateway: int
) -> None:
    bob = Person(world.bob, api)
    charlie = Person(world.charlie, api)
    stranger = asyncssh.generate_private_key("ssh-ed25519")
    job = launch(world, "sleep 600")

    charlies = refusal(gateway, "train", charlie.key)
    unknown = refusal(gateway, "train", stranger)
    missing = refusal(gateway, "no-such-workload", bob.key)
    by_id = refusal(gateway, str(job.pk), charlie.key)
    assert charlies == unknown == missing == by_id == ("PermissionDenied", [])
    refused = AuditEvent.objects.filter(action="ssh.refused")
    assert refused.filter(actor=world.charlie, data__username="train").exists()
    assert refused.filter(actor=world.bob, data__username="no-such-workload").exists()

    # A session in progress ends when the workload stops; then it is refused like the rest.
    async def session_ends_on_stop() -> str:
        async with connect(gateway, "train", bob.key) as conn:
            process = await conn.create_process("sleep 300")
            await asyncio.to_thread(stop_job)
            await asyncio.wait_for(conn.wait_closed(), 30)
            return str(process.exit_status)

    def stop_job() -> None:
        # SQLite's shared-cache test database refuses a write while the gateway's thread
        # writes (audit, activity) with "table is locked" at once, no busy wait: try again.
        for attempt in range(20):
            try:
                services.stop(actor=world.bob, workload=Workload.objects.get(pk=job.pk))
                break
            except OperationalError as error:
                if "locked" not in str(error) or attempt == 19:
                    raise
                time.sleep(0.1)
        wait_for(job.cluster, job, State.STOPPED, 40)

    ssh(session_ends_on_stop)
    assert refusal(gateway, "train", bob.key) == ("PermissionDenied", [])


def test_forwarding_reaches_the_workloads_own_ports_only(
    world: Any, api: Any, gateway: int
) -> None:
    bob = Person(world.bob, api)
    port = free_port()
    job = launch(world, f"python -m http.server {port} --bind 127.0.0.1")
    backend = registry.get_backend(job.cluster)
    assert isinstance(backend, LocalBackend)
    deadline = time.monotonic() + 30
    while port not in backend.listening_ports(job_handle(job)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert port in backend.listening_ports(job_handle(job)), backend.logs(job_handle(job)).text
    outside = socket.socket()  # the portal's own port: never the workload's
    outside.bind(("127.0.0.1", 0))
    outside.listen()
    portal_port = outside.getsockname()[1]

    async def session() -> tuple[bytes, list[str]]:
        async with connect(gateway, "train", bob.key) as conn:
            reader, writer = await conn.open_connection("localhost", port)
            writer.write(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
            reply = await asyncio.wait_for(reader.read(), 20)
            writer.close()
            refusals = []
            for host, target in (("127.0.0.1", portal_port), ("10.0.0.1", port)):
                try:
                    await conn.open_connection(host, target)
                except asyncssh.ChannelOpenError as error:
                    refusals.append(error.reason)
            try:
                await conn.forward_remote_port("127.0.0.1", 0, "127.0.0.1", port)
            except asyncssh.ChannelListenError:
                refusals.append("no remote forwarding")
            return reply, refusals

    try:
        reply, refusals = ssh(session)
    finally:
        outside.close()
    assert reply.startswith(b"HTTP/1.0 200")
    assert len(refusals) == 3, refusals
    assert AuditEvent.objects.filter(
        action="ssh.session", data__what="forward", data__port=port
    ).exists()


def job_handle(job: Workload) -> Handle:
    return Handle(str(job.pk), dict(job.backend_state))


@pytest.mark.parametrize("staff_access", [True, False])
def test_the_class_teacher_gets_in_only_where_the_policy_allows(
    world: Any, api: Any, gateway: int, settings: Any, staff_access: bool
) -> None:
    settings.SSH_STAFF_ACCESS = staff_access
    alice = Person(world.alice, api)  # teacher of class A, where bob's workload runs
    job = launch(world, "sleep 600")
    if not staff_access:
        assert refusal(gateway, "train", alice.key) == ("PermissionDenied", [])
        return

    async def session() -> Any:
        async with connect(gateway, str(job.pk), alice.key) as conn:
            return await conn.run("echo $QUANTA_WORKLOAD_ID")

    assert ssh(session).stdout.strip() == str(job.pk)
    assert AuditEvent.objects.filter(
        action="ssh.session", actor=world.alice, target_id=str(job.pk)
    ).exists()


def test_two_workloads_of_one_name_are_told_apart_by_id(world: Any, api: Any, gateway: int) -> None:
    bob = Person(world.bob, api)
    first = launch(world, "sleep 600")
    cluster = first.cluster
    flavor = first.flavor
    second = services.submit_job(
        actor=world.bob, tenant=world.class_a, flavor=flavor, command="sleep 600", name="train"
    )
    wait_for(cluster, second, State.RUNNING)
    kind, banners = refusal(gateway, "train", bob.key)
    assert kind == "PermissionDenied"
    assert str(first.pk)[:8] in "".join(banners) and str(second.pk)[:8] in "".join(banners)


def test_openssh_ssh_and_scp_work(world: Any, api: Any, gateway: int, tmp_path: Path) -> None:
    if shutil.which("ssh") is None:
        pytest.skip("OpenSSH's ssh client is not installed (package openssh-client)")
    bob = Person(world.bob, api)
    launch(world, "sleep 600")
    identity = tmp_path / "id_ed25519"
    identity.write_bytes(bob.key.export_private_key())
    os.chmod(identity, 0o600)
    options = [
        "-F", "/dev/null", "-i", str(identity),
        "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
        "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
    ]  # fmt: skip
    result = subprocess.run(
        [
            "ssh",
            *options,
            "-p",
            str(gateway),
            "train@127.0.0.1",
            "echo hello from $QUANTA_WORKLOAD_ID",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("hello from ")

    if shutil.which("scp") is None:
        pytest.skip("OpenSSH's scp is not installed (package openssh-client)")
    notes = tmp_path / "notes.txt"
    notes.write_text("over scp\n")
    copied = subprocess.run(
        ["scp", *options, "-P", str(gateway), str(notes), "train@127.0.0.1:notes.txt"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert copied.returncode == 0, copied.stderr
    assert (Path(home_dir(world.bob)) / "notes.txt").read_text() == "over scp\n"


def test_backends_without_exec_refuse_ssh_sessions_with_a_message(
    world: Any, api: Any, gateway: int, tmp_path: Path
) -> None:
    """The simulated backend runs no processes (Kubernetes: not yet, the pod exec API would
    be the way): the login succeeds, the session says why it cannot run."""
    assert isinstance(LocalBackend(tmp_path), ExecBackend)
    assert not isinstance(SimulatedBackend(tmp_path), ExecBackend)
    bob = Person(world.bob, api)
    cluster = Cluster.objects.create(name="Sim", slug="sim", backend="simulated")
    flavor = Flavor.objects.create(name="Small", slug="small", cpu_milli=1000, memory_mib=1024)
    Workload.objects.create(
        kind=WorkloadKind.NOTEBOOK,
        name="sim",
        owner=world.bob,
        tenant=world.class_a,
        cluster=cluster,
        flavor=flavor,
        state=State.RUNNING,
    )

    async def session() -> Any:
        async with connect(gateway, "sim", bob.key) as conn:
            return await conn.run("true")

    done = ssh(session)
    assert done.exit_status == 1
    assert "not available yet" in done.stderr and "simulated" in done.stderr
