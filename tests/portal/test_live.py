"""Live updates over /ws/live/: topics, permission at subscribe time, snapshots, events after
commit, log streaming.

alice teaches class A (ml-101), bob studies in it and owns the job, charlie studies in class B,
dean administers the department (cs). Connections go through ``portal.asgi.application`` with
real session cookies. Without REDIS_URL the channel layer is the in-memory one; with it (CI)
channels-redis, under a prefix of this test's own.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from core import live
from portal.asgi import application
from scheduling.backends import registry
from scheduling.backends.base import Handle, LogChunk
from scheduling.models import Allocation, Cluster, Node
from tests.marks import requires_redis
from tests.workloads.fakes import FakeBackend
from workloads import lifecycle
from workloads import live as workload_live
from workloads.choices import State, WorkloadKind
from workloads.models import Flavor, Workload

REFUSED = {"type": "error", "message": live.REFUSED}


def live_test(func: Callable[..., Any]) -> Callable[..., Any]:
    """An async test through the ASGI app; the database is committed so threads see it."""
    marks = (
        pytest.mark.asyncio,
        pytest.mark.django_db(transaction=True),
        pytest.mark.usefixtures("channel_layer"),
    )
    for mark in marks:
        func = mark(func)
    return func


@pytest_asyncio.fixture
async def channel_layer(settings: Any) -> AsyncIterator[Any]:
    """The configured layer, of this test's own: on Redis under a fresh prefix."""
    config = copy.deepcopy(settings.CHANNEL_LAYERS["default"])
    if settings.REDIS_URL:
        config.setdefault("CONFIG", {})["prefix"] = f"t{uuid.uuid4().hex[:12]}"
    settings.CHANNEL_LAYERS = {"default": config}
    layer = get_channel_layer()
    yield layer
    await layer.flush()
    if hasattr(layer, "close_pools"):
        await layer.close_pools()


class GrowingOutput(FakeBackend):
    """A backend whose job output (by task; of the first attempt, then of a restart) the test
    writes."""

    def __init__(self) -> None:
        super().__init__()
        self.output: dict[int, str] = {0: "epoch 0\n"}
        self.restarted: dict[int, str] = {}

    def logs(self, handle: Handle, task: int = 0, offset: int = 0, limit: int = 65536) -> LogChunk:
        output = self.restarted if handle.state.get("attempt") else self.output
        data = output.get(task, "").encode()[offset : offset + limit]
        return LogChunk(data.decode(), offset + len(data), len(self.output))


@pytest.fixture(autouse=True)
def backend(monkeypatch: pytest.MonkeyPatch) -> GrowingOutput:
    """Every test's cluster runs on this fake: a workload moved to Starting here is
    "submitted" to it after commit (the lifecycle's dispatcher), without a process."""
    fake = GrowingOutput()
    registry.forget()
    monkeypatch.setattr(registry, "_build", lambda cluster: fake)
    monkeypatch.setattr(workload_live, "LOG_POLL_SECONDS", 0.05)
    return fake


@pytest.fixture
def cluster() -> Cluster:
    cluster = Cluster.objects.create(name="Lab", slug="lab", backend="local", is_default=True)
    Node.objects.create(cluster=cluster, name="gpu-host", cpu_milli=16000, memory_mib=65536)
    return cluster


@pytest.fixture
def job(world: Any, cluster: Cluster) -> Workload:
    """bob's training job in class A, handed to its backend and starting."""
    flavor = Flavor.objects.create(name="Small", slug="small", cpu_milli=1000, memory_mib=1024)
    return Workload.objects.create(
        kind=WorkloadKind.JOB,
        name="train",
        owner=world.bob,
        tenant=world.class_a,
        cluster=cluster,
        flavor=flavor,
        command=["python", "train.py"],
        state=State.STARTING,
        backend_state={"fake": True},
    )


@database_sync_to_async
def session_cookie(user: Any) -> str:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


async def connect(user: Any | None) -> WebsocketCommunicator:
    headers = [(b"host", b"localhost"), (b"origin", b"http://localhost")]
    if user is not None:
        headers.append((b"cookie", (await session_cookie(user)).encode()))
    communicator = WebsocketCommunicator(application, "/ws/live/", headers=headers)
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    return communicator


