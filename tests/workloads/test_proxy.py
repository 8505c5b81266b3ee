"""The notebook proxy (/nb/<id>/…) against one real JupyterLab and a tiny echo server.

alice teaches class A, bob studies in it and owns the notebook, charlie studies in class B.
Requests go through ``portal.asgi.application`` with real session cookies, so routing,
sessions, the origin check and the proxy are all exercised.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from channels.db import database_sync_to_async
from channels.testing import HttpCommunicator, WebsocketCommunicator
from django.conf import settings
from django.test import Client

from portal.asgi import application
from scheduling.backends.base import Endpoint
from scheduling.models import Cluster
from workloads import proxy
from workloads.choices import State, WorkloadKind
from workloads.models import Flavor, Workload

NB_ID = uuid.UUID("5b0e8f1c-2d4a-4c7e-9f3b-6a1d2c3e4f50")
BASE = f"/nb/{NB_ID}/"
TOKEN = secrets.token_hex(24)
KERNEL_PROTOCOL = "v1.kernel.websocket.jupyter.org"


def proxy_test(func: Callable[..., Any]) -> Callable[..., Any]:
    """An async test through the ASGI app; the database is committed so threads see it."""
    return pytest.mark.asyncio(pytest.mark.django_db(transaction=True)(func))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- servers -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jupyter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One JupyterLab for the module, base_url /nb/<NB_ID>/; yields its endpoint URL."""
    root = tmp_path_factory.mktemp("jupyter")
    home = root / "home"
    home.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("JUPYTER")}
    for name, sub in (
        ("JUPYTER_CONFIG_DIR", "config"),
        ("JUPYTER_DATA_DIR", "data"),
        ("JUPYTER_RUNTIME_DIR", "runtime"),
        ("IPYTHONDIR", "ipython"),
    ):
        env[name] = str(root / sub)
    port = free_port()
    url = f"http://127.0.0.1:{port}{BASE}"
    log = root / "jupyter.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyterlab",
                "--no-browser",
                "--ip=127.0.0.1",
                f"--port={port}",
                "--ServerApp.port_retries=0",
                f"--ServerApp.base_url={BASE}",
                f"--IdentityProvider.token={TOKEN}",
                f"--ServerApp.root_dir={home}",
                "--ServerApp.terminals_enabled=False",
                "--LabApp.check_for_updates_class="
                "jupyterlab.handlers.announcements.NeverCheckForUpdate",
                *(["--allow-root"] if os.geteuid() == 0 else []),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        with httpx.Client(trust_env=False, timeout=2) as client:
            while True:
                if process.poll() is not None:
                    pytest.fail(f"JupyterLab exited:\n{log.read_text()[-3000:]}")
                try:
                    status = client.get(
                        url + "api/status", headers={"Authorization": f"token {TOKEN}"}
                    )
                    if status.status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start:\n{log.read_text()[-3000:]}")
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Echo:
    """A loopback HTTP server that records what reaches it."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        echo = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                echo.received.append(
                    {
                        "method": self.command,
                        "path": self.path,
                        "headers": [(k.lower(), v) for k, v in self.headers.items()],
                        "body": body,
                    }
                )
                if self.path.endswith("/slow"):
                    time.sleep(1.5)
                if self.path.endswith("/redirect"):
                    self.send_response(302)
                    self.send_header("Location", f"{echo.url}lab?from=redirect")
                    for cookie in (
                        f"{settings.SESSION_COOKIE_NAME}=planted; Path=/",
                        "wide=1; Path=/",
                        "elsewhere=1; Path=/nb/other/",
                        "domain=1; Domain=example.com; Path=" + BASE,
                        "_xsrf=kept; Path=" + BASE,
                        "plain=kept",
                    ):
                        self.send_header("Set-Cookie", cookie)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.path.endswith("/leak"):
                    page = f'<script>{{"token": "{TOKEN}", "x": "token {TOKEN}"}}</script>'
                    data = page.encode()
                    content_type = "text/html; charset=utf-8"
                elif self.path.endswith("/image"):
                    data, content_type = b"\x89PNG\r\n\x1a\n" + bytes(range(256)), "image/png"
                else:
                    data, content_type = b'{"ok": true}', "application/json"
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("X-Token-Echo", f"token {TOKEN}")
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = answer

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # the proxy hung up on /slow on purpose

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{BASE}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def echo_server() -> Iterator[Echo]:
    server = Echo()
    yield server
    server.close()


# -- rows and helpers --------------------------------------------------------------------------


@pytest.fixture
def notebook(world: Any) -> Workload:
    """bob's running notebook in class A, with the fixed id the JupyterLab's base_url uses."""
    cluster = Cluster.objects.create(name="Local", slug="local", backend="local")
    flavor = Flavor.objects.create(name="Small", slug="small", cpu_milli=1000, memory_mib=1024)
    return Workload.objects.create(
        id=NB_ID,
        kind=WorkloadKind.NOTEBOOK,
        name="bob's notebook",
        owner=world.bob,
        tenant=world.class_a,
        cluster=cluster,
        flavor=flavor,
        state=State.RUNNING,
    )


def point_at(monkeypatch: pytest.MonkeyPatch, url: str | None) -> None:
    endpoint = None if url is None else Endpoint(url, {"Authorization": f"token {TOKEN}"})
    monkeypatch.setattr(proxy, "endpoint_for", lambda workload: endpoint)
    proxy.forget_decisions()


@pytest.fixture
def at_jupyter(monkeypatch: pytest.MonkeyPatch, jupyter: str, notebook: Workload) -> str:
    point_at(monkeypatch, jupyter)
    return jupyter


@pytest.fixture
def at_echo(monkeypatch: pytest.MonkeyPatch, echo_server: Echo, notebook: Workload) -> Echo:
    point_at(monkeypatch, echo_server.url)
    echo_server.received.clear()
    return echo_server


@database_sync_to_async
def session_cookie(user: Any) -> str:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


@database_sync_to_async
def set_state(state: str) -> None:
    Workload.objects.filter(pk=NB_ID).update(state=state)


async def fetch(
    method: str,
    path: str,
    cookie: str | None = None,
    headers: list[tuple[str, str]] | None = None,
    body: bytes = b"",
) -> dict[str, Any]:
    raw = [(b"host", b"localhost")]
    if cookie:
        raw.append((b"cookie", cookie.encode()))
    raw += [(k.lower().encode(), v.encode()) for k, v in headers or []]
    communicator = HttpCommunicator(application, method, path, body=body, headers=raw)
    response = await communicator.get_response(timeout=20)
    await communicator.wait(timeout=5)
    response["header_map"] = {k.decode(): v.decode() for k, v in response["headers"]}
    return response


def websocket(path: str, cookie: str | None, subprotocols: list[str] | None = None) -> Any:
    headers = [(b"host", b"localhost"), (b"origin", b"http://localhost")]
    if cookie:
        headers.append((b"cookie", cookie.encode()))
    return WebsocketCommunicator(application, path, headers=headers, subprotocols=subprotocols)


def kernel_message(msg_type: str, content: dict[str, Any], session: str) -> dict[str, Any]:
    return {
        "header": {
            "msg_id": uuid.uuid4().hex,
            "msg_type": msg_type,
            "username": "bob",
            "session": session,
            "date": "2026-01-01T00:00:00Z",
            "version": "5.3",
        },
        "parent_header": {},
        "metadata": {},
        "content": content,
        "buffers": [],
    }


def to_v1(message: dict[str, Any], channel: str) -> bytes:
    """Jupyter's v1 kernel websocket framing: offsets, channel, then the JSON parts."""
    parts = [
        json.dumps(message[key]).encode()
        for key in ("header", "parent_header", "metadata", "content")
    ]
    offsets = [8 * (1 + 1 + len(parts) + 1)]
    offsets.append(offsets[-1] + len(channel.encode()))
    for part in parts:
        offsets.append(offsets[-1] + len(part))
    head = len(offsets).to_bytes(8, "little") + b"".join(o.to_bytes(8, "little") for o in offsets)
    return head + channel.encode() + b"".join(parts)


