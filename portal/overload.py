"""Overload answers fast: a bounded number of requests in Django at once, 503 for the rest.

Each HTTP request that Django serves runs its view in a thread of its own and holds a database
connection while it does, so a burst of 1,000 requests would open 1,000 connections (PostgreSQL
refuses past ``max_connections``, SQLite serialises them all behind its lock). Two pieces keep
the budget:

- :class:`ConcurrencyGate` (ASGI, in front of Django): at most ``WEB_CONCURRENCY`` requests are
  in Django at once; the next ones wait up to ``WEB_QUEUE_SECONDS`` for a slot and are then
  answered ``503`` with ``Retry-After``, in the API's JSON error format under ``/api/``. Health
  checks, static files and the notebook proxy (``/nb/``, streaming, its own short database
  reads) do not wait behind the gate.
- :class:`DatabaseUnavailableMiddleware` (Django): a database that refuses a connection (or
  drops one) answers ``503`` with ``Retry-After``, never a 500 with a traceback.

Settings: ``WEB_CONCURRENCY``, ``WEB_QUEUE_SECONDS`` (docs/configuration.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from django.db import OperationalError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[..., Awaitable[None]]  # Django's handler types its arguments its own way

RETRY_AFTER_SECONDS = 2
UNGATED_PREFIXES = ("/healthz", "/readyz", "/static/", "/nb/")
BUSY = "The portal is busy right now: try again in a few seconds."
DATABASE_DOWN = gettext_noop("The database is not answering right now: try again in a few seconds.")


class ConcurrencyGate:
    """ASGI middleware: at most ``limit`` HTTP requests in the wrapped app at once."""

    def __init__(self, app: ASGIApp, *, limit: int, wait_seconds: float) -> None:
        self.app = app
        self.limit = limit
        self.wait_seconds = wait_seconds
        self._slots: asyncio.Semaphore | None = None
        self.in_flight = 0  # for tests and the benchmark
        self.refused = 0

    def _semaphore(self) -> asyncio.Semaphore:
        if self._slots is None:  # made on the server's loop, on its first request
            self._slots = asyncio.Semaphore(self.limit)
        return self._slots

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path", "").startswith(UNGATED_PREFIXES):
            await self.app(scope, receive, send)
            return
        slots = self._semaphore()
        try:
            await asyncio.wait_for(slots.acquire(), self.wait_seconds)
        except TimeoutError:
            self.refused += 1
            await _busy(scope, send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
            slots.release()


async def _busy(scope: Scope, send: Send) -> None:
    """503 with Retry-After, JSON under /api/ (the API's error format), text elsewhere."""
    api = scope.get("path", "").startswith("/api/")
    if api:
        body, kind = json.dumps({"detail": BUSY}).encode(), b"application/json"
    else:
        body, kind = BUSY.encode(), b"text/plain; charset=utf-8"
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", kind),
                (b"retry-after", str(RETRY_AFTER_SECONDS).encode()),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class DatabaseUnavailableMiddleware:
    """A database that cannot be reached (too many clients, restarting, gone) is a 503 with
    Retry-After: the request may be tried again as it is. Other database errors are bugs and
    stay 500s."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        # Connect before the rest of the stack: sessions and the user are read by middleware,
        # whose errors would otherwise become 500s before any view runs.
        if not request.path.startswith(UNGATED_PREFIXES):
            try:
                connection.ensure_connection()
            except OperationalError as exc:
                return self._unavailable(request, exc)
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, OperationalError) or not _is_unavailable(exception):
            return None
        return self._unavailable(request, exception)

    @staticmethod
    def _unavailable(request: HttpRequest, exception: Exception) -> HttpResponse:
        logger.warning("database unavailable: %s %s: %s", request.method, request.path, exception)
        message = _(DATABASE_DOWN)
        response: HttpResponse
        if request.path.startswith("/api/"):
            response = JsonResponse({"detail": message}, status=503)
        else:
            response = HttpResponse(message, status=503, content_type="text/plain; charset=utf-8")
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response


# What connection-level failures say (psycopg and SQLite); a failed query says something else.
_UNAVAILABLE = (
    "too many clients",
    "connection refused",
    "could not connect",
    "connection failed",
    "server closed the connection",
    "the database system is starting up",
    "the database system is shutting down",
    "terminating connection",
    "connection is lost",
    "database is locked",
    "couldn't get a connection",
)


def _is_unavailable(error: OperationalError) -> bool:
    text = str(error).lower()
    return any(phrase in text for phrase in _UNAVAILABLE)
