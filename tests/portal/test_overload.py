"""Overload answers fast and honestly: a bounded number of requests in Django at once, 503 with
Retry-After for the rest, and for a database that refuses connections; never a 500."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from django.db import OperationalError, connection
from django.test import Client

from portal import asgi
from portal.overload import BUSY, ConcurrencyGate


class Held:
    """An ASGI app whose requests wait until the test lets them go."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.entered += 1
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def request(app: Any, path: str) -> tuple[int, dict[bytes, bytes], bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "path": path, "method": "GET", "headers": []}, receive, send)
    start = sent[0]
    return start["status"], dict(start["headers"]), b"".join(m.get("body", b"") for m in sent[1:])


@pytest.mark.asyncio
async def test_requests_past_the_limit_wait_then_get_503_with_retry_after() -> None:
    inner = Held()
    gate = ConcurrencyGate(inner, limit=2, wait_seconds=0.2)
    first = [asyncio.create_task(request(gate, "/api/v1/workloads/")) for _ in range(2)]
    await asyncio.sleep(0.05)
    status, headers, body = await request(gate, "/api/v1/workloads/")
    assert (status, headers[b"retry-after"]) == (503, b"2")
    assert json.loads(body) == {"detail": BUSY}
    assert inner.entered == 2 and gate.in_flight == 2 and gate.refused == 1

    page = await request(gate, "/apps/")
    assert page[0] == 503 and page[1][b"content-type"].startswith(b"text/plain")
    inner.release.set()
    assert [r[0] for r in await asyncio.gather(*first)] == [200, 200]
    assert gate.in_flight == 0


@pytest.mark.asyncio
async def test_a_request_that_waits_less_than_the_limit_gets_its_answer() -> None:
    inner = Held()
    gate = ConcurrencyGate(inner, limit=1, wait_seconds=2)
    first = asyncio.create_task(request(gate, "/apps/"))
    await asyncio.sleep(0.05)
    second = asyncio.create_task(request(gate, "/apps/"))
    await asyncio.sleep(0.05)
    inner.release.set()
    assert [(await first)[0], (await second)[0]] == [200, 200]
    assert gate.refused == 0


@pytest.mark.asyncio
async def test_health_checks_and_the_notebook_proxy_do_not_wait_behind_the_gate() -> None:
    inner = Held()
    gate = ConcurrencyGate(inner, limit=1, wait_seconds=0.1)
    held = asyncio.create_task(request(gate, "/apps/"))
    await asyncio.sleep(0.05)
    inner.release.set()  # later requests pass at once; the gate is still full until `held` ends
    assert (await request(gate, "/healthz"))[0] == 200
    assert (await request(gate, "/nb/1/lab"))[0] == 200
    await held


def test_the_portal_serves_django_through_the_gate(settings: Any) -> None:
    assert isinstance(asgi.gated_django, ConcurrencyGate)
    assert asgi.gated_django.limit == settings.WEB_CONCURRENCY


@pytest.mark.django_db
def test_a_database_that_refuses_connections_is_a_503_not_a_500(
    world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = Client()
    client.force_login(world.bob)

    def refuse() -> None:
        raise OperationalError("connection failed: FATAL:  sorry, too many clients already")

    monkeypatch.setattr(connection, "ensure_connection", refuse)
    api = client.get("/api/v1/workloads/")
    assert api.status_code == 503 and api["Retry-After"] == "2"
    assert api.json() == {
        "detail": "The database is not answering right now: try again in a few seconds."
    }
    page = client.get("/apps/")
    assert page.status_code == 503 and "try again" in page.content.decode()
    assert Client().get("/healthz").status_code == 200  # liveness needs no database


@pytest.mark.django_db
def test_other_database_errors_are_not_hidden_as_unavailable(
    world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workloads.api import views

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("no such column: workloads_workload.nonsense")

    monkeypatch.setattr(views, "visible_workloads", broken)
    client = Client(raise_request_exception=False)
    client.force_login(world.bob)
    assert client.get("/api/v1/workloads/").status_code == 500
