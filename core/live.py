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
``open_url``, ``owner``, ``tenant``, ``updated_at``; pages keep the newest by ``updated_at``.
A logs snapshot carries the end of the output (``text``, ``truncated``) and where it stops
(``offset``, ``attempt``); a page that reconnects subscribes with that ``offset`` and
``attempt`` and gets only what it missed. ``logs`` batches follow (``reset`` when a restarted
job begins a new log, ``done`` once the job has ended and everything is sent).

Permission is checked once, at subscribe time, against fresh rows. A refused subscription gets
``{"type": "error", "topic": ..., "message": ...}`` with one message whether the thing does not
exist or is not the person's to see. Channel-layer group names are built here (:data:`groups`)
and nowhere else; events reach them after commit via :func:`publish`.

This module knows no app. Each app registers what it offers in its ``AppConfig.ready()``:

- its topics (:func:`register_topic`): a pattern, ``authorize`` (the user and the match in,
  an :class:`Allowed` or None out; runs on the database thread), ``snapshot`` (the items;
  database thread), the event type the items are (so they are labelled like that event), and
  optionally a :class:`Follower` that streams more (logs);
- its event types (:func:`register_event`), each with an optional labelling hook that adds
  what the reader's language needs (``state_label``, ``reason_text``).

The workload topics are ``workloads/live.py``'s, ``cluster:<slug>`` is ``scheduling/live.py``'s.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from asgiref.sync import async_to_sync
from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.contrib.auth import get_user_model

from core.language import reader_language
from core.metrics import LIVE_CONNECTIONS

logger = logging.getLogger(__name__)

REFUSED = "not found, or not yours to follow"  # one answer for "no such thing" and "not allowed"
MAX_TOPICS = 50  # per connection: a page follows a handful
MAX_LOG_FOLLOWERS = 4  # per connection: each polls the backend
MAX_MESSAGE_CHARS = 4096  # what the browser sends is a short command


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


# --- The registry ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Allowed:
    """A topic the user may follow: the group to join (none for logs), what it is about and
    anything else the topic named (a task number)."""

    group: str | None
    subject: Any
    detail: Any = None


Send = Callable[[dict[str, Any]], Awaitable[None]]