def from_v1(frame: bytes) -> tuple[str, dict[str, Any]]:
    count = int.from_bytes(frame[:8], "little")
    offsets = [int.from_bytes(frame[8 * (i + 1) : 8 * (i + 2)], "little") for i in range(count)]
    channel = frame[offsets[0] : offsets[1]].decode()
    parts = [frame[offsets[i] : offsets[i + 1]] for i in range(1, 5)]
    return channel, json.loads(parts[0])


def assert_no_token(response: dict[str, Any]) -> None:
    assert TOKEN.encode() not in response["body"]
    for name, value in response["headers"]:
        assert TOKEN.encode() not in name + value


async def start_kernel(cookie: str) -> str:
    created = await fetch(
        "POST",
        BASE + "api/kernels",
        cookie,
        headers=[("content-type", "application/json")],
        body=b'{"name": "python3"}',
    )
    assert created["status"] == 201, created["body"][:500]
    assert_no_token(created)
    return str(json.loads(created["body"])["id"])


# -- JupyterLab ---------------------------------------------------------------------------------


@proxy_test
async def test_the_owner_gets_jupyterlab_and_never_its_token(world: Any, at_jupyter: str) -> None:
    cookie = await session_cookie(world.bob)
    response = await fetch("GET", BASE + "lab", cookie)
    assert response["status"] == 200
    assert b"JupyterLab" in response["body"]
    assert_no_token(response)  # JupyterLab writes it into page_config: the proxy removes it
    assert b'"token": ""' in response["body"]
    for name, value in response["headers"]:
        if name == b"set-cookie":  # Jupyter's own cookies, for its own path only
            assert f"Path={BASE}".encode() in value


