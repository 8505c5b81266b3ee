"""The notebook proxy: ``/nb/<workload id>/…`` to the workload's JupyterLab, HTTP and WebSocket.

JupyterLab runs with ``base_url=/nb/<id>/``, so the whole path is kept and appended to the
backend's endpoint URL. The portal decides who gets in (the owner, and staff who may manage
the workload's class); the notebook's token (the endpoint's headers) is added upstream only.
See docs/notebook-proxy.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
import mimetypes
import os
import time
import uuid
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import httpx
from channels.db import database_sync_to_async
from channels.generic.http import AsyncHttpConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.shortcuts import resolve_url
from django.utils import translation
from django.utils.translation import gettext_lazy as _
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as websocket_connect
from websockets.asyncio.client import unix_connect as websocket_unix_connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Origin

from core.language import reader_language
from scheduling.backends.base import Endpoint, Handle
from scheduling.backends.registry import get_backend
from workloads.activity import record_activity
from workloads.choices import State
from workloads.models import Workload
from workloads.permissions import can_control

logger = logging.getLogger(__name__)

PREFIX = "/nb/"
MAX_FRAME_BYTES = 64 * 1024 * 1024  # one WebSocket message (Jupyter outputs can be large)
MAX_REQUEST_BODY_BYTES = 256 * 1024 * 1024  # request bodies are buffered before forwarding
UPSTREAM_TIMEOUT = httpx.Timeout(120.0, connect=10.0, pool=10.0)
# A kernel's WebSocket handshake is answered only once the kernel replies to kernel_info
# (jupyter_server's kernel_info_timeout: 60 s): a new kernel on a share of a CPU takes tens of
# seconds. Giving up sooner closed the browser's socket and JupyterLab lost the first cell.
WEBSOCKET_OPEN_TIMEOUT = 75.0
RFB_OPEN_TIMEOUT = 10.0  # a desktop's VNC socket answers at once or not at all
RETRY_AFTER_SECONDS = 5
ACTIVITY_SECONDS = 10.0  # one activity report per connection at most this often
RFB_CHUNK_BYTES = 256 * 1024
DESKTOP_SOCKET_PATH = "websockify"  # noVNC's WebSocket: /nb/<id>/websockify
STATIC_METHODS = ("GET", "HEAD")

# RFC 9110 §7.6.1: meaningful for one connection only, never forwarded.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# Request headers the portal replaces or that describe the portal, not the notebook.
DROPPED_REQUEST_HEADERS = frozenset(
    {
        "host",  # set to the upstream's
        "origin",  # rewritten to the upstream's origin
        "referer",  # rewritten when it is the portal's own, else dropped
        "cookie",  # rebuilt without the portal's cookies
        "authorization",  # the browser's credentials are for the portal, never the notebook
        "content-length",  # recomputed from the body
        "accept-encoding",  # identity: the proxy must read bodies to keep the token out
        "forwarded",
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-port",
        "x-forwarded-proto",
        "x-real-ip",
    }
)
WEBSOCKET_HANDSHAKE_HEADERS = frozenset(
    {
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
        "sec-websocket-protocol",
        "sec-websocket-accept",
    }
)
MIN_SECRET_LENGTH = 8

_PAGE = """<!doctype html>
<html lang="{lang}"><head><meta charset="utf-8"><title>{title}</title>{extra}
<style>body{{font-family:system-ui,sans-serif;max-width:36rem;margin:4rem auto;padding:0 1rem}}
</style></head><body><h1>{title}</h1><p>{text}</p></body></html>
"""


def endpoint_for(workload: Any) -> Endpoint | None:
    """Where ``workload``'s notebook serves (None: not yet). Runs in a worker thread.

    The one place the proxy asks a backend; tests point it at a server they start.
    """
    handle = Handle(str(workload.id), dict(workload.backend_state or {}))
    return get_backend(workload.cluster).endpoint(handle)


def _record_activity(workload_id: str) -> None:
    """Traffic through the proxy is use (VS Code and desktops report none of their own). A
    failure to record never breaks the proxying."""
    try:
        record_activity(workload_id)
    except Exception:
        logger.exception("notebook proxy: could not record activity of %s", workload_id)


_http_clocks: dict[str, ActivityClock] = {}


async def note_activity(workload_id: str) -> None:
    """An HTTP request through the proxy: reported at most every ``ACTIVITY_SECONDS``."""
    clock = _http_clocks.get(workload_id)
    if clock is None:
        if len(_http_clocks) > 10_000:
            _http_clocks.clear()
        clock = _http_clocks[workload_id] = ActivityClock(workload_id)
    await clock.tick()


class ActivityClock:
    """Reports a connection's activity at most every ``ACTIVITY_SECONDS``, off the event loop."""

    def __init__(self, workload_id: str) -> None:
        self.workload_id = workload_id
        self.last = -ACTIVITY_SECONDS

    async def tick(self) -> None:
        now = time.monotonic()
        if now - self.last < ACTIVITY_SECONDS:
            return
        self.last = now
        with contextlib.suppress(Exception):
            await database_sync_to_async(_record_activity)(self.workload_id)


