"""Live updates: one WebSocket endpoint (``/ws/live/``) where pages subscribe to topics.

Protocol, JSON both ways. The browser sends ``{"action": "subscribe", "topic": ...}`` and
``{"action": "unsubscribe", "topic": ...}``; the server answers a subscription with a
``snapshot`` of the topic's current state (so a page that reconnects after a gap is in step
again), then pushes typed events as they happen:

=========================  =================================  ================================
topic                      who may subscribe                  events
=========================  =================================  ================================
``workloads:mine``         anyone signed in (their own)       ``workload.state``
``workload:<uuid>``        the owner and the class's staff    ``workload.state``
``logs:<uuid>:<task>``     the same                           ``logs`` (polled every 0.5 s)
``tenant:<slug>``          who manages the tenant             ``workload.state`` of its subtree
``cluster:<slug>``         managers and superusers            ``cluster.inventory``
=========================  =================================  ================================

A ``workload.state`` event (and each item of a workload snapshot) is the workload as the API
shows it: ``id``, ``state`` (plus ``state_label`` in the reader's language), ``reason``,
``reason_code``, ``reason_params`` (plus ``reason_text`` from those in the reader's language),
``open_url``, ``owner``, ``tenant``, ``updated_at``; pages keep the newest by ``updated_at``.
A logs snapshot carries the end of the output (``text``, ``truncated``) and where it stops
(``offset``, ``attempt``); a page that reconnects subscribes with that ``offset`` and
``attempt`` and gets only what it missed. ``logs`` batches follow (``reset`` when a restarted
job begins a new log, ``done`` once the job has ended and everything is sent).

Permission is checked once, at subscribe time, against fresh rows. A refused subscription gets
``{"type": "error", "topic": ..., "message": ...}`` with one message whether the thing does not
exist or is not the person's to see. Channel-layer group names are built here (:data:`groups`)
and nowhere else; events reach them from ``workloads/live.py`` after commit via
:func:`publish`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import translation
from django.utils.translation.trans_real import parse_accept_lang_header

from scheduling.api.serializers import NodeSerializer
from scheduling.api.views import NodeViewSet
from scheduling.backends.base import Handle, LogChunk
from scheduling.backends.registry import get_backend
from scheduling.models import Cluster
from tenants.models import Tenant
from tenants.permissions import Access
from workloads.api.serializers import WorkloadSerializer
from workloads.choices import TERMINAL, State
from workloads.models import Workload
from workloads.permissions import can_control
from workloads.reasons import render_for

logger = logging.getLogger(__name__)

REFUSED = "not found, or not yours to follow"  # one answer for "no such thing" and "not allowed"
MAX_TOPICS = 50  # per connection: a page follows a handful
MAX_LOG_FOLLOWERS = 4  # per connection: each polls the backend
MAX_MESSAGE_CHARS = 4096  # what the browser sends is a short command
SNAPSHOT_LIMIT = 200  # workloads in a list snapshot, as many as the list page shows
LOG_POLL_SECONDS = 0.5
LOG_READ_LIMIT = 64 * 1024  # bytes per backend call
LOG_BATCH_READS = 4  # calls per poll at most: a fast writer is followed at 512 KiB/s
LOG_SNAPSHOT_SCAN = 8 * 1024 * 1024  # bytes read through at most to find the end of a log
LOG_TAIL_CHARS = 64 * 1024  # what a snapshot shows of a long log: its end


# --- Group names -----------------------------------------------------------------------------


class Groups:
    """Channel-layer group names, one function per topic kind. Built from ids, never from
    slugs (a slug can be renamed while a page listens)."""

    @staticmethod
    def user(user_id: int) -> str:
        return f"live.user.{user_id}"

    @staticmethod
    def workload(workload_id: uuid.UUID | str) -> str:
        return f"live.workload.{workload_id}"

    @staticmethod
    def tenant(tenant_id: int) -> str:
        return f"live.tenant.{tenant_id}"

    @staticmethod
    def cluster(cluster_id: int) -> str:
        return f"live.cluster.{cluster_id}"


groups = Groups()


# --- Events ----------------------------------------------------------------------------------


class WorkloadStateSerializer(WorkloadSerializer):
    """A workload's state as the API shows it (``open_url`` and all), and no more."""

    class Meta(WorkloadSerializer.Meta):
        fields = [
            "id",
            "state",
            "reason",
            "reason_code",
            "reason_params",
            "open_url",
            "owner",
            "tenant",
            "updated_at",
        ]
        read_only_fields = fields


