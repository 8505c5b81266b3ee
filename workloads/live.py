"""Live status of workloads: the topics pages follow, the ``workload.state`` event, log
streaming, and the broadcast after each commit.

The topics (registered with ``core.live`` in ``WorkloadsConfig.ready``): ``workloads:mine``,
``workload:<uuid>``, ``logs:<uuid>:<task>`` and ``tenant:<slug>``; the protocol is described
in ``core/live.py``.

``lifecycle`` calls :func:`broadcast_transitions` after each commit (registered in
``WorkloadsConfig.ready``). The ``workload.state`` event goes to the owner's group, the
workload's group and the group of its tenant and of every tenant above it (a department's
admin follows the department); when the workload took or gave back its allocations, the
cluster's group gets the new inventory (``scheduling/live.py``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.utils import translation

from core import live
from scheduling.backends.base import Handle, LogChunk
from scheduling.backends.registry import get_backend
from scheduling.live import cluster_inventory
from scheduling.models import Cluster
from tenants.models import Tenant
from tenants.permissions import Access
from workloads.api.serializers import WorkloadSerializer
from workloads.choices import HOLDING, TERMINAL, State
from workloads.lifecycle import Transition
from workloads.models import Workload
from workloads.permissions import can_control
from workloads.reasons import render_for

logger = logging.getLogger(__name__)

SNAPSHOT_LIMIT = 200  # workloads in a list snapshot, as many as the list page shows
LOG_POLL_SECONDS = 0.5
LOG_READ_LIMIT = 64 * 1024  # bytes per backend call
LOG_BATCH_READS = 4  # calls per poll at most: a fast writer is followed at 512 KiB/s
LOG_SNAPSHOT_SCAN = 8 * 1024 * 1024  # bytes read through at most to find the end of a log
LOG_TAIL_CHARS = 64 * 1024  # what a snapshot shows of a long log: its end

STATE_EVENT = "workload.state"


# --- The workload.state event ----------------------------------------------------------------


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
    return {"type": STATE_EVENT, **WorkloadStateSerializer(workload).data}


def workload_states(workloads: Iterable[Workload]) -> list[dict[str, Any]]:
    return [workload_state(w) for w in workloads]


def labelled(language: str, item: dict[str, Any]) -> dict[str, Any]:
    """Add the state's name and the reason in the reader's language (the page shows
    those; ``reason`` itself stays English, as in the API)."""
    label = _state_label(language, item.get("state"))
    result = item if label is None else {**item, "state_label": label}
    if item.get("reason"):
        result = {**result, "reason_text": render_for(item, language)}
    return result


@functools.lru_cache(maxsize=64)
def _state_label(language: str, state: Any) -> str | None:
    try:
        label = State(state).label
    except ValueError:
        return None
    with translation.override(language):
        return str(label)


# --- Broadcast after commit ------------------------------------------------------------------


def broadcast_transitions(transitions: Sequence[Transition]) -> None:
    """One commit's transitions: each workload's newest state once, and each cluster whose
    allocations moved gets one inventory push, however many of its workloads moved."""
    ids = list(dict.fromkeys(t.workload.pk for t in transitions))
    current = {
        w.pk: w
        for w in Workload.objects.select_related("owner", "tenant", "template", "cluster").filter(
            pk__in=ids
        )
    }
    messages: list[tuple[str, dict[str, Any]]] = []
    for pk in ids:
        workload = current.get(pk)
        if workload is None:
            continue
        # The row as it is now: a later commit's event may overtake this one, and each
        # carries updated_at, so pages keep the newest.
        event = workload_state(workload)
        targets = [
            live.groups.user(workload.owner_id),
            live.groups.workload(workload.pk),
            *(live.groups.tenant(tenant_id) for tenant_id in workload.tenant.ancestor_ids),
        ]
        messages.extend((group, event) for group in targets)
    moved = {
        t.workload.cluster_id
        for t in transitions
        if (t.before in HOLDING) != (t.after in HOLDING)  # admitted, or ended
    }
    for cluster in {w.cluster for w in current.values() if w.cluster_id in moved}:
        messages.append((live.groups.cluster(cluster.pk), cluster_inventory(cluster)))
    live.publish(messages)


# --- Topics ----------------------------------------------------------------------------------


def _listed() -> Any:
    return Workload.objects.select_related("owner", "tenant", "template")


def _workload_id(value: str) -> str | None:
    """The id if ``value`` is a UUID in its canonical spelling (the one pages use)."""
    try:
        canonical = str(uuid.UUID(value))
    except ValueError:
        return None
    return canonical if canonical == value else None


def _controlled(user: Any, value: str) -> Workload | None:
    workload_id = _workload_id(value)
    workload = (
        Workload.objects.select_related("owner", "tenant", "template", "cluster")
        .filter(pk=workload_id)
        .first()
        if workload_id
        else None
    )
    if workload is None or not can_control(user, workload):
        return None
    return workload


def _authorize_mine(user: Any, match: re.Match[str]) -> live.Allowed:
    return live.Allowed(live.groups.user(user.pk), user)


def _authorize_workload(user: Any, match: re.Match[str]) -> live.Allowed | None:
    workload = _controlled(user, match["workload"])
    return None if workload is None else live.Allowed(live.groups.workload(workload.pk), workload)


def _authorize_logs(user: Any, match: re.Match[str]) -> live.Allowed | None:
    workload = _controlled(user, match["workload"])
    task = int(match["task"])
    if workload is None or task >= workload.workers:
        return None
    return live.Allowed(None, workload, task)


def _authorize_tenant(user: Any, match: re.Match[str]) -> live.Allowed | None:
    tenant = Tenant.objects.filter(slug=match["tenant"]).first()
    if tenant is None or not Access.of(user).can_manage(tenant):
        return None
    return live.Allowed(live.groups.tenant(tenant.pk), tenant)


def _snapshot_mine(allowed: live.Allowed) -> list[dict[str, Any]]:
    return workload_states(_listed().filter(owner=allowed.subject)[:SNAPSHOT_LIMIT])


def _snapshot_workload(allowed: live.Allowed) -> list[dict[str, Any]]:
    return workload_states(_listed().filter(pk=allowed.subject.pk))


def _snapshot_tenant(allowed: live.Allowed) -> list[dict[str, Any]]:
    tenant = allowed.subject
    return workload_states(_listed().filter(tenant__path__startswith=tenant.path)[:SNAPSHOT_LIMIT])


# --- Logs ------------------------------------------------------------------------------------


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


class LogFollower:
    """A job task's output: the end of it in the snapshot, then what is new, polled."""

    async def start(
        self, allowed: live.Allowed, request: dict[str, Any]
    ) -> tuple[dict[str, Any], tuple[int, int]]:
        """The log's end (or what a reconnecting page missed, when it says how far it had
        read of the same attempt); where to follow on from."""
        workload_id, task = allowed.subject.pk, allowed.detail
        source = await database_sync_to_async(log_source)(workload_id)
        attempt = source.attempt if source else 0
        offset = request.get("offset")
        if (
            not isinstance(offset, int)
            or isinstance(offset, bool)
            or offset < 0
            or request.get("attempt") != attempt
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
        more = {
            "text": text[-LOG_TAIL_CHARS:],
            "truncated": truncated,
            "offset": chunk.next_offset,
            "attempt": attempt,
            "tasks": chunk.tasks,
            "from": offset,
        }
        return more, (chunk.next_offset, attempt)

    async def follow(self, allowed: live.Allowed, start: tuple[int, int], send: live.Send) -> None:
        """Poll the task's output from ``start`` and push what is new, until unsubscribed
        (cancelled) or the workload has ended and everything is read."""
        workload_id, task = allowed.subject.pk, allowed.detail
        offset, attempt = start
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
                    await send(
                        {
                            "type": "logs",
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


# --- Registration ----------------------------------------------------------------------------

_UUID = r"(?P<workload>[0-9a-f-]{36})"


def register() -> None:
    """Offer the workload topics and the ``workload.state`` event (``WorkloadsConfig.ready``)."""
    live.register_event(STATE_EVENT, labelled)
    for topic in (
        live.Topic(
            "mine", re.compile(r"workloads:mine"), _authorize_mine, _snapshot_mine, STATE_EVENT
        ),
        live.Topic(
            "workload",
            re.compile(rf"workload:{_UUID}", re.ASCII),
            _authorize_workload,
            _snapshot_workload,
            STATE_EVENT,
        ),
        live.Topic(
            "logs",
            re.compile(rf"logs:{_UUID}:(?P<task>\d{{1,3}})", re.ASCII),
            _authorize_logs,
            _snapshot_workload,
            STATE_EVENT,
            follower=LogFollower(),
        ),
        live.Topic(
            "tenant",
            re.compile(r"tenant:(?P<tenant>[-\w]{1,64})", re.ASCII),
            _authorize_tenant,
            _snapshot_tenant,
            STATE_EVENT,
        ),
    ):
        live.register_topic(topic)