# -- who gets through ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """What to do with one request: ``proxy`` (with the endpoint), ``login``, ``missing``
    (404), ``starting`` (503) or ``broken`` (502: the backend could not say)."""

    outcome: str
    endpoint: Endpoint | None = None


def decide(user: Any, workload_id: str) -> Decision:
    """Who may open ``/nb/<workload_id>/``, and where it goes. Sync: database and backend."""
    if not getattr(user, "is_authenticated", False):
        return Decision("login")
    try:
        pk = uuid.UUID(workload_id)
    except ValueError:
        return Decision("missing")
    if str(pk) != workload_id:  # one spelling only: the one the notebook's base_url uses
        return Decision("missing")
    workload = Workload.objects.select_related("tenant", "cluster").filter(pk=pk).first()
    if workload is None:
        return Decision("missing")
    if not can_control(user, workload):
        return Decision("missing")
    if workload.state == State.STARTING:
        return Decision("starting")
    if workload.state != State.RUNNING:
        return Decision("missing")
    try:
        endpoint = endpoint_for(workload)
    except Exception:
        logger.exception("notebook proxy: no endpoint for workload %s", workload.pk)
        return Decision("broken")
    if endpoint is None:
        return Decision("starting")
    return Decision("proxy", endpoint)


# A page load is dozens of requests for one workload: the decision (a database query, the
# backend's state file and process check) is reused for DECISION_SECONDS per person, session
# and workload. Only "proxy" decisions are kept, so a refusal is never cached, and a stop or a
# lost permission takes effect within those seconds (the stopped notebook refuses by itself).
DECISION_SECONDS = 2.0
MAX_DECISIONS = 4096
_decisions: dict[tuple[Any, str, str], tuple[float, Decision]] = {}


def forget_decisions() -> None:
    """Drop every kept decision (tests that move an endpoint; a portal that reconfigures)."""
    _decisions.clear()


async def decide_cached(scope: dict[str, Any], user: Any, workload_id: str) -> Decision:
    session = scope.get("session")
    key = (user.pk, getattr(session, "session_key", None) or "", workload_id)
    now = time.monotonic()
    kept = _decisions.get(key)
    if kept is not None and kept[0] > now:
        return kept[1]
    decision = await database_sync_to_async(decide)(user, workload_id)
    if decision.outcome == "proxy":
        if len(_decisions) >= MAX_DECISIONS:
            for stale in [k for k, (until, _) in _decisions.items() if until <= now]:
                del _decisions[stale]
            if len(_decisions) >= MAX_DECISIONS:
                _decisions.clear()
        _decisions[key] = (now + DECISION_SECONDS, decision)
    else:
        _decisions.pop(key, None)
    return decision


# -- paths and headers --------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    workload_id: str
    rest: str  # percent-encoded path after /nb/<id>, "" or starting with "/"
    query: str  # raw query string, without "?"

    def upstream_url(self, base: str) -> str:
        url = base.rstrip("/") + "/" + self.rest.lstrip("/")
        return f"{url}?{self.query}" if self.query else url


def parse_target(scope: dict[str, Any]) -> Target | None:
    """The workload id and the rest of the path, or None for a path the proxy refuses."""
    decoded: str = scope.get("path", "")
    raw = scope.get("raw_path")
    encoded = raw.decode("latin-1") if raw else quote(decoded, safe="/:@!$&'()*+,;=~-._")
    if not encoded.startswith(PREFIX):
        return None
    # No dot segments (also percent-encoded): the path must not climb out of the notebook.
    if any(segment in (".", "..") for segment in decoded.split("/")):
        return None
    workload_id, slash, rest = encoded[len(PREFIX) :].partition("/")
    query = scope.get("query_string", b"").decode("latin-1")
    return Target(workload_id, slash + rest, query)


def _headers(scope: dict[str, Any]) -> list[tuple[str, str]]:
    return [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope["headers"]]


def _header(scope: dict[str, Any], name: str) -> str | None:
    for key, value in _headers(scope):
        if key == name:
            return value
    return None


def origin_of(url: str) -> Origin:
    parts = urlsplit(url)
    return Origin(f"{parts.scheme}://{parts.netloc}")


def origin_allowed(scope: dict[str, Any]) -> bool:
    """A browser's Origin, when it sends one, must be the portal's own.

    The proxy rewrites Origin and authenticates with the notebook's token, which turns off
    Jupyter's own cross-origin and XSRF checks: this check stands in for them.
    """
    origin = _header(scope, "origin")
    if origin is None:
        return True
    host = (_header(scope, "host") or "").lower()
    if host and urlsplit(origin).netloc.lower() == host:
        return True
    return origin.rstrip("/") in {o.rstrip("/") for o in settings.CSRF_TRUSTED_ORIGINS}


def portal_cookie_names() -> frozenset[str]:
    return frozenset({settings.SESSION_COOKIE_NAME, settings.CSRF_COOKIE_NAME})


def strip_cookies(values: Iterable[str]) -> str:
    """The Cookie header without the portal's session and CSRF cookies."""
    drop = portal_cookie_names()
    kept = []
    for value in values:
        for pair in value.split(";"):
            pair = pair.strip()
            if pair and pair.split("=", 1)[0].strip() not in drop:
                kept.append(pair)
    return "; ".join(kept)