def workload_state(workload: Workload) -> dict[str, Any]:
    """The ``workload.state`` event of ``workload`` (select_related owner, tenant, template)."""
    return {"type": "workload.state", **WorkloadStateSerializer(workload).data}


def workload_states(workloads: Iterable[Workload]) -> list[dict[str, Any]]:
    return [workload_state(w) for w in workloads]


def cluster_inventory(cluster: Cluster) -> dict[str, Any]:
    """The ``cluster.inventory`` event: the cluster's nodes with what is allocated on them,
    exactly as the nodes API lists them."""
    nodes = NodeViewSet().get_queryset().filter(cluster=cluster)
    items = json.loads(json.dumps(NodeSerializer(nodes, many=True).data))  # plain dicts
    return {"type": "cluster.inventory", "cluster": cluster.slug, "items": items}


# --- Publishing (from synchronous code, after commit) ----------------------------------------

_server_loop: asyncio.AbstractEventLoop | None = None  # where the consumers run (in-memory layer)
_pending: set[Any] = set()  # sends handed to a loop, held until done


def publish(messages: Iterable[tuple[str, dict[str, Any]]]) -> None:
    """Send each ``(group, event)``; the event is told its group (``"group"``), so a consumer
    knows which of its topics it answers.

    With Redis this blocks until Redis has the messages. The in-memory layer's queues belong
    to the server's event loop, so from another thread (the embedded mode's periodic tasks)
    the sends are handed to that loop instead of a loop of our own.
    """
    batch = [(group, {**event, "group": group}) for group, event in messages]
    if not batch:
        return
    layer = get_channel_layer()
    if layer is None:
        return

    async def send_all() -> None:
        for group, event in batch:
            await layer.group_send(group, event)

    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    server = _server_loop
    if (
        isinstance(layer, InMemoryChannelLayer)
        and server is not None
        and server is not running
        and server.is_running()
    ):
        _keep(asyncio.run_coroutine_threadsafe(send_all(), server))
    elif running is not None:  # called on an event loop: never block it
        _keep(running.create_task(send_all()))
    else:
        async_to_sync(send_all)()


def _keep(future: Any) -> None:
    """Hold a fire-and-forget send (a task or a concurrent future) until it is done; log a
    failure, which nobody else would see."""
    _pending.add(future)

    def done(finished: Any) -> None:
        _pending.discard(finished)
        if not finished.cancelled() and finished.exception() is not None:
            logger.error("live: publishing failed", exc_info=finished.exception())

    future.add_done_callback(done)


# --- Topics ----------------------------------------------------------------------------------

_TOPIC = re.compile(
    r"^(?:(?P<mine>workloads:mine)"
    r"|workload:(?P<workload>[0-9a-f-]{36})"
    r"|logs:(?P<logs>[0-9a-f-]{36}):(?P<task>\d{1,3})"
    r"|tenant:(?P<tenant>[-\w]{1,64})"
    r"|cluster:(?P<cluster>[-\w]{1,64}))$",
    re.ASCII,
)


@dataclass(frozen=True)
class AllowedTopic:
    """A topic the user may follow: the group to join (none for logs) and what it is about."""

    topic: str
    kind: str  # "mine", "workload", "logs", "tenant", "cluster"
    group: str | None
    subject: Any  # the user, workload, tenant or cluster
    task: int = 0


def _workload_id(value: str) -> str | None:
    """The id if ``value`` is a UUID in its canonical spelling (the one pages use)."""
    try:
        canonical = str(uuid.UUID(value))
    except ValueError:
        return None
    return canonical if canonical == value else None


