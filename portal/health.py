"""Liveness (/healthz: the process answers) and readiness (/readyz: its dependencies do)."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> JsonResponse:
    checks: dict[str, dict[str, object]] = {"database": _timed(_database)}
    if settings.REDIS_URL:
        checks["redis"] = _timed(_redis)
    ready = all(check["ok"] for check in checks.values())
    return JsonResponse(
        {"status": "ok" if ready else "unavailable", "checks": checks}, status=200 if ready else 503
    )


def _timed(probe: Callable[[], None]) -> dict[str, object]:
    start = time.perf_counter()
    try:
        probe()
    except Exception as exc:  # any failure means "not ready"; say which
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"ok": True, "ms": round((time.perf_counter() - start) * 1000, 1)}


def _database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def _redis() -> None:
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    finally:
        client.close()