@proxy_test
async def test_the_owner_runs_code_over_the_kernel_websocket(world: Any, at_jupyter: str) -> None:
    cookie = await session_cookie(world.bob)
    kernel = await start_kernel(cookie)
    session = uuid.uuid4().hex
    ws = websocket(f"{BASE}api/kernels/{kernel}/channels?session_id={session}", cookie)
    connected, subprotocol = await ws.connect(timeout=10)
    assert connected and subprotocol is None  # no subprotocol asked: Jupyter's JSON messages
    request = kernel_message(
        "execute_request",
        {
            "code": "print(6*7)",
            "silent": False,
            "store_history": False,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        },
        session,
    )
    await ws.send_json_to({**request, "channel": "shell"})
    deadline = time.monotonic() + 30
    while True:
        assert time.monotonic() < deadline, "no output from the kernel"
        reply = await ws.receive_from(timeout=30)
        if not isinstance(reply, str):
            continue
        message = json.loads(reply)
        if (
            message.get("channel") == "iopub"
            and message["msg_type"] == "stream"
            and message["parent_header"].get("msg_id") == request["header"]["msg_id"]
        ):
            assert message["content"]["text"] == "42\n"
            break
    # One message above websockets' default 1 MiB limit: the proxy allows up to 64 MiB.
    big = kernel_message(
        "execute_request",
        {**request["content"], "code": "display({'text/plain': 'x' * 3_000_000}, raw=True)"},
        session,
    )
    await ws.send_json_to({**big, "channel": "shell"})
    while True:
        assert time.monotonic() < deadline, "no display_data from the kernel"
        reply = await ws.receive_from(timeout=30)
        message = json.loads(reply) if isinstance(reply, str) else {}
        if message.get("msg_type") == "display_data":
            assert len(message["content"]["data"]["text/plain"]) == 3_000_000
            break
    await ws.disconnect()
    deleted = await fetch("DELETE", f"{BASE}api/kernels/{kernel}", cookie)
    assert deleted["status"] == 204


@proxy_test
async def test_the_kernel_subprotocol_is_negotiated_and_binary_frames_pass(
    world: Any, at_jupyter: str
) -> None:
    cookie = await session_cookie(world.bob)
    kernel = await start_kernel(cookie)
    session = uuid.uuid4().hex
    ws = websocket(
        f"{BASE}api/kernels/{kernel}/channels?session_id={session}", cookie, [KERNEL_PROTOCOL]
    )
    assert await ws.connect(timeout=10) == (True, KERNEL_PROTOCOL)
    request = kernel_message("kernel_info_request", {}, session)
    await ws.send_to(bytes_data=to_v1(request, "shell"))
    deadline = time.monotonic() + 30
    while True:
        assert time.monotonic() < deadline, "no kernel_info_reply"
        frame = await ws.receive_from(timeout=30)
        assert isinstance(frame, bytes)
        channel, header = from_v1(frame)
        if channel == "shell" and header["msg_type"] == "kernel_info_reply":
            break
    await ws.disconnect()
    assert (await fetch("DELETE", f"{BASE}api/kernels/{kernel}", cookie))["status"] == 204


@proxy_test
async def test_the_teacher_of_the_class_gets_through(world: Any, at_jupyter: str) -> None:
    response = await fetch("GET", BASE + "api/status", await session_cookie(world.alice))
    assert response["status"] == 200 and b"kernels" in response["body"]
    assert_no_token(response)