def upstream_headers(
    scope: dict[str, Any], endpoint: Endpoint, *, websocket: bool = False
) -> list[tuple[str, str]]:
    """The browser's request headers as the notebook gets them (Host is left to the client)."""
    headers = _headers(scope)
    connection_listed = {
        token.strip().lower()
        for key, value in headers
        if key == "connection"
        for token in value.split(",")
    }
    csrf_header = settings.CSRF_HEADER_NAME.removeprefix("HTTP_").replace("_", "-").lower()
    drop = HOP_BY_HOP | DROPPED_REQUEST_HEADERS | connection_listed | {csrf_header}
    if websocket:
        drop |= WEBSOCKET_HANDSHAKE_HEADERS
    upstream_origin = origin_of(endpoint.url)
    host = (_header(scope, "host") or "").lower()

    out = [(key, value) for key, value in headers if key not in drop]
    cookie = strip_cookies(value for key, value in headers if key == "cookie")
    if cookie:
        out.append(("cookie", cookie))
    referer = _header(scope, "referer")
    if referer and host and urlsplit(referer).netloc.lower() == host:
        parts = urlsplit(referer)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        out.append(("referer", upstream_origin + path))
    if not websocket and _header(scope, "origin") is not None:
        out.append(("origin", upstream_origin))  # websockets: set by the client library
    if not websocket:
        out.append(("accept-encoding", "identity"))
    endpoint_names = {name.lower() for name in endpoint.headers}
    out = [(key, value) for key, value in out if key not in endpoint_names]
    out.extend((name.lower(), value) for name, value in endpoint.headers.items())
    return out


def secrets_of(endpoint: Endpoint) -> list[bytes]:
    """The credentials in the endpoint's headers ("token abc" gives "abc" too), longest first."""
    found: set[bytes] = set()
    for value in endpoint.headers.values():
        for candidate in (value, value.split()[-1] if value.split() else ""):
            if len(candidate) >= MIN_SECRET_LENGTH:
                found.add(candidate.encode("latin-1"))
    return sorted(found, key=len, reverse=True)


