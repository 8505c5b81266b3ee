"""The proxy's routes to apps on private UNIX sockets: VS Code (HTTP and WebSocket over the
socket, the /nb/<id> prefix dropped) and desktops (noVNC's files, the WebSocket bridged to the
VNC server's raw RFB socket). The same rules as JupyterLab's: the owner gets through, another
student gets the same 404, a stopped workload is gone, the portal's cookies never reach the app.
"""

from __future__ import annotations

import json
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.core.cache import cache
from websockets.datastructures import Headers
from websockets.http11 import Request, Response
from websockets.sync.server import ServerConnection, unix_serve

from portal.asgi import application
from scheduling.backends.base import Endpoint
from tests.workloads.test_proxy import (
    BASE,
    NB_ID,
    fetch,
    notebook,
    proxy_test,
    session_cookie,
    set_state,
    websocket,
)
from workloads import proxy
from workloads.choices import State
from workloads.models import Workload

__all__ = ["notebook"]  # the fixture, used by name

RFB_GREETING = b"RFB 003.008\n"


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """Sockets need short paths (108 bytes)."""
    with tempfile.TemporaryDirectory(prefix="qp", dir="/tmp") as name:
        yield Path(name)


class SocketApp:
    """An app on a UNIX socket, like code-server: answers HTTP with what reached it, echoes
    WebSocket messages, and records every request's path and headers."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.seen: list[dict[str, Any]] = []
        app = self

        def process_request(connection: ServerConnection, request: Request) -> Response | None:
            app.seen.append({"path": request.path, "headers": list(request.headers.raw_items())})
            if request.headers.get("Upgrade", "").lower() == "websocket":
                return None
            body = json.dumps({"path": request.path}).encode()
            return Response(
                200, "OK", Headers({"Content-Type": "application/json",
                                    "Set-Cookie": "vscode-tkn=1; Path=/"}), body,
            )  # fmt: skip

        def handler(connection: ServerConnection) -> None:
            for message in connection:
                connection.send(message)

        self.server = unix_serve(handler, self.path, process_request=process_request)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.thread.join(timeout=5)


class FakeVnc:
    """A VNC server's RFB socket: greets, then echoes."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            with connection:
                connection.sendall(RFB_GREETING)
                while data := connection.recv(65536):
                    connection.sendall(data)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def vscode(
    monkeypatch: pytest.MonkeyPatch, short_dir: Path, notebook: Workload
) -> Iterator[SocketApp]:
    app = SocketApp(short_dir / "http.sock")
    endpoint = Endpoint(url="http://localhost/", unix_socket=app.path)
    monkeypatch.setattr(proxy, "endpoint_for", lambda workload: endpoint)
    proxy.forget_decisions()
    cache.clear()
    proxy._http_clocks.clear()
    yield app
    app.close()


@pytest.fixture
def desktop(
    monkeypatch: pytest.MonkeyPatch, short_dir: Path, notebook: Workload
) -> Iterator[FakeVnc]:
    static = short_dir / "novnc"
    (static / "app").mkdir(parents=True)
    (static / "vnc.html").write_text("<html>noVNC</html>")
    (static / "app" / "ui.js").write_text("export default 1;")
    (short_dir / "secret.txt").write_text("not yours")
    vnc = FakeVnc(short_dir / "rfb.sock")
    endpoint = Endpoint(url="http://localhost/", rfb_socket=vnc.path, static_dir=str(static))
    monkeypatch.setattr(proxy, "endpoint_for", lambda workload: endpoint)
    proxy.forget_decisions()
    cache.clear()
    proxy._http_clocks.clear()
    yield vnc
    vnc.close()


@database_sync_to_async
def last_activity() -> Any:
    return Workload.objects.get(pk=NB_ID).last_activity_at


# -- VS Code on a socket ------------------------------------------------------------------------


@proxy_test
async def test_vscode_is_reached_over_its_socket_without_the_prefix(
    world: Any, vscode: SocketApp
) -> None:
    cookie = await session_cookie(world.bob)
    before = await last_activity()
    response = await fetch(
        "GET",
        BASE + "stable-abc/static/out/a%20b.js?x=1",
        f"{cookie}; {settings.CSRF_COOKIE_NAME}=portal-csrf; theme=dark",
        headers=[("origin", "http://localhost"), ("authorization", "Basic c2VjcmV0")],
    )
    assert response["status"] == 200
    assert json.loads(response["body"]) == {"path": "/stable-abc/static/out/a%20b.js?x=1"}
    [seen] = vscode.seen
    headers = {name.lower(): value for name, value in seen["headers"]}
    assert headers["cookie"] == "theme=dark"  # the portal's session and CSRF cookies stay behind
    assert "authorization" not in headers
    assert cookie.split("=", 1)[1] not in json.dumps(seen["headers"])
    # A cookie for "/" would be the portal's whole site: it does not reach the browser.
    assert "set-cookie" not in response["header_map"]
    assert before is None and await last_activity() is not None  # use counts as activity


