"""The core promise, end to end on this host: bob launches JupyterLab from a granted template,
the local backend starts a real server, the portal sees it Running, bob opens it through the
proxy and runs a cell over the kernel WebSocket; charlie gets 404; stopping leaves nothing."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import HttpCommunicator, WebsocketCommunicator
from django.conf import settings
from django.test import Client
from django.utils.html import escape

from portal.asgi import application
from scheduling.backends import registry
from scheduling.models import Cluster
from tests.workloads.conftest import local_catalog, wait_for
from workloads import services
from workloads.choices import State
from workloads.models import AppTemplate, Workload
from workloads.specs import handle_for


def cookie_for(user: Any) -> str:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


async def fetch(method: str, path: str, cookie: str, body: bytes = b"") -> dict[str, Any]:
    headers = [(b"host", b"localhost"), (b"cookie", cookie.encode())]
    if body:
        headers.append((b"content-type", b"application/json"))
    communicator = HttpCommunicator(application, method, path, body=body, headers=headers)
    response = await communicator.get_response(timeout=30)
    await communicator.wait(timeout=5)
    return response


def setup_catalog(world: Any) -> tuple[Cluster, AppTemplate]:
    cluster, template, _flavor = local_catalog(world, "jupyter")
    return cluster, template


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_a_student_launches_jupyterlab_opens_it_and_runs_a_cell(
    world: Any, tmp_path: Any, settings: Any
) -> None:
    settings.DATA_DIR = tmp_path
    registry.forget()
    cluster, template = await database_sync_to_async(setup_catalog)(world)
    try:
        workload = await database_sync_to_async(services.launch_environment)(
            actor=world.bob, template=template
        )
        workload = await database_sync_to_async(wait_for)(cluster, workload, State.RUNNING, 90)
        base = workload.open_path
        bob = await database_sync_to_async(cookie_for)(world.bob)
        charlie = await database_sync_to_async(cookie_for)(world.charlie)

        page = await fetch("GET", base + "lab", bob)
        assert page["status"] == 200 and b"JupyterLab" in page["body"]
        assert workload.backend_state["token"].encode() not in page["body"]
        assert (await fetch("GET", base + "lab", charlie))["status"] == 404

        created = await fetch("POST", base + "api/kernels", bob, b'{"name": "python3"}')
        assert created["status"] == 201, created["body"][:300]
        kernel = json.loads(created["body"])["id"]
        session = uuid.uuid4().hex
        ws = WebsocketCommunicator(
            application,
            f"{base}api/kernels/{kernel}/channels?session_id={session}",
            headers=[
                (b"host", b"localhost"),
                (b"origin", b"http://localhost"),
                (b"cookie", bob.encode()),
            ],
        )
        connected, _ = await ws.connect(timeout=20)
        assert connected
        msg_id = uuid.uuid4().hex
        await ws.send_json_to(
            {
                "header": {
                    "msg_id": msg_id,
                    "msg_type": "execute_request",
                    "username": "bob",
                    "session": session,
                    "date": "2026-01-01T00:00:00Z",
                    "version": "5.3",
                },
                "parent_header": {},
                "metadata": {},
                "buffers": [],
                "channel": "shell",
                "content": {
                    "code": "print(6*7)",
                    "silent": False,
                    "store_history": False,
                    "user_expressions": {},
                    "allow_stdin": False,
                    "stop_on_error": True,
                },
            }
        )
        output = None
        deadline = time.monotonic() + 60
        while output is None and time.monotonic() < deadline:
            message = json.loads(await ws.receive_from(timeout=60))
            if (
                message.get("msg_type") == "stream"
                and message["parent_header"].get("msg_id") == msg_id
            ):
                output = message["content"]["text"]
        await ws.disconnect()
        assert output == "42\n"
    finally:
        await database_sync_to_async(_stop_all)(world, cluster)
    backend = registry.get_backend(cluster)
    assert backend.running() == set()
    registry.forget()


def _stop_all(world: Any, cluster: Cluster) -> None:
    for workload in Workload.objects.filter(state__in=(State.STARTING, State.RUNNING)):
        services.stop(actor=world.bob, workload=workload)
        wait_for(cluster, workload, State.STOPPED, 60)


def setup_terminal_catalog(world: Any) -> tuple[Cluster, AppTemplate]:
    cluster, template, _flavor = local_catalog(world, "terminal")
    return cluster, template


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_a_student_opens_the_terminal_app_and_runs_a_command_in_its_shell(
    world: Any, tmp_path: Any, settings: Any
) -> None:
    settings.DATA_DIR = tmp_path
    registry.forget()
    cluster, template = await database_sync_to_async(setup_terminal_catalog)(world)
    try:
        workload = await database_sync_to_async(services.launch_environment)(
            actor=world.bob, template=template
        )
        workload = await database_sync_to_async(wait_for)(cluster, workload, State.RUNNING, 90)
        base = workload.open_path
        bob = await database_sync_to_async(cookie_for)(world.bob)
        charlie = await database_sync_to_async(cookie_for)(world.charlie)

        # What the portal opens (My Desktop, the API's open_url) is a page that exists...
        opened = await database_sync_to_async(_open_url)(workload)
        assert opened == base + "lab"
        page = await fetch("GET", opened, bob)
        assert page["status"] == 200 and b"JupyterLab" in page["body"]
        assert b'"terminalsAvailable": true' in page["body"]
        assert (await fetch("GET", opened, charlie))["status"] == 404
        # ... whose layout opens terminal 1 (created on load, or reconnected to).
        layout = await fetch("GET", base + "lab/api/workspaces/default", bob)
        assert layout["status"] == 200
        data = json.loads(layout["body"])["data"]
        assert data["terminal:1"] == {"data": {"name": "1"}}
        assert data["layout-restorer:data"]["main"]["current"] == "terminal:1"

        created = await fetch("POST", base + "api/terminals", bob, b"{}")
        assert created["status"] == 200, created["body"][:300]
        name = json.loads(created["body"])["name"]
        assert (await fetch("POST", base + "api/terminals", charlie, b"{}"))["status"] == 404
        headers = [(b"host", b"localhost"), (b"origin", b"http://localhost")]
        outsider = WebsocketCommunicator(
            application,
            f"{base}terminals/websocket/{name}",
            headers=[*headers, (b"cookie", charlie.encode())],
        )
        assert not (await outsider.connect(timeout=20))[0]

        ws = WebsocketCommunicator(
            application,
            f"{base}terminals/websocket/{name}",
            headers=[*headers, (b"cookie", bob.encode())],
        )
        connected, _ = await ws.connect(timeout=20)
        assert connected
        await ws.send_to(text_data=json.dumps(["stdin", "echo $((6*7))\r"]))
        output = ""
        deadline = time.monotonic() + 30
        while "42\r\n" not in output and time.monotonic() < deadline:
            message = json.loads(await ws.receive_from(timeout=30))
            if message[0] == "stdout":
                output += message[1]
        await ws.disconnect()
        assert "42\r\n" in output, output  # the shell's answer, not the echo of the input
    finally:
        await database_sync_to_async(_stop_all)(world, cluster)
    backend = registry.get_backend(cluster)
    assert backend.running() == set()
    registry.forget()


def _open_url(workload: Workload) -> str | None:
    from workloads.api.serializers import WorkloadSerializer

    workload.refresh_from_db()
    return WorkloadSerializer(workload).data["open_url"]


@pytest.mark.django_db(transaction=True)
def test_a_job_typed_as_a_shell_loop_runs_in_a_shell_and_its_page_shows_it_as_typed(
    world, settings, tmp_path
) -> None:
    settings.DATA_DIR = tmp_path
    registry.forget()
    cluster, _template, flavor = local_catalog(world, "jupyter")
    typed = "for i in 1 2 3; do echo \"line $i\"; done && bash -c 'echo done'"
    try:
        workload = services.submit_job(
            actor=world.bob, tenant=world.class_a, flavor=flavor, command=typed
        )
        services.admit_queued(cluster)
        workload = wait_for(cluster, workload, State.SUCCEEDED, 60)
        logs = registry.get_backend(cluster).logs(handle_for(workload)).text
        assert "line 1\nline 2\nline 3\ndone\n" in logs
        client = Client()
        client.force_login(world.bob)
        page = client.get(f"/workloads/{workload.pk}/").content.decode()
        shown = f'<code data-role="command" style="white-space: pre-wrap">{escape(typed)}</code>'
        assert shown in page
    finally:
        registry.forget()