class Scrubber:
    """Removes the secrets from a byte stream, also across chunk boundaries.

    JupyterLab writes its token into the page it serves (page_config): the proxy removes it,
    so the frontend authenticates with cookies and the proxy adds the token upstream.
    """

    def __init__(self, secrets: list[bytes]) -> None:
        self.secrets = secrets
        self.keep = max((len(s) for s in secrets), default=1) - 1
        self.pending = b""

    def scrub(self, data: bytes) -> bytes:
        changed = True
        while changed:
            changed = False
            for secret in self.secrets:
                if secret in data:
                    data = data.replace(secret, b"")
                    changed = True
        return data

    def feed(self, chunk: bytes) -> bytes:
        data = self.scrub(self.pending + chunk)
        if len(data) <= self.keep:
            self.pending = data
            return b""
        cut = len(data) - self.keep
        self.pending = data[cut:]
        return data[:cut]

    def flush(self) -> bytes:
        data, self.pending = self.pending, b""
        return data


def is_textual(content_type: str) -> bool:
    kind = content_type.split(";", 1)[0].strip().lower()
    return (
        not kind
        or kind.startswith("text/")
        or any(word in kind for word in ("json", "javascript", "ecmascript", "xml"))
    )


def allowed_set_cookie(value: str, workload_id: str) -> bool:
    """Only cookies for this notebook's own path: none of the portal's, none for a domain."""
    first, *attributes = value.split(";")
    if first.split("=", 1)[0].strip() in portal_cookie_names():
        return False
    for attribute in attributes:
        name, _, arg = attribute.strip().partition("=")
        name = name.strip().lower()
        if name == "domain":
            return False
        if name == "path":
            path = arg.strip()
            if path.rstrip("/") != f"{PREFIX}{workload_id}" and not path.startswith(
                f"{PREFIX}{workload_id}/"
            ):
                return False
    return True


def response_headers(
    response: httpx.Response,
    endpoint: Endpoint,
    workload_id: str,
    scrubber: Scrubber,
    *,
    rewrites_body: bool,
) -> list[tuple[bytes, bytes]]:
    """The upstream response's headers as the browser gets them."""
    raw = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in response.headers.raw]
    connection_listed = {
        token.strip().lower()
        for key, value in raw
        if key == "connection"
        for token in value.split(",")
    }
    upstream_origin = origin_of(endpoint.url)
    out: list[tuple[bytes, bytes]] = []
    for key, value in raw:
        if key in HOP_BY_HOP or key in connection_listed:
            continue
        if rewrites_body and key in ("content-length", "content-encoding"):
            continue
        if key == "set-cookie" and not allowed_set_cookie(value, workload_id):
            continue
        if key == "location" and value.startswith(upstream_origin):
            value = value[len(upstream_origin) :] or "/"
        value = scrubber.scrub(value.encode("latin-1")).decode("latin-1")
        out.append((key.encode("latin-1"), value.encode("latin-1")))
    return out