@proxy_test
async def test_another_student_gets_the_same_404_and_no_websocket(
    world: Any, at_jupyter: str
) -> None:
    cookie = await session_cookie(world.charlie)
    refused = await fetch("GET", BASE + "lab", cookie)
    assert refused["status"] == 404
    for path in (
        f"/nb/{uuid.uuid4()}/lab",  # no such workload
        "/nb/not-a-uuid/lab",
        f"/nb/{str(NB_ID).upper()}/lab",  # another spelling of the id
    ):
        other = await fetch("GET", path, cookie)
        assert (other["status"], other["body"]) == (404, refused["body"])
    ws = websocket(f"{BASE}api/kernels/{uuid.uuid4()}/channels", cookie)
    connected, _ = await ws.connect(timeout=5)
    assert not connected


@proxy_test
async def test_a_kept_decision_is_the_owners_alone_and_a_refusal_is_never_kept(
    world: Any, at_jupyter: str, notebook: Workload
) -> None:
    """The proxy reuses the owner's decision for a moment (a page load is many requests):
    never for another person, and a fresh refusal is never kept."""
    owner = await session_cookie(world.bob)
    assert (await fetch("GET", BASE + "lab", owner))["status"] == 200
    outsider = await session_cookie(world.charlie)
    assert (await fetch("GET", BASE + "lab", outsider))["status"] == 404
    assert (await fetch("GET", BASE + "lab", owner))["status"] == 200
    await database_sync_to_async(Workload.objects.filter(pk=notebook.pk).update)(
        state=State.STOPPED
    )
    proxy.forget_decisions()  # what DECISION_SECONDS does by itself
    assert (await fetch("GET", BASE + "lab", owner))["status"] == 404
    await database_sync_to_async(Workload.objects.filter(pk=notebook.pk).update)(
        state=State.RUNNING
    )
    assert (await fetch("GET", BASE + "lab", owner))["status"] == 200, "refusals are not kept"


@proxy_test
async def test_anonymous_visitors_are_sent_to_sign_in(world: Any, at_jupyter: str) -> None:
    response = await fetch("GET", BASE + "lab?reset")
    assert response["status"] == 302
    assert response["header_map"]["location"] == f"/login/?next={BASE}lab%3Freset"
    connected, _ = await websocket(f"{BASE}api/events/subscribe", None).connect(timeout=5)
    assert not connected


@proxy_test
async def test_only_active_notebooks_open(
    world: Any, notebook: Workload, monkeypatch: pytest.MonkeyPatch
) -> None:
    point_at(monkeypatch, "http://127.0.0.1:9/never-called/")
    cookie = await session_cookie(world.bob)
    await set_state(State.STOPPED)
    assert (await fetch("GET", BASE + "lab", cookie))["status"] == 404
    connected, _ = await websocket(f"{BASE}api/events/subscribe", cookie).connect(timeout=5)
    assert not connected

    await set_state(State.STARTING)
    starting = await fetch("GET", BASE + "lab", cookie)
    assert starting["status"] == 503
    assert starting["header_map"]["retry-after"] == str(proxy.RETRY_AFTER_SECONDS)
    assert b"starting" in starting["body"]

    await set_state(State.RUNNING)
    point_at(monkeypatch, None)  # running, but the backend has no endpoint yet
    assert (await fetch("GET", BASE + "lab", cookie))["status"] == 503


# -- what crosses the proxy (echo server) -----------------------------------------------------


@proxy_test
async def test_the_notebook_never_sees_portal_credentials(world: Any, at_echo: Echo) -> None:
    session = await session_cookie(world.alice)  # a teacher opening a student's notebook
    response = await fetch(
        "POST",
        BASE + "api/contents/a%20b.ipynb?x=1&y=%2F",
        f"{session}; {settings.CSRF_COOKIE_NAME}=portal-csrf; theme=dark; _xsrf=jx",
        headers=[
            ("authorization", "Basic YWxpY2U6c2VjcmV0"),
            ("x-csrftoken", "portal-csrf"),
            ("origin", "http://localhost"),
            ("referer", f"http://localhost{BASE}lab"),
            ("connection", "keep-alive, x-private"),
            ("x-private", "hop"),
            ("x-forwarded-for", "203.0.113.9"),
            ("content-type", "text/plain"),
        ],
        body=b"hello",
    )
    assert response["status"] == 200
    [seen] = at_echo.received
    headers = dict(seen["headers"])
    assert (seen["method"], seen["path"], seen["body"]) == (
        "POST",
        f"{BASE}api/contents/a%20b.ipynb?x=1&y=%2F",
        b"hello",
    )
    assert headers["cookie"] == "theme=dark; _xsrf=jx"
    assert headers["authorization"] == f"token {TOKEN}"
    assert [k for k, _ in seen["headers"]].count("authorization") == 1
    upstream = at_echo.url.removesuffix(BASE)
    assert headers["host"] == upstream.removeprefix("http://")
    assert headers["origin"] == upstream
    assert headers["referer"] == f"{upstream}{BASE}lab"
    everything = json.dumps(seen["headers"])
    session_value = session.split("=", 1)[1]
    for secret in (session_value, "portal-csrf", "YWxpY2U6c2VjcmV0", "203.0.113.9"):
        assert secret not in everything
    assert "x-private" not in headers  # named in the browser's Connection header: hop-by-hop
    assert_no_token(response)  # the echo's X-Token-Echo header is scrubbed on the way back