def authorize(user_id: int, topic: str) -> AllowedTopic | None:
    """What ``topic`` is, if the user may follow it; None if it is unknown, gone or not
    theirs (the caller cannot tell which, and neither can the browser)."""
    match = _TOPIC.match(topic)
    user = get_user_model().objects.filter(pk=user_id, is_active=True).first()
    if match is None or user is None:
        return None
    if match["mine"]:
        return AllowedTopic(topic, "mine", groups.user(user.pk), user)
    if match["workload"] or match["logs"]:
        workload_id = _workload_id(match["workload"] or match["logs"])
        workload = (
            Workload.objects.select_related("owner", "tenant", "template", "cluster")
            .filter(pk=workload_id)
            .first()
            if workload_id
            else None
        )
        if workload is None or not can_control(user, workload):
            return None
        if match["workload"]:
            return AllowedTopic(topic, "workload", groups.workload(workload.pk), workload)
        task = int(match["task"])
        if task >= workload.workers:
            return None
        return AllowedTopic(topic, "logs", None, workload, task)
    if match["tenant"]:
        tenant = Tenant.objects.filter(slug=match["tenant"]).first()
        if tenant is None or not Access.of(user).can_manage(tenant):
            return None
        return AllowedTopic(topic, "tenant", groups.tenant(tenant.pk), tenant)
    cluster = Cluster.objects.filter(slug=match["cluster"]).first()
    if cluster is None or not Access.of(user).manages_anything():
        return None
    return AllowedTopic(topic, "cluster", groups.cluster(cluster.pk), cluster)


def snapshot(allowed: AllowedTopic) -> dict[str, Any]:
    """The topic's current state, read after joining its group (nothing falls in between)."""
    listed = Workload.objects.select_related("owner", "tenant", "template")
    subject = allowed.subject
    if allowed.kind == "mine":
        items = workload_states(listed.filter(owner=subject)[:SNAPSHOT_LIMIT])
    elif allowed.kind in ("workload", "logs"):
        items = workload_states(listed.filter(pk=subject.pk))
    elif allowed.kind == "tenant":
        items = workload_states(
            listed.filter(tenant__path__startswith=subject.path)[:SNAPSHOT_LIMIT]
        )
    else:
        items = cluster_inventory(subject)["items"]
    return {"type": "snapshot", "topic": allowed.topic, "items": items}


@dataclass(frozen=True)
class LogSource:
    """Where a job's task output is read from now (the handle changes with each attempt)."""

    cluster: Cluster
    backend_state: dict[str, Any]
    attempt: int
    finished: bool


def log_source(workload_id: uuid.UUID) -> LogSource | None:
    row = Workload.objects.select_related("cluster").filter(pk=workload_id).first()
    if row is None:
        return None
    return LogSource(row.cluster, dict(row.backend_state or {}), row.attempt, row.state in TERMINAL)


def read_logs(
    source: LogSource, workload_id: uuid.UUID, task: int, offset: int, budget: int
) -> LogChunk:
    """Read on from ``offset`` to the end of what is written, or ``budget`` bytes. Blocking
    (a file, or the cluster's API): call it off the event loop."""
    if not source.backend_state:  # not handed to its backend yet: no output
        return LogChunk("", offset, 0)
    backend = get_backend(source.cluster)
    handle = Handle(str(workload_id), source.backend_state)
    parts: list[str] = []
    start, tasks = offset, 0
    while offset - start < budget:
        chunk = backend.logs(handle, task, offset, LOG_READ_LIMIT)
        tasks = chunk.tasks
        if chunk.next_offset <= offset:
            break
        parts.append(chunk.text)
        offset = chunk.next_offset
    return LogChunk("".join(parts), offset, tasks)


# --- The consumer ----------------------------------------------------------------------------