async def subscribe(ws: WebsocketCommunicator, topic: str, **extra: Any) -> dict[str, Any]:
    await ws.send_json_to({"action": "subscribe", "topic": topic, **extra})
    return dict(await ws.receive_json_from(timeout=5))


@database_sync_to_async
def move(workload: Workload, to: str, reason: str = "") -> bool:
    """A committed transition, as a worker makes it (listeners run after commit)."""
    return lifecycle.transition(workload.pk, to, reason=reason)


async def barrier(ws: WebsocketCommunicator) -> None:
    """Wait until the consumer has handled everything sent before (it answers in order)."""
    assert (await subscribe(ws, "barrier"))["type"] == "error"


async def next_event(ws: WebsocketCommunicator, within: float = 1.0) -> dict[str, Any]:
    return dict(await ws.receive_json_from(timeout=within))


# -- who may connect and subscribe ---------------------------------------------------------------


@live_test
async def test_anonymous_visitors_are_refused(world: Any) -> None:
    ws = WebsocketCommunicator(
        application,
        "/ws/live/",
        headers=[(b"host", b"localhost"), (b"origin", b"http://localhost")],
    )
    connected, _ = await ws.connect(timeout=5)
    assert not connected


@live_test
async def test_bob_sees_his_workload_move_within_a_second(world: Any, job: Workload) -> None:
    ws = await connect(world.bob)
    snapshot = await subscribe(ws, "workloads:mine")
    assert snapshot["type"] == "snapshot" and snapshot["topic"] == "workloads:mine"
    [item] = snapshot["items"]
    assert (item["id"], item["state"], item["owner"], item["tenant"]) == (
        str(job.pk),
        "Starting",
        "bob",
        "ml-101",
    )

    started = time.monotonic()
    assert await move(job, State.RUNNING, "running on gpu-host")
    event = await next_event(ws, within=1.0)
    assert time.monotonic() - started < 1.0
    assert event == {
        "type": "workload.state",
        "topic": "workloads:mine",
        "id": str(job.pk),
        "state": "Running",
        "state_label": "Running",
        "reason": "running on gpu-host",
        "reason_code": "text",  # words given as they are: no code of their own
        "reason_params": {"text": "running on gpu-host"},
        "reason_text": "running on gpu-host",  # in the reader's language, from code and params
        "open_url": None,  # a job: nothing to open
        "owner": "bob",
        "tenant": "ml-101",
        "updated_at": event["updated_at"],
    }
    assert event["updated_at"] > item["updated_at"]

    await ws.send_json_to({"action": "unsubscribe", "topic": "workloads:mine"})
    await barrier(ws)
    assert await move(job, State.STOPPING, "stopped by bob")
    assert await ws.receive_nothing(timeout=0.3)
    await ws.disconnect()


@live_test
async def test_the_snapshot_carries_the_current_state_after_a_gap(
    world: Any, job: Workload, cluster: Cluster
) -> None:
    notebook = await database_sync_to_async(Workload.objects.create)(
        kind=WorkloadKind.NOTEBOOK,
        name="lab",
        owner=world.bob,
        tenant=world.class_a,
        cluster=cluster,
        flavor=job.flavor,
        state=State.RUNNING,
    )
    assert await move(job, State.FAILED, "exit code 1")  # while nobody listens
    ws = await connect(world.bob)
    snapshot = await subscribe(ws, f"workload:{job.pk}")
    assert [(i["id"], i["state"], i["reason"]) for i in snapshot["items"]] == [
        (str(job.pk), "Failed", "exit code 1")
    ]
    opened = await subscribe(ws, f"workload:{notebook.pk}")
    assert opened["items"][0]["open_url"] == f"/nb/{notebook.pk}/lab"  # as the API has it
    mine = await subscribe(ws, "workloads:mine")
    assert {i["id"]: i["state"] for i in mine["items"]} == {
        str(job.pk): "Failed",
        str(notebook.pk): "Running",
    }
    await ws.disconnect()