@proxy_test
async def test_responses_are_cleaned_on_the_way_back(world: Any, at_echo: Echo) -> None:
    cookie = await session_cookie(world.bob)
    moved = await fetch("GET", BASE + "redirect", cookie)
    assert moved["status"] == 302
    assert moved["header_map"]["location"] == f"{BASE}lab?from=redirect"
    cookies = sorted(v.decode() for k, v in moved["headers"] if k == b"set-cookie")
    assert cookies == [f"_xsrf=kept; Path={BASE}", "plain=kept"]

    leak = await fetch("GET", BASE + "leak", cookie)
    assert leak["status"] == 200 and b'"token": ""' in leak["body"]
    assert_no_token(leak)
    assert "content-length" not in leak["header_map"]  # rewritten: sent without a length

    image = await fetch("GET", BASE + "image", cookie)
    assert image["header_map"]["content-length"] == str(len(image["body"]))


@proxy_test
async def test_cross_site_requests_and_dot_segments_are_refused(world: Any, at_echo: Echo) -> None:
    cookie = await session_cookie(world.bob)
    forged = await fetch(
        "POST", BASE + "api/kernels", cookie, headers=[("origin", "http://evil.example")]
    )
    assert forged["status"] == 403
    climbing = await fetch("GET", BASE + "%2e%2e/other/api/status", cookie)
    assert climbing["status"] == 404
    bare = await fetch("GET", BASE.rstrip("/") + "?a=1", cookie)
    assert (bare["status"], bare["header_map"]["location"]) == (302, BASE + "?a=1")
    assert at_echo.received == []


@proxy_test
async def test_upstream_failures_become_502_and_504(
    world: Any, at_echo: Echo, monkeypatch: pytest.MonkeyPatch
) -> None:
    cookie = await session_cookie(world.bob)
    monkeypatch.setattr(proxy, "UPSTREAM_TIMEOUT", httpx.Timeout(0.3))
    slow = await fetch("GET", BASE + "slow", cookie)
    assert slow["status"] == 504 and b"Traceback" not in slow["body"]

    point_at(monkeypatch, f"http://127.0.0.1:{free_port()}{BASE}")  # nothing listens there
    down = await fetch("GET", BASE + "lab", cookie)
    assert down["status"] == 502
    assert b"Traceback" not in down["body"] and b"127.0.0.1" not in down["body"]
    connected, _ = await websocket(f"{BASE}api/events/subscribe", cookie).connect(timeout=5)
    assert not connected


def test_the_scrubber_finds_a_secret_split_across_chunks() -> None:
    secret = b"s3cr3t-t0ken-value"
    data = b"before " + secret + b" middle token " + secret + b" after"
    for cut in range(1, len(data)):
        scrubber = proxy.Scrubber([secret])
        out = scrubber.feed(data[:cut]) + scrubber.feed(data[cut:]) + scrubber.flush()
        assert out == b"before  middle token  after"


def test_close_codes_and_websocket_urls() -> None:
    assert [proxy.browser_close_code(c) for c in (None, 1000, 1006, 1009, 4321)] == [
        1000,
        1000,
        4006,
        4009,
        4321,
    ]
    assert [proxy.upstream_close_code(c) for c in (None, 1001, 1005, 1006, 3000)] == [
        1000,
        1001,
        1000,
        1000,
        3000,
    ]
    assert proxy.websocket_url("https://h/nb/x/") == "wss://h/nb/x/"