def page(
    status: int, title: str, text: str, *, refresh: int | None = None
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """The status, headers and body of a short page in the active language."""
    extra = f'<meta http-equiv="refresh" content="{refresh}">' if refresh else ""
    body = _PAGE.format(
        lang=translation.get_language() or settings.LANGUAGE_CODE,
        title=html.escape(str(title)),
        text=html.escape(str(text)),
        extra=extra,
    )
    headers = [
        (b"content-type", b"text/html; charset=utf-8"),
        (b"cache-control", b"no-store"),
        (b"x-content-type-options", b"nosniff"),
    ]
    if refresh:
        headers.append((b"retry-after", str(refresh).encode()))
    return status, headers, body.encode()


@dataclass(frozen=True)
class Page:
    """A page the proxy answers with itself, drawn in the reader's language when sent."""

    status: int
    title: Any  # lazy text
    text: Any
    refresh: int | None = None

    def render(self, scope: dict[str, Any]) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        with translation.override(reader_language(scope, scope.get("user"))):
            return page(self.status, self.title, self.text, refresh=self.refresh)


NOT_FOUND = Page(
    404, _("Not found"), _("There is no environment here, or it is not yours to open.")
)
STARTING = Page(
    503,
    _("Your environment is starting"),
    _("It will open here by itself in a few seconds."),
    refresh=RETRY_AFTER_SECONDS,
)
BAD_GATEWAY = Page(502, _("Your environment is not answering"), _("Try again in a moment."))
GATEWAY_TIMEOUT = Page(504, _("Your environment took too long to answer"), _("Try again."))
FORBIDDEN = Page(403, _("Refused"), _("This request came from another site."))
TOO_LARGE = Page(413, _("Too large"), _("The request is larger than the portal forwards."))


# -- desktops: noVNC's files -------------------------------------------------------------------


def desktop_page(workload_id: str) -> str:
    """noVNC's page, connecting by itself to this desktop's WebSocket."""
    return (
        f"{PREFIX}{workload_id}/vnc.html?autoconnect=1&resize=remote&reconnect=1"
        f"&path={PREFIX.strip('/')}/{workload_id}/{DESKTOP_SOCKET_PATH}"
    )


def static_file(static_dir: str, rest: str) -> str | None:
    """The file under ``static_dir`` that ``rest`` (percent-encoded, no dot segments) names,
    or None: never a path outside it, never a directory."""
    relative = unquote(rest).lstrip("/")
    if not relative or "\x00" in relative:
        return None
    base = os.path.normpath(static_dir)
    path = os.path.normpath(os.path.join(base, relative))
    if not path.startswith(base + os.sep) or not os.path.isfile(path):
        return None
    return path


def is_desktop_socket(target: Target) -> bool:
    return target.rest.strip("/") == DESKTOP_SOCKET_PATH


# -- HTTP ---------------------------------------------------------------------------------------


# One HTTP client per event loop and upstream socket, kept between requests: a new
# ``httpx.AsyncClient`` builds an SSL context (about 25 ms here) and a new connection for each
# request, which made JupyterLab's page load twice as slow through the proxy as direct (its
# ~60 static files). Connections to the notebook are kept alive and reused. Per loop, because
# a client's connections belong to the loop that opened them (tests run many loops).
MAX_UPSTREAM_CLIENTS = 256  # per loop; a socket path per VS Code workload, the oldest go first
_upstream_clients: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[str, httpx.AsyncClient]
] = weakref.WeakKeyDictionary()
_closing: set[asyncio.Task[None]] = set()  # evicted clients being closed (kept referenced)


def upstream_client(unix_socket: str = "") -> httpx.AsyncClient:
    """The shared client for TCP upstreams (``""``) or for one private UNIX socket (VS Code:
    HTTP over it; the URL then names only the path)."""
    loop = asyncio.get_running_loop()
    clients = _upstream_clients.setdefault(loop, {})
    client = clients.get(unix_socket)
    if client is None or client.is_closed:
        transport = httpx.AsyncHTTPTransport(uds=unix_socket) if unix_socket else None
        client = httpx.AsyncClient(
            timeout=UPSTREAM_TIMEOUT,
            follow_redirects=False,
            trust_env=False,
            transport=transport,
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
        )
        clients[unix_socket] = client
        while len(clients) > MAX_UPSTREAM_CLIENTS:
            oldest = clients.pop(next(iter(clients)))
            closing = loop.create_task(oldest.aclose())
            _closing.add(closing)
            closing.add_done_callback(_closing.discard)
    return client