@proxy_test
async def test_vscode_websockets_pass_over_the_socket(world: Any, vscode: SocketApp) -> None:
    cookie = await session_cookie(world.bob)
    ws = websocket(f"{BASE}stable-abc?reconnectionToken=t&skipWebSocketFrames=false", cookie)
    connected, _ = await ws.connect(timeout=10)
    assert connected
    await ws.send_to(bytes_data=b"\x00\x01binary")
    assert await ws.receive_from(timeout=10) == b"\x00\x01binary"
    await ws.send_to(text_data="text")
    assert await ws.receive_from(timeout=10) == "text"
    await ws.disconnect()
    upgrade = vscode.seen[-1]
    assert upgrade["path"] == "/stable-abc?reconnectionToken=t&skipWebSocketFrames=false"
    names = {name.lower(): value for name, value in upgrade["headers"]}
    assert names["origin"] == "http://localhost" and names["host"] == "localhost"
    assert settings.SESSION_COOKIE_NAME not in names.get("cookie", "")


@proxy_test
async def test_another_student_and_a_stopped_vscode_get_404(world: Any, vscode: SocketApp) -> None:
    outsider = await session_cookie(world.charlie)
    assert (await fetch("GET", BASE, outsider))["status"] == 404
    connected, _ = await websocket(f"{BASE}stable-abc", outsider).connect(timeout=5)
    assert not connected
    owner = await session_cookie(world.bob)
    await set_state(State.STOPPED)
    assert (await fetch("GET", BASE, owner))["status"] == 404
    connected, _ = await websocket(f"{BASE}stable-abc", owner).connect(timeout=5)
    assert not connected
    assert vscode.seen == []  # nothing reached the app


@proxy_test
async def test_a_cross_site_page_cannot_use_vscode(world: Any, vscode: SocketApp) -> None:
    cookie = await session_cookie(world.bob)
    refused = await fetch("GET", BASE, cookie, headers=[("origin", "https://evil.example")])
    assert refused["status"] == 403
    headers = [(b"host", b"localhost"), (b"origin", b"https://evil.example"),
               (b"cookie", cookie.encode())]  # fmt: skip
    connected, _ = await WebsocketCommunicator(application, BASE, headers=headers).connect(
        timeout=5
    )
    assert not connected
    assert vscode.seen == []


# -- desktops: noVNC and the RFB bridge ---------------------------------------------------------


@proxy_test
async def test_a_desktop_opens_novnc_connected_to_its_own_socket(
    world: Any, desktop: FakeVnc
) -> None:
    cookie = await session_cookie(world.bob)
    opened = await fetch("GET", BASE, cookie)
    assert opened["status"] == 302
    location = opened["header_map"]["location"]
    assert location.startswith(f"{BASE}vnc.html?autoconnect=1")
    assert f"path=nb/{NB_ID}/websockify" in location
    page = await fetch("GET", BASE + "vnc.html", cookie)
    assert (page["status"], page["body"]) == (200, b"<html>noVNC</html>")
    script = await fetch("GET", BASE + "app/ui.js", cookie)
    assert script["header_map"]["content-type"] == "text/javascript"
    for path in ("app", "missing.js", "%2e%2e/secret.txt", "../secret.txt", "app/%2fetc"):
        assert (await fetch("GET", BASE + path, cookie))["status"] == 404, path
    assert (await fetch("POST", BASE + "vnc.html", cookie))["status"] == 404

    ws = websocket(f"{BASE}websockify", cookie, subprotocols=["binary"])
    connected, subprotocol = await ws.connect(timeout=10)
    assert connected and subprotocol == "binary"
    assert await ws.receive_from(timeout=10) == RFB_GREETING
    await ws.send_to(bytes_data=b"RFB 003.008\n")
    assert await ws.receive_from(timeout=10) == b"RFB 003.008\n"
    await ws.disconnect()
    assert await last_activity() is not None


@proxy_test
async def test_another_student_gets_no_desktop(world: Any, desktop: FakeVnc) -> None:
    outsider = await session_cookie(world.charlie)
    assert (await fetch("GET", BASE + "vnc.html", outsider))["status"] == 404
    connected, _ = await websocket(f"{BASE}websockify", outsider, ["binary"]).connect(timeout=5)
    assert not connected
    owner = await session_cookie(world.bob)
    connected, _ = await websocket(f"{BASE}other", owner, ["binary"]).connect(timeout=5)
    assert not connected  # only noVNC's socket is bridged
    await set_state(State.STOPPED)
    connected, _ = await websocket(f"{BASE}websockify", owner, ["binary"]).connect(timeout=5)
    assert not connected