@dataclass
class Subscription:
    allowed: AllowedTopic
    follower: asyncio.Task[None] | None = None


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """The one live-updates consumer: topics in, snapshots and typed events out."""

    subscriptions: dict[str, Subscription]
    topic_of_group: dict[str, str]

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close()  # before accept: the handshake is refused (HTTP 403)
            return
        global _server_loop
        _server_loop = asyncio.get_running_loop()
        self.user_id = user.pk
        self.language = _language(self.scope, user)
        self.subscriptions = {}
        self.topic_of_group = {}
        await self.accept()

    async def dispatch(self, message: dict[str, Any]) -> None:
        """As Channels dispatches, without its ``aclose_old_connections()`` before every
        handler: that is a hop to the one thread that runs database code, per message, so
        one event to a thousand pages queued a thousand hops behind each other (most of the
        fan-out time in bench/fanout.md). This consumer reaches the database only through
        ``database_sync_to_async``, which closes stale connections itself."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def disconnect(self, code: int) -> None:
        for topic in list(getattr(self, "subscriptions", {})):
            await self._unsubscribe(topic)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            if text_data is None or len(text_data) > MAX_MESSAGE_CHARS:
                raise ValueError("too long")
            content = json.loads(text_data)
            action, topic = content.get("action"), content.get("topic")
        except (ValueError, AttributeError):
            await self._error(None, 'send JSON: {"action": "subscribe", "topic": ...}')
            return
        if not isinstance(topic, str) or action not in ("subscribe", "unsubscribe"):
            await self._error(topic if isinstance(topic, str) else None, "unknown action")
        elif action == "unsubscribe":
            await self._unsubscribe(topic)
        else:
            await self._subscribe(topic, content)

    async def _subscribe(self, topic: str, content: dict[str, Any]) -> None:
        if topic not in self.subscriptions and len(self.subscriptions) >= MAX_TOPICS:
            await self._error(topic, f"at most {MAX_TOPICS} topics per connection")
            return
        allowed = await database_sync_to_async(authorize)(self.user_id, topic)
        if allowed is None:
            await self._error(topic, REFUSED)
            return
        following = [t for t, s in self.subscriptions.items() if s.allowed.kind == "logs"]
        if (
            allowed.kind == "logs"
            and topic not in following
            and len(following) >= MAX_LOG_FOLLOWERS
        ):
            await self._error(topic, f"at most {MAX_LOG_FOLLOWERS} logs per connection")
            return
        await self._unsubscribe(topic)  # subscribing again: a fresh snapshot, one follower
        if allowed.group is not None:
            await self.channel_layer.group_add(allowed.group, self.channel_name)
            self.topic_of_group[allowed.group] = topic
        subscription = self.subscriptions[topic] = Subscription(allowed)
        message = await database_sync_to_async(snapshot)(allowed)
        message["items"] = [self._labelled(item) for item in message["items"]]
        if allowed.kind == "logs":
            offset, attempt = await self._log_snapshot(allowed, content, message)
            subscription.follower = asyncio.create_task(self._follow(allowed, offset, attempt))
        await self.send_json(message)

    async def _unsubscribe(self, topic: str) -> None:
        subscription = self.subscriptions.pop(topic, None)
        if subscription is None:
            return
        if subscription.follower is not None:
            subscription.follower.cancel()
        group = subscription.allowed.group
        if group is not None:
            self.topic_of_group.pop(group, None)
            await self.channel_layer.group_discard(group, self.channel_name)

    async def _error(self, topic: str | None, message: str) -> None:
        await self.send_json({"type": "error", "topic": topic, "message": message})

    # -- events from the channel layer (handler names follow the event types) -----------------

    async def workload_state(self, event: dict[str, Any]) -> None:
        await self._forward(self._labelled(event))

    async def cluster_inventory(self, event: dict[str, Any]) -> None:
        await self._forward(event)

    async def _forward(self, event: dict[str, Any]) -> None:
        topic = self.topic_of_group.get(event.get("group", ""))
        if topic is None:  # unsubscribed while the event was on its way
            return
        message = {key: value for key, value in event.items() if key != "group"}
        message["topic"] = topic
        await self.send_json(message)

    def _labelled(self, item: dict[str, Any]) -> dict[str, Any]:
        """Add the state's name and the reason in the reader's language (the page shows
        those; ``reason`` itself stays English, as in the API)."""
        label = _state_label(self.language, item.get("state"))
        labelled = item if label is None else {**item, "state_label": label}
        if item.get("reason"):
            labelled = {**labelled, "reason_text": render_for(item, self.language)}
        return labelled

    # -- logs ---------------------------------------------------------------------------------

    async def _log_snapshot(
        self, allowed: AllowedTopic, content: dict[str, Any], message: dict[str, Any]
    ) -> tuple[int, int]:
        """Fill the snapshot with the log's end (or what a reconnecting page missed, when it
        says how far it had read of the same attempt); where to follow on from."""
        workload_id, task = allowed.subject.pk, allowed.task
        source = await database_sync_to_async(log_source)(workload_id)
        attempt = source.attempt if source else 0
        offset = content.get("offset")
        if (
            not isinstance(offset, int)
            or isinstance(offset, bool)
            or offset < 0
            or content.get("attempt") != attempt
        ):
            offset = 0
        chunk = LogChunk("", offset, 0)
        if source is not None:
            try:
                chunk = await sync_to_async(read_logs, thread_sensitive=False)(
                    source, workload_id, task, offset, LOG_SNAPSHOT_SCAN
                )
            except Exception:
                logger.warning("live: reading logs of %s failed", workload_id, exc_info=True)
        text = chunk.text
        truncated = len(text) > LOG_TAIL_CHARS
        message.update(
            text=text[-LOG_TAIL_CHARS:],
            truncated=truncated,
            offset=chunk.next_offset,
            attempt=attempt,
            tasks=chunk.tasks,
            **{"from": offset},
        )
        return chunk.next_offset, attempt

    async def _follow(self, allowed: AllowedTopic, offset: int, attempt: int) -> None:
        """Poll the task's output from ``offset`` and push what is new, until unsubscribed
        (cancelled) or the workload has ended and everything is read."""
        workload_id, task, topic = allowed.subject.pk, allowed.task, allowed.topic
        try:
            while True:
                await asyncio.sleep(LOG_POLL_SECONDS)
                source = await database_sync_to_async(log_source)(workload_id)
                if source is None:
                    return
                reset = source.attempt != attempt
                if reset:  # a restarted job writes a new log
                    offset, attempt = 0, source.attempt
                try:
                    chunk = await sync_to_async(read_logs, thread_sensitive=False)(
                        source, workload_id, task, offset, LOG_READ_LIMIT * LOG_BATCH_READS
                    )
                except Exception:
                    logger.warning("live: reading logs of %s failed", workload_id, exc_info=True)
                    await asyncio.sleep(5 * LOG_POLL_SECONDS)
                    continue
                offset = chunk.next_offset
                done = source.finished and not chunk.text
                if chunk.text or reset or done:
                    await self.send_json(
                        {
                            "type": "logs",
                            "topic": topic,
                            "text": chunk.text,
                            "offset": offset,
                            "attempt": attempt,
                            "reset": reset,
                            "done": done,
                        }
                    )
                if done:
                    return
        except Exception:  # a follower must never take the connection down
            logger.exception("live: following logs of %s failed", workload_id)


@functools.lru_cache(maxsize=64)
def _state_label(language: str, state: Any) -> str | None:
    try:
        label = State(state).label
    except ValueError:
        return None
    with translation.override(language):
        return str(label)


def _language(scope: dict[str, Any], user: Any) -> str:
    """The reader's language, as the pages choose it: their setting, the language cookie,
    then the browser's Accept-Language."""
    candidates = [getattr(user, "language", "") or ""]
    candidates.append(scope.get("cookies", {}).get(settings.LANGUAGE_COOKIE_NAME, ""))
    accept = dict(scope.get("headers", [])).get(b"accept-language", b"").decode("latin-1")
    candidates += [code for code, _quality in parse_accept_lang_header(accept[:255])]
    for code in candidates:
        if code and code != "*":
            try:
                return translation.get_supported_language_variant(code)
            except LookupError:
                continue
    return settings.LANGUAGE_CODE