@live_test
async def test_charlie_is_refused_alike_and_hears_nothing_of_bob(
    world: Any, job: Workload, backend: GrowingOutput
) -> None:
    ws = await connect(world.charlie)
    for topic in (
        f"workload:{job.pk}",
        f"workload:{uuid.uuid4()}",  # no such workload: the same answer
        f"workload:{str(job.pk).upper()}",
        f"logs:{job.pk}:0",
        "tenant:ml-101",
        "tenant:no-such-class",
        "cluster:lab",  # a student manages nothing
        "everything",
    ):
        assert await subscribe(ws, topic) == {**REFUSED, "topic": topic}
    assert (await subscribe(ws, "workloads:mine"))["items"] == []
    assert (await subscribe(ws, "tenant:dl-201"))["type"] == "error"  # a member, not staff

    await ws.send_to(text_data="not json")
    assert (await ws.receive_json_from(timeout=5))["type"] == "error"
    await ws.send_json_to({"action": "publish", "topic": "workloads:mine"})
    assert (await ws.receive_json_from(timeout=5))["type"] == "error"

    assert await move(job, State.RUNNING)
    assert await ws.receive_nothing(timeout=0.5)
    await ws.disconnect()


@live_test
async def test_the_teacher_and_the_department_admin_follow_the_class(
    world: Any, job: Workload
) -> None:
    alice, dean = await connect(world.alice), await connect(world.dean)
    assert [i["id"] for i in (await subscribe(alice, "tenant:ml-101"))["items"]] == [str(job.pk)]
    assert (await subscribe(alice, f"workload:{job.pk}"))["type"] == "snapshot"
    assert (await subscribe(dean, "tenant:cs"))["items"][0]["id"] == str(job.pk)

    assert await move(job, State.RUNNING)
    first, second = await next_event(alice), await next_event(alice)
    assert {first["topic"], second["topic"]} == {"tenant:ml-101", f"workload:{job.pk}"}
    assert first["state"] == second["state"] == "Running"
    via_department = await next_event(dean)
    assert (via_department["topic"], via_department["id"]) == ("tenant:cs", str(job.pk))
    assert await alice.receive_nothing(timeout=0.2) and await dean.receive_nothing(timeout=0.1)
    await alice.disconnect()
    await dean.disconnect()


@live_test
async def test_a_move_made_on_a_plain_thread_arrives(world: Any, job: Workload) -> None:
    """The embedded mode's periodic tasks run on a thread of their own, outside any loop."""
    ws = await connect(world.bob)
    await subscribe(ws, "workloads:mine")
    thread = threading.Thread(target=lifecycle.transition, args=(job.pk, State.RUNNING))
    thread.start()
    event = await next_event(ws)
    await asyncio.to_thread(thread.join)
    assert (event["type"], event["state"]) == ("workload.state", "Running")
    await ws.disconnect()


@requires_redis
@live_test
async def test_a_connection_outlives_a_quiet_channel_layer(world: Any, job: Workload) -> None:
    ws = await connect(world.bob)
    await subscribe(ws, "workloads:mine")
    await asyncio.sleep(6.5)  # longer than one blocking read on Redis
    assert await move(job, State.RUNNING)
    assert (await next_event(ws))["state"] == "Running"
    await ws.disconnect()


# -- logs -------------------------------------------------------------------------------------


@live_test
async def test_logs_stream_new_output_until_unsubscribed(
    world: Any, job: Workload, backend: GrowingOutput
) -> None:
    topic = f"logs:{job.pk}:0"
    ws = await connect(world.bob)
    snapshot = await subscribe(ws, topic)
    assert (snapshot["type"], snapshot["text"], snapshot["offset"], snapshot["from"]) == (
        "snapshot",
        "epoch 0\n",
        8,
        0,
    )
    assert snapshot["items"][0]["state"] == "Starting"

    backend.output[0] += "epoch 1\nepoch 2\n"
    batch = await next_event(ws, within=2.0)
    assert batch == {
        "type": "logs",
        "topic": topic,
        "text": "epoch 1\nepoch 2\n",
        "offset": 24,
        "attempt": 0,
        "reset": False,
        "done": False,
    }
    await ws.disconnect()

    # A page back after a gap says how far it had read: it gets only what it missed.
    backend.output[0] += "epoch 3\n"
    ws = await connect(world.bob)
    again = await subscribe(ws, topic, offset=24, attempt=0)
    assert (again["text"], again["from"], again["offset"]) == ("epoch 3\n", 24, 32)

    await ws.send_json_to({"action": "unsubscribe", "topic": topic})
    assert (await subscribe(ws, f"logs:{job.pk}:1"))["type"] == "error"  # one task only
    backend.output[0] += "epoch 4\n"
    assert await ws.receive_nothing(timeout=0.4)
    await ws.disconnect()

    outsider = await connect(world.charlie)
    assert await subscribe(outsider, topic) == {**REFUSED, "topic": topic}
    await outsider.disconnect()