class NotebookHttpProxy(AsyncHttpConsumer):
    """``/nb/<id>/…`` over HTTP: checks who asks, then streams the notebook's answer."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.body_size = 0
        self.too_large = False

    async def http_request(self, message: dict[str, Any]) -> None:
        chunk = message.get("body", b"")
        self.body_size += len(chunk)
        if self.body_size > MAX_REQUEST_BODY_BYTES:
            self.too_large = True
            self.body: list[bytes] = []  # AsyncHttpConsumer's buffered chunks
            message = {**message, "body": b""}
        await super().http_request(message)

    async def respond(self, answer: Page) -> None:
        status, headers, body = answer.render(self.scope)
        await self.send_response(status, body, headers=headers)

    async def handle(self, body: bytes) -> None:
        target = parse_target(self.scope)
        user = self.scope.get("user")
        if not getattr(user, "is_authenticated", False):
            await self.redirect_to_login()
            return
        if target is None:
            await self.respond(NOT_FOUND)
            return
        decision = await decide_cached(self.scope, user, target.workload_id)
        if decision.outcome == "login":
            await self.redirect_to_login()
        elif decision.outcome == "missing":
            await self.respond(NOT_FOUND)
        elif decision.outcome == "starting":
            await self.respond(STARTING)
        elif decision.outcome == "broken" or decision.endpoint is None:
            await self.respond(BAD_GATEWAY)
        elif not target.rest:
            location = f"{PREFIX}{target.workload_id}/"
            location += f"?{target.query}" if target.query else ""
            await self.send_response(302, b"", headers=[(b"location", location.encode())])
        elif not origin_allowed(self.scope):
            await self.respond(FORBIDDEN)
        elif self.too_large:
            await self.respond(TOO_LARGE)
        else:
            await note_activity(target.workload_id)
            if decision.endpoint.rfb_socket:
                await self.desktop(target, decision.endpoint)
            else:
                await self.forward(target, decision.endpoint, body)

    async def desktop(self, target: Target, endpoint: Endpoint) -> None:
        """A desktop's HTTP side is noVNC's static files; "/" opens its page."""
        if target.rest == "/" and not target.query:
            location = desktop_page(target.workload_id).encode()
            await self.send_response(
                302, b"", headers=[(b"location", location), (b"cache-control", b"no-store")]
            )
            return
        method = self.scope.get("method", "GET")
        path = static_file(endpoint.static_dir, target.rest) if endpoint.static_dir else None
        if method not in STATIC_METHODS or path is None:
            await self.respond(NOT_FOUND)
            return
        kind = mimetypes.guess_type(path)[0] or "application/octet-stream"
        if path.endswith((".js", ".mjs")):
            kind = "text/javascript"
        content = await asyncio.to_thread(_read_file, path)
        headers = [
            (b"content-type", kind.encode()),
            (b"cache-control", b"no-cache"),
            (b"x-content-type-options", b"nosniff"),
        ]
        await self.send_response(200, b"" if method == "HEAD" else content, headers=headers)

    async def redirect_to_login(self) -> None:
        raw = self.scope.get("raw_path")
        path = raw.decode("latin-1") if raw else quote(self.scope.get("path", "/"))
        query = self.scope.get("query_string", b"").decode("latin-1")
        location = redirect_to_login(
            f"{path}?{query}" if query else path, resolve_url(settings.LOGIN_URL)
        )["Location"]
        await self.send_response(
            302, b"", headers=[(b"location", location.encode()), (b"cache-control", b"no-store")]
        )

    async def forward(self, target: Target, endpoint: Endpoint, body: bytes) -> None:
        url = target.upstream_url(endpoint.url)
        headers = upstream_headers(self.scope, endpoint)
        method = self.scope.get("method", "GET")
        scrubber = Scrubber(secrets_of(endpoint))
        started = False
        client = upstream_client(endpoint.unix_socket)
        try:
            request = client.build_request(
                method, url, headers=headers, content=body, timeout=UPSTREAM_TIMEOUT
            )
            response = await client.send(request, stream=True)
        except httpx.TimeoutException:
            logger.warning("notebook proxy: %s timed out (%s)", target.workload_id, url)
            await self.respond(GATEWAY_TIMEOUT)
            return
        except (httpx.HTTPError, OSError) as exc:
            logger.warning(
                "notebook proxy: %s unreachable: %s", target.workload_id, type(exc).__name__
            )
            await self.respond(BAD_GATEWAY)
            return
        except Exception:
            logger.exception("notebook proxy: request to %s failed", target.workload_id)
            await self.respond(BAD_GATEWAY)
            return
        try:
            textual = is_textual(response.headers.get("content-type", ""))
            encoded = response.headers.get("content-encoding", "identity") != "identity"
            rewrites_body = (textual and bool(scrubber.secrets)) or encoded
            headers_out = response_headers(
                response, endpoint, target.workload_id, scrubber, rewrites_body=rewrites_body
            )
            # aiter_bytes decodes any content-encoding the upstream used regardless.
            async for chunk in response.aiter_bytes():
                if not started:
                    await self.send_headers(status=response.status_code, headers=headers_out)
                    started = True
                out = scrubber.feed(chunk) if textual else chunk
                if out:
                    await self.send_body(out, more_body=True)
            if not started:
                await self.send_headers(status=response.status_code, headers=headers_out)
                started = True
            await self.send_body(scrubber.flush() if textual else b"")
        except (httpx.HTTPError, OSError) as exc:
            timeout = isinstance(exc, httpx.TimeoutException)
            logger.warning(
                "notebook proxy: %s failed mid-response: %s",
                target.workload_id,
                type(exc).__name__,
            )
            if started:
                await self.send_body(b"")  # cut short; the browser sees a truncated body
            else:
                await self.respond(GATEWAY_TIMEOUT if timeout else BAD_GATEWAY)
        finally:
            await response.aclose()


# -- WebSocket ----------------------------------------------------------------------------------

_UPSTREAM_CLOSE_CODES = {1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014}


def upstream_close_code(code: int | None) -> int:
    """A code the websockets client may send (1005, 1006 and 1015 are only ever reported)."""
    if code in _UPSTREAM_CLOSE_CODES or (code is not None and 3000 <= code <= 4999):
        return code
    return 1000


def browser_close_code(code: int | None) -> int:
    """A code daphne (autobahn) may send: 1000 or 3000-4999. The protocol's own codes
    1001-1015 (1009: message too big, 1011: server error, ...) travel as 4000 + (code - 1000).
    """
    if code is None or code == 1000 or 3000 <= code <= 4999:
        return code or 1000
    if 1001 <= code <= 1015:
        return 4000 + code - 1000
    return 1000


def websocket_url(http_url: str) -> str:
    if http_url.startswith("https://"):
        return "wss://" + http_url[len("https://") :]
    if http_url.startswith("http://"):
        return "ws://" + http_url[len("http://") :]
    return http_url


class NotebookWebsocketProxy(AsyncWebsocketConsumer):
    """``/nb/<id>/…`` over WebSocket: connects upstream first, then accepts the browser with
    the subprotocol the notebook chose, then pumps frames both ways."""

    upstream: ClientConnection | None = None
    pump: asyncio.Task[None] | None = None
    browser_gone = False
    activity: ActivityClock | None = None
    rfb: asyncio.StreamWriter | None = None  # a desktop: the VNC server's socket

    async def connect(self) -> None:
        target = parse_target(self.scope)
        user = self.scope.get("user")
        if target is None or not getattr(user, "is_authenticated", False):
            await self.close()
            return
        decision = await database_sync_to_async(decide)(user, target.workload_id)
        endpoint = decision.endpoint
        if decision.outcome != "proxy" or endpoint is None or not origin_allowed(self.scope):
            await self.close()
            return
        self.activity = ActivityClock(target.workload_id)
        await self.activity.tick()
        if endpoint.rfb_socket:
            await self.connect_rfb(target, endpoint)
            return
        url = websocket_url(target.upstream_url(endpoint.url))
        try:
            self.upstream = await self.open_upstream(
                url,
                endpoint,
                origin=origin_of(endpoint.url),
                subprotocols=self.scope.get("subprotocols") or None,
                additional_headers=upstream_headers(self.scope, endpoint, websocket=True),
                user_agent_header=None,
                compression=None,
                open_timeout=WEBSOCKET_OPEN_TIMEOUT,
                close_timeout=5,
                max_size=MAX_FRAME_BYTES,
            )
        except Exception as exc:
            logger.warning("notebook proxy: websocket to %s refused: %s", target.workload_id, exc)
            await self.close()
            return
        await self.accept(subprotocol=self.upstream.subprotocol)
        self.pump = asyncio.create_task(self.pump_upstream(self.upstream))

    @staticmethod
    async def open_upstream(url: str, endpoint: Endpoint, **options: Any) -> ClientConnection:
        """The notebook's WebSocket: over TCP, or over the endpoint's private socket."""
        if endpoint.unix_socket:
            return await websocket_unix_connect(path=endpoint.unix_socket, uri=url, **options)
        return await websocket_connect(url, proxy=None, **options)

    async def connect_rfb(self, target: Target, endpoint: Endpoint) -> None:
        """noVNC's WebSocket carries the raw RFB stream: bridge it to the VNC server's socket
        (binary messages both ways; websockify's "binary" subprotocol when asked for)."""
        if not is_desktop_socket(target):
            await self.close()
            return
        try:
            reader, self.rfb = await asyncio.wait_for(
                asyncio.open_unix_connection(endpoint.rfb_socket), RFB_OPEN_TIMEOUT
            )
        except (OSError, TimeoutError) as exc:
            logger.warning("notebook proxy: desktop %s refused: %s", target.workload_id, exc)
            await self.close()
            return
        offered = self.scope.get("subprotocols") or []
        await self.accept(subprotocol="binary" if "binary" in offered else None)
        self.pump = asyncio.create_task(self.pump_rfb(reader))

    async def pump_rfb(self, reader: asyncio.StreamReader) -> None:
        """The VNC server's bytes to the browser, then close the browser when it hangs up."""
        try:
            while chunk := await reader.read(RFB_CHUNK_BYTES):
                await self.send(bytes_data=chunk)
                if self.activity is not None:
                    await self.activity.tick()
        except (OSError, ConnectionError):
            pass
        except Exception:
            if not self.browser_gone:
                logger.exception("notebook proxy: desktop pump failed")
        if not self.browser_gone:
            self.browser_gone = True
            with contextlib.suppress(Exception):
                await self.close()

    async def pump_upstream(self, upstream: ClientConnection) -> None:
        """Frames from the notebook to the browser, then the notebook's close."""
        code: int | None = None
        try:
            async for message in upstream:
                if self.activity is not None:
                    await self.activity.tick()
                try:
                    if isinstance(message, str):
                        await self.send(text_data=message)
                    else:
                        await self.send(bytes_data=message)
                except Exception:
                    if self.browser_gone:
                        return
                    # daphne refuses messages above its own limit (1 MiB unless configured:
                    # --websocket-max-message-size, DAPHNE_WEBSOCKET_MAX_MESSAGE_SIZE).
                    logger.warning(
                        "notebook proxy: a %d-byte websocket message could not be sent to the "
                        "browser; is the ASGI server's websocket message limit too low?",
                        len(message),
                    )
                    code = 1009
                    break
        except ConnectionClosed:
            pass
        except Exception:
            logger.exception("notebook proxy: websocket pump failed")
        if code is not None:
            with contextlib.suppress(Exception):
                await upstream.close(code=code)
        if not self.browser_gone:
            self.browser_gone = True
            with contextlib.suppress(Exception):
                await self.close(code=browser_close_code(code or upstream.close_code))

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.activity is not None:
            await self.activity.tick()
        if self.rfb is not None:
            raw = bytes_data if bytes_data is not None else (text_data or "").encode()
            try:
                self.rfb.write(raw)
                await self.rfb.drain()
            except (OSError, ConnectionError):
                await self.close()
            return
        if self.upstream is None:
            return
        data: str | bytes = text_data if text_data is not None else (bytes_data or b"")
        size = len(data.encode()) if isinstance(data, str) else len(data)
        if size > MAX_FRAME_BYTES:
            await self.upstream.close(code=1009)
            return  # the pump then closes the browser with 1009
        with contextlib.suppress(ConnectionClosed):
            await self.upstream.send(data)

    async def disconnect(self, code: int) -> None:
        self.browser_gone = True
        if self.rfb is not None:
            with contextlib.suppress(Exception):
                self.rfb.close()
        if self.upstream is not None:
            with contextlib.suppress(Exception):
                await self.upstream.close(code=upstream_close_code(code))
        if self.pump is not None and not self.pump.done():
            self.pump.cancel()
            try:
                await self.pump
            except asyncio.CancelledError:
                # The pump's own cancellation is expected; ours (the server or an event loop
                # shutting down cancels this consumer) must go on, or the loop waits forever.
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
            except Exception:
                pass


def _read_file(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()
