"""The serving gateway: ``/serve/<endpoint>/v2/…`` to the endpoint's model-server replicas.

Who gets in: a live API key of that endpoint (``Authorization: Bearer qsk_…``) or the portal
session of someone who may see it (``workloads.serving.visible_to``). Anything else, an
unknown endpoint included, is the same 401: nothing tells whether an endpoint exists. Then:
the endpoint's rate limit (a token bucket per endpoint, in Redis when ``REDIS_URL`` is set so
every web process shares it; 429 with Retry-After), the Open Inference Protocol v2 paths only
(an infer body that is not v2 JSON is a 400 with the reason), and the request goes to the
replica with the fewest requests in flight. An endpoint scaled to zero starts a replica and
the request waits for it (a cold start, at most ``SERVING_COLD_START_SECONDS``).

The gateway measures each endpoint (``workloads.autoscale.Stats``) and runs the autoscaler's
loop in its process: once a second it asks each endpoint it serves for ``autoscale.step``.
See docs/serving.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import httpx
from asgiref.sync import sync_to_async
from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from django.conf import settings
from django.utils import timezone

from scheduling.backends.base import Handle, ReplicaStatus, ScalingBackend
from scheduling.backends.registry import get_backend
from workloads import autoscale
from workloads import serving as serving_service
from workloads.choices import State
from workloads.models import ServingEndpoint
from workloads.proxy import origin_allowed, upstream_client
from workloads.specs import handle_for

logger = logging.getLogger(__name__)

PREFIX = "/serve/"
MAX_BODY_BYTES = 16 * 1024 * 1024
AUTH_CACHE_S = 2.0
REPLICA_CACHE_S = 1.0
TICK_S = 1.0
LAST_REQUEST_WRITE_S = 10.0
UPSTREAM_TIMEOUT_S = 120.0
DATATYPES = frozenset(
    {"BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
     "FP16", "FP32", "FP64", "BYTES"}
)  # fmt: skip


@dataclass
class Target:
    """What the gateway needs of an endpoint, cached for a moment."""

    endpoint_id: int
    slug: str
    model_name: str
    rate_limit: int
    state: str
    reason: str
    cluster: Any
    handle: Handle


# --- who asks -----------------------------------------------------------------------------

_auth: dict[tuple[str, str], tuple[float, Target | None]] = {}


def _target(endpoint: ServingEndpoint) -> Target:
    workload = endpoint.workload
    return Target(
        endpoint_id=endpoint.pk,
        slug=endpoint.slug,
        model_name=endpoint.model_name,
        rate_limit=endpoint.rate_limit,
        state=workload.state if workload else State.STOPPED,
        reason=workload.reason if workload else "",
        cluster=workload.cluster if workload else None,
        handle=handle_for(workload) if workload else Handle(""),
    )


def authorize(slug: str, bearer: str | None, user: Any) -> Target | None:
    """The endpoint if the key is one of its live keys, or the user may see it."""
    if bearer:
        endpoint = serving_service.endpoint_for_key(slug, bearer)
    elif getattr(user, "is_authenticated", False):
        endpoint = (
            serving_service.visible_to(user)
            .select_related("workload__cluster")
            .filter(slug=slug)
            .first()
        )
    else:
        endpoint = None
    return _target(endpoint) if endpoint else None


async def authorize_cached(slug: str, bearer: str | None, user: Any) -> Target | None:
    who = f"key:{bearer}" if bearer else f"user:{getattr(user, 'pk', '')}"
    key = (slug, who)
    now = time.monotonic()
    hit = _auth.get(key)
    if hit is not None and hit[0] > now:
        return hit[1]
    found = await database_sync_to_async(authorize)(slug, bearer, user)
    if len(_auth) > 4096:
        _auth.clear()
    _auth[key] = (now + AUTH_CACHE_S, found)
    return found


def forget() -> None:
    """Drop the caches (tests)."""
    _auth.clear()
    _replicas.clear()
    _buckets.clear()
    _in_flight.clear()
    _connections.clear()
    _served.clear()
    global _loop_task
    if _loop_task is not None and not _loop_task.done():
        with contextlib.suppress(RuntimeError):  # its loop is closed already
            _loop_task.cancel()
    _loop_task = None


# --- the rate limit -----------------------------------------------------------------------

_buckets: dict[int, tuple[float, float]] = {}  # endpoint id -> (tokens, at)
_REDIS_BUCKET = """
local rate = tonumber(ARGV[1]); local now = tonumber(ARGV[2])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1]) or rate; local at = tonumber(state[2]) or now
tokens = math.min(rate, tokens + (now - at) * rate)
local allowed = 0
if tokens >= 1 then tokens = tokens - 1; allowed = 1 end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'at', now)
redis.call('EXPIRE', KEYS[1], 60)
return {allowed, tostring(tokens)}
"""
_redis: Any = None


def _local_take(endpoint_id: int, rate: int, now: float) -> float:
    """0 when a token was taken, else the seconds until the next one."""
    tokens, at = _buckets.get(endpoint_id, (float(rate), now))
    tokens = min(float(rate), tokens + (now - at) * rate)
    if tokens >= 1:
        _buckets[endpoint_id] = (tokens - 1, now)
        return 0.0
    _buckets[endpoint_id] = (tokens, now)
    return (1 - tokens) / rate


async def take_token(endpoint_id: int, rate: int) -> float:
    now = time.time()
    url = getattr(settings, "REDIS_URL", "")
    if not url:
        return _local_take(endpoint_id, rate, now)
    global _redis
    try:
        if _redis is None:
            import redis.asyncio as redis_asyncio

            _redis = redis_asyncio.from_url(url).register_script(_REDIS_BUCKET)
        allowed, tokens = await _redis(
            keys=[f"quanta:serve:bucket:{endpoint_id}"], args=[rate, now]
        )
    except Exception:  # Redis away: the process's own bucket, not an outage
        logger.warning("rate limit: Redis unavailable, limiting in-process", exc_info=True)
        return _local_take(endpoint_id, rate, now)
    return 0.0 if int(allowed) else (1 - float(tokens)) / rate


# --- the replicas -------------------------------------------------------------------------

_replicas: dict[str, tuple[float, ReplicaStatus]] = {}
_in_flight: dict[str, int] = {}  # per replica socket


def _replica_status(target: Target) -> ReplicaStatus:
    backend = get_backend(target.cluster)
    if not isinstance(backend, ScalingBackend):
        endpoint = backend.endpoint(target.handle)
        return ReplicaStatus(desired=1, ready=(endpoint,) if endpoint else ())
    return backend.replicas(target.handle)


async def replicas(target: Target, *, fresh: bool = False) -> ReplicaStatus:
    now = time.monotonic()
    hit = _replicas.get(target.handle.workload_id)
    if hit is not None and hit[0] > now and not fresh:
        return hit[1]
    status = await sync_to_async(_replica_status, thread_sensitive=False)(target)
    _replicas[target.handle.workload_id] = (now + REPLICA_CACHE_S, status)
    return status


async def scale(target: Target, count: int) -> None:
    backend = get_backend(target.cluster)
    if isinstance(backend, ScalingBackend):
        await sync_to_async(backend.scale, thread_sensitive=False)(target.handle, count)
        _replicas.pop(target.handle.workload_id, None)


async def ready_replicas(target: Target) -> ReplicaStatus | None:
    """Replicas that answer; with none, start one if it is scaled to zero and wait."""
    status = await replicas(target)
    if status.ready:
        return status
    if status.desired == 0:
        await scale(target, 1)
    deadline = time.monotonic() + settings.SERVING_COLD_START_SECONDS
    while time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        status = await replicas(target, fresh=True)
        if status.ready:
            return status
    return None


# --- the upstream ------------------------------------------------------------------------

# Kept-alive connections to each replica's socket, per event loop. A minimal HTTP/1.1 client:
# the model server is ours and always answers with a Content-Length; a general client
# (httpx) costs a millisecond more per request, which is most of the gateway's budget.
_connections: dict[tuple[int, str], list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}
MAX_IDLE_CONNECTIONS = 32


async def unix_request(path: str, method: str, target: str, body: bytes) -> tuple[int, str, bytes]:
    key = (id(asyncio.get_running_loop()), path)
    idle = _connections.setdefault(key, [])
    for attempt in range(2):  # a kept-alive connection the server closed: once more, afresh
        reused = bool(idle)
        reader, writer = idle.pop() if idle else await asyncio.open_unix_connection(path)
        try:
            writer.write(
                f"{method} {target} HTTP/1.1\r\nHost: localhost\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()
            status_line = await asyncio.wait_for(reader.readline(), UPSTREAM_TIMEOUT_S)
            if not status_line:
                raise ConnectionResetError("the model server closed the connection")
            code = int(status_line.split(b" ", 2)[1])
            length, content_type, close = 0, "application/json", False
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b"\n", b""):
                    break
                name, _, value = line.decode("latin-1").partition(":")
                name, value = name.strip().lower(), value.strip()
                if name == "content-length":
                    length = int(value)
                elif name == "content-type":
                    content_type = value
                elif name == "connection" and value.lower() == "close":
                    close = True
            content = await reader.readexactly(length)
        except (ConnectionError, asyncio.IncompleteReadError):
            writer.close()
            if reused and attempt == 0:
                continue
            raise
        except BaseException:
            writer.close()
            raise
        if close or len(idle) >= MAX_IDLE_CONNECTIONS:
            writer.close()
        else:
            idle.append((reader, writer))
        return code, content_type, content
    raise ConnectionResetError("unreachable")


# --- the autoscaler's loop ----------------------------------------------------------------

_loop_task: asyncio.Task[None] | None = None
_served: dict[int, Target] = {}


def _endpoint_for_tick(endpoint_id: int) -> ServingEndpoint | None:
    return (
        ServingEndpoint.objects.select_related("workload__cluster", "version__model")
        .filter(pk=endpoint_id, workload__state=State.RUNNING)
        .first()
    )


async def tick() -> None:
    """One pass of the autoscaler over the endpoints this process serves."""
    for endpoint_id, target in list(_served.items()):
        endpoint = await database_sync_to_async(_endpoint_for_tick)(endpoint_id)
        if endpoint is None:
            _served.pop(endpoint_id, None)
            continue
        status = await replicas(target, fresh=True)
        desired = autoscale.step(endpoint, status.desired, gpu_utilisation=status.gpu_utilisation)
        if desired != status.desired:
            logger.info("endpoint %s: %s -> %s replicas", endpoint.slug, status.desired, desired)
            await scale(target, desired)


async def _run_loop() -> None:
    while True:
        await asyncio.sleep(TICK_S)
        try:
            await tick()
        except Exception:
            logger.exception("serving autoscaler")


def _ensure_loop(target: Target) -> None:
    global _loop_task
    _served[target.endpoint_id] = target
    if (
        _loop_task is None
        or _loop_task.done()
        or _loop_task.get_loop() is not asyncio.get_running_loop()
    ):
        _loop_task = asyncio.get_running_loop().create_task(_run_loop())


_last_written: dict[int, float] = {}


def _write_last_request(endpoint_id: int) -> None:
    ServingEndpoint.objects.filter(pk=endpoint_id).update(last_request_at=timezone.now())


# --- the v2 body --------------------------------------------------------------------------


def infer_problem(body: bytes) -> str | None:
    """Why ``body`` is not a v2 inference request, or None."""
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return "the body is not JSON"
    if not isinstance(request, dict):
        return "the body is not a JSON object"
    inputs = request.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        return "'inputs' must be a non-empty list of tensors"
    for n, tensor in enumerate(inputs):
        if not isinstance(tensor, dict):
            return f"inputs[{n}] is not an object"
        if not isinstance(tensor.get("name"), str):
            return f"inputs[{n}].name must be a string"
        shape = tensor.get("shape")
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            return f"inputs[{n}].shape must be a list of non-negative integers"
        if tensor.get("datatype") not in DATATYPES:
            return f"inputs[{n}].datatype must be one of {', '.join(sorted(DATATYPES))}"
        if not isinstance(tensor.get("data"), list):
            return f"inputs[{n}].data must be a list"
    return None


def _route(rest: str, model_name: str, method: str) -> str | None:
    """The v2 path to forward, or None (404). Only the protocol's paths pass."""
    path = "/" + rest.strip("/")
    if method == "GET" and path in ("/v2", "/v2/health/live", "/v2/health/ready"):
        return path
    base = f"/v2/models/{model_name}"
    if method == "GET" and path in (base, base + "/ready"):
        return path
    if method == "POST" and path == base + "/infer":
        return path
    return None