@live_test
async def test_a_restarted_job_starts_its_log_over(
    world: Any, job: Workload, backend: GrowingOutput
) -> None:
    ws = await connect(world.bob)
    await subscribe(ws, f"logs:{job.pk}:0")
    backend.restarted[0] = "attempt 2\n"
    restart = database_sync_to_async(lifecycle.transition)
    assert await restart(
        job.pk, State.STARTING, attempt=1, backend_state={"fake": True, "attempt": 1}
    )
    batch = await next_event(ws, within=2.0)
    assert (batch["text"], batch["offset"], batch["attempt"], batch["reset"]) == (
        "attempt 2\n",
        10,
        1,
        True,
    )
    await ws.disconnect()


@live_test
async def test_a_finished_job_sends_the_rest_of_its_log_and_done(
    world: Any, job: Workload, backend: GrowingOutput
) -> None:
    ws = await connect(world.alice)  # the teacher reads her student's output
    await subscribe(ws, f"logs:{job.pk}:0")
    backend.output[0] += "loss 0.1\n"
    assert await move(job, State.SUCCEEDED, "finished")
    texts = []
    while True:
        message = await next_event(ws, within=2.0)
        texts.append(message["text"])
        if message["done"]:
            break
    assert "".join(texts) == "loss 0.1\n"
    assert await ws.receive_nothing(timeout=0.2)  # the follower has stopped
    await ws.disconnect()


# -- inventory ----------------------------------------------------------------------------------


@live_test
async def test_the_cluster_inventory_is_for_managers_and_follows_allocations(
    world: Any, job: Workload, cluster: Cluster
) -> None:
    student = await connect(world.bob)
    assert await subscribe(student, "cluster:lab") == {**REFUSED, "topic": "cluster:lab"}
    await student.disconnect()

    await database_sync_to_async(Workload.objects.filter(pk=job.pk).update)(state=State.PENDING)
    ws = await connect(world.alice)
    snapshot = await subscribe(ws, "cluster:lab")
    [node] = snapshot["items"]
    assert (node["name"], node["allocated_cpu_milli"]) == ("gpu-host", 0)

    node_row = await database_sync_to_async(Node.objects.get)(name="gpu-host")
    await database_sync_to_async(Allocation.objects.create)(
        workload=job, node=node_row, cpu_milli=1000, memory_mib=1024
    )
    assert await move(job, State.STARTING, "starting on gpu-host")  # admitted: allocated
    event = await next_event(ws)
    assert (event["type"], event["topic"], event["cluster"]) == (
        "cluster.inventory",
        "cluster:lab",
        "lab",
    )
    assert event["items"][0]["allocated_cpu_milli"] == 1000
    assert await move(job, State.RUNNING)  # no allocation changed: no inventory event
    assert await ws.receive_nothing(timeout=0.3)
    await ws.disconnect()


# -- pages ----------------------------------------------------------------------------------------


def test_the_pages_declare_what_they_follow_and_no_longer_refresh(
    world: Any, job: Workload, backend: GrowingOutput, client: Client
) -> None:
    client.force_login(world.alice)  # her student's job: followed through the class
    listed = client.get("/workloads/").content.decode()
    assert 'http-equiv="refresh"' not in listed
    assert "js/live.js" in listed
    assert 'data-live-topic="workloads:mine"' in listed
    assert f'data-workload-id="{job.pk}"' in listed
    assert 'data-live-topic="tenant:ml-101"' in listed

    detail = client.get(f"/workloads/{job.pk}/").content.decode()
    assert 'http-equiv="refresh"' not in detail
    assert f'data-live-topic="workload:{job.pk}"' in detail
    assert f'data-live-logs="{job.pk}:0"' in detail
    assert 'data-role="stop"' in detail and 'data-role="timeline"' in detail