class Follower(Protocol):
    """Streams more of a topic than its events (a job's log): polled, per subscription."""

    async def start(self, allowed: Allowed, request: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """What to add to the snapshot (``request`` is the subscribe message: it may say how
        far a reconnecting page had read), and where to follow on from."""
        ...

    async def follow(self, allowed: Allowed, start: Any, send: Send) -> None:
        """Send what is new from ``start`` (``send`` adds the topic) until cancelled or done.
        Must not raise: the connection outlives it."""
        ...


@dataclass(frozen=True)
class Topic:
    kind: str  # "mine", "workload", "logs", "tenant", "cluster"
    pattern: re.Pattern[str]  # the whole topic must match
    authorize: Callable[[Any, re.Match[str]], Allowed | None]
    snapshot: Callable[[Allowed], list[dict[str, Any]]]
    items: str | None = None  # the event type a snapshot's items are labelled as
    follower: Follower | None = None


Label = Callable[[str, dict[str, Any]], dict[str, Any]]  # (language, item) -> item

_topics: dict[str, Topic] = {}
_events: dict[str, Label | None] = {}


def register_topic(topic: Topic) -> None:
    """Offer a topic kind (again: replaced). Call from ``AppConfig.ready()``."""
    _topics[topic.kind] = topic


def register_event(event_type: str, label: Label | None = None) -> None:
    """Forward events of ``event_type`` to the topics whose groups they reach, through
    ``label`` (the reader's language) if given. Call from ``AppConfig.ready()``."""
    _events[event_type] = label


def authorize(user_id: int, topic: str) -> tuple[Topic, Allowed] | None:
    """What ``topic`` is, if the user may follow it; None if it is unknown, gone or not
    theirs (the caller cannot tell which, and neither can the browser)."""
    matched = next(
        ((spec, m) for spec in _topics.values() if (m := spec.pattern.fullmatch(topic))), None
    )
    user = get_user_model().objects.filter(pk=user_id, is_active=True).first()
    if matched is None or user is None:
        return None
    spec, match = matched
    allowed = spec.authorize(user, match)
    return None if allowed is None else (spec, allowed)


def label(event_type: str | None, language: str, item: dict[str, Any]) -> dict[str, Any]:
    hook = _events.get(event_type) if event_type else None
    return item if hook is None else hook(language, item)


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


# --- The consumer ----------------------------------------------------------------------------


@dataclass
class Subscription:
    topic: Topic
    allowed: Allowed
    follower: asyncio.Task[None] | None = None


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """The one live-updates consumer: topics in, snapshots and typed events out."""

    subscriptions: dict[str, Subscription]
    topic_of_group: dict[str, str]
    counted = False  # in LIVE_CONNECTIONS: accepted, not yet disconnected

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close()  # before accept: the handshake is refused (HTTP 403)
            return
        global _server_loop
        _server_loop = asyncio.get_running_loop()
        self.user_id = user.pk
        self.language = reader_language(self.scope, user)
        self.subscriptions = {}
        self.topic_of_group = {}
        await self.accept()
        self.counted = True
        LIVE_CONNECTIONS.inc()

    async def dispatch(self, message: dict[str, Any]) -> None:
        """As Channels dispatches, without its ``aclose_old_connections()`` before every
        handler: that is a hop to the one thread that runs database code, per message, so
        one event to a thousand pages queued a thousand hops behind each other (most of the
        fan-out time in bench/fanout.md). This consumer reaches the database only through
        ``database_sync_to_async``, which closes stale connections itself.

        Registered event types (from the channel layer) are forwarded to the topic whose
        group they reached; the rest are the WebSocket's own messages."""
        if message["type"] in _events:
            await self._forward(label(message["type"], self.language, message))
            return
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def disconnect(self, code: int) -> None:
        if self.counted:
            self.counted = False
            LIVE_CONNECTIONS.dec()
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
        authorized = await database_sync_to_async(authorize)(self.user_id, topic)
        if authorized is None:
            await self._error(topic, REFUSED)
            return
        spec, allowed = authorized
        following = [t for t, s in self.subscriptions.items() if s.topic.follower is not None]
        if (
            spec.follower is not None
            and topic not in following
            and len(following) >= MAX_LOG_FOLLOWERS
        ):
            await self._error(topic, f"at most {MAX_LOG_FOLLOWERS} {spec.kind} per connection")
            return
        await self._unsubscribe(topic)  # subscribing again: a fresh snapshot, one follower
        if allowed.group is not None:
            await self.channel_layer.group_add(allowed.group, self.channel_name)
            self.topic_of_group[allowed.group] = topic
        subscription = self.subscriptions[topic] = Subscription(spec, allowed)
        # Read after joining the group: nothing falls in between.
        items = await database_sync_to_async(spec.snapshot)(allowed)
        message: dict[str, Any] = {
            "type": "snapshot",
            "topic": topic,
            "items": [label(spec.items, self.language, item) for item in items],
        }
        if spec.follower is not None:
            more, start = await spec.follower.start(allowed, content)
            message.update(more)
            subscription.follower = asyncio.create_task(
                spec.follower.follow(allowed, start, self._sender(topic))
            )
        await self.send_json(message)

    def _sender(self, topic: str) -> Send:
        async def send(message: dict[str, Any]) -> None:
            await self.send_json({"type": message["type"], "topic": topic, **message})

        return send

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

    async def _forward(self, event: dict[str, Any]) -> None:
        topic = self.topic_of_group.get(event.get("group", ""))
        if topic is None:  # unsubscribed while the event was on its way
            return
        message = {key: value for key, value in event.items() if key != "group"}
        message["topic"] = topic
        await self.send_json(message)