# --- the consumer -------------------------------------------------------------------------


class GatewayRequest:
    """One request through the gateway. A plain ASGI app, not a Channels consumer: no channel
    layer or dispatch loop per request, as everything here adds to the gateway's latency."""

    def __init__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.scope, self.receive, self.send = scope, receive, send
        self.too_large = False

    async def run(self) -> None:
        chunks, size = [], 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                self.too_large = True
            elif chunk:
                chunks.append(chunk)
            if not message.get("more_body"):
                break
        await self.handle(b"".join(chunks))

    async def send_response(
        self, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
    ) -> None:
        await self.send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())],
            }
        )
        await self.send({"type": "http.response.body", "body": body})

    async def answer(
        self, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        await self.send_response(
            status,
            json.dumps(body).encode(),
            [(b"content-type", b"application/json"), *(headers or [])],
        )

    async def handle(self, body: bytes) -> None:
        path = unquote(self.scope["path"])
        rest = path[len(PREFIX) :]
        slug, _, tail = rest.partition("/")
        headers = dict(self.scope["headers"])
        authorization = headers.get(b"authorization", b"").decode("latin-1")
        bearer = authorization[7:].strip() if authorization.lower().startswith("bearer ") else None
        user = None if bearer else self.scope.get("user")
        if bearer is None and authorization:
            bearer = "-"  # another scheme: a wrong key, not a session
        target = await authorize_cached(slug, bearer, user) if slug else None
        if target is None:
            await self.answer(
                401,
                {"error": "a valid API key (Authorization: Bearer) or a session is required"},
                [(b"www-authenticate", b'Bearer realm="quanta"')],
            )
            return
        if bearer is None and not origin_allowed(self.scope):
            await self.answer(403, {"error": "this request came from another site"})
            return
        if self.too_large:
            await self.answer(413, {"error": f"the body is larger than {MAX_BODY_BYTES} bytes"})
            return
        method = self.scope["method"]
        upstream_path = _route(tail, target.model_name, method)
        if upstream_path is None:
            await self.answer(404, {"error": f"no such path: {method} /{tail}"})
            return
        if target.state != State.RUNNING:
            detail = f": {target.reason}" if target.reason else ""
            await self.answer(503, {"error": f"the endpoint is {target.state}{detail}"})
            return
        wait = await take_token(target.endpoint_id, target.rate_limit)
        if wait > 0:
            await self.answer(
                429,
                {"error": f"over the rate limit of {target.rate_limit} requests per second"},
                [(b"retry-after", str(max(1, round(wait + 0.5))).encode())],
            )
            return
        if method == "POST":
            problem = infer_problem(body)
            if problem:
                await self.answer(400, {"error": f"not a v2 inference request: {problem}"})
                return
        await self.forward(target, upstream_path, method, body)

    async def forward(self, target: Target, path: str, method: str, body: bytes) -> None:
        stats = autoscale.stats_for(target.endpoint_id)
        _ensure_loop(target)
        started = time.perf_counter()
        stats.started()
        ok = False
        try:
            if time.time() - _last_written.get(target.endpoint_id, 0) > LAST_REQUEST_WRITE_S:
                _last_written[target.endpoint_id] = time.time()
                await database_sync_to_async(_write_last_request)(target.endpoint_id)
            status = await ready_replicas(target)
            if status is None:
                await self.answer(504, {"error": "no replica started in time (cold start)"})
                return
            replica = min(status.ready, key=lambda e: _in_flight.get(e.unix_socket or e.url, 0))
            where = replica.unix_socket or replica.url
            _in_flight[where] = _in_flight.get(where, 0) + 1
            try:
                if replica.unix_socket:
                    answer = await unix_request(
                        replica.unix_socket, method, path, body if method == "POST" else b""
                    )
                else:  # a TCP upstream (a cluster's service)
                    response = await upstream_client().request(
                        method,
                        replica.url.rstrip("/") + path,
                        content=body if method == "POST" else None,
                        headers={"content-type": "application/json", **replica.headers},
                    )
                    answer = (
                        response.status_code,
                        response.headers.get("content-type", "application/json"),
                        response.content,
                    )
            except (OSError, ValueError, httpx.HTTPError, asyncio.IncompleteReadError) as error:
                _replicas.pop(target.handle.workload_id, None)
                await self.answer(502, {"error": f"the model server did not answer: {error}"})
                return
            finally:
                _in_flight[where] -= 1
            code, content_type, content = answer
            ok = code < 500
            await self.send_response(
                code, content, [(b"content-type", content_type.encode("latin-1"))]
            )
        finally:
            stats.finished(time.perf_counter() - started, ok)


async def serving_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await GatewayRequest(scope, receive, send).run()


_with_session = AuthMiddlewareStack(serving_app)


async def gateway_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """/serve/…: with an Authorization header straight in (a key never needs the session);
    without, through the session and authentication middleware (a browser, "try it")."""
    if any(name == b"authorization" for name, _value in scope["headers"]):
        await serving_app(scope, receive, send)
    else:
        await _with_session(scope, receive, send)


def live_stats(endpoint: ServingEndpoint) -> dict[str, Any]:
    """What the endpoint page shows: replicas now and what this process measured."""
    summary = autoscale.stats_for(endpoint.pk).summary()
    workload = endpoint.workload
    replicas_now: dict[str, int | None] = {"desired": 0, "ready": 0, "starting": 0}
    if workload is not None and workload.state == State.RUNNING:
        with contextlib.suppress(Exception):
            status = _replica_status(_target(endpoint))
            replicas_now = {
                "desired": status.desired,
                "ready": len(status.ready),
                "starting": status.starting,
                "gpu_utilisation": status.gpu_utilisation,
            }
    return {
        "state": workload.state if workload else State.STOPPED,
        "replicas": replicas_now,
        **summary,
    }
