"""The one way a workload changes state.

``transition`` moves a workload only from the states that may lead to the target
(``choices.TRANSITIONS``) with a conditional UPDATE, so a duplicate delivery, a late backend
message or two workers racing change it once. Each move writes an event row with time, actor
and reason. Entering a terminal state gives back the quota and the allocations in the same
transaction; listeners (live status, metering) are told after commit.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.utils import timezone

from core.reasons import Reason
from scheduling.models import Allocation
from tenants import services as tenant_services
from workloads.choices import TERMINAL, TRANSITIONS, State
from workloads.models import Workload, WorkloadEvent
from workloads.reasons import stored
from workloads.specs import charged_request

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Transition:
    """One committed state change, as listeners are told of it."""

    workload: Workload
    before: str  # "" when the workload was just created (``created``)
    after: str
    changed: frozenset[str] = frozenset()  # other fields saved with it ("attempt", …)


Listener = Callable[[Sequence[Transition]], None]

# Called once per commit with that commit's transitions, in order; live status, task
# dispatch and metering subscribe (in their AppConfig.ready).
_listeners: list[Listener] = []


def on_transitions(listener: Listener) -> None:
    if listener not in _listeners:
        _listeners.append(listener)


def transition(
    workload: Workload | Any,
    to: str,
    *,
    actor: Any = None,
    reason: Reason | str | None = "",
    **fields: Any,
) -> bool:
    """Move ``workload`` to ``to`` if its current state allows; True if it moved.

    ``fields`` are saved with the move (``exit_code``, ``backend_state``, …). Moving a
    workload to the state it is already in only updates the reason (a queued workload's
    reason changes as the cause of waiting does), without an event when nothing changed.
    ``reason`` (``workloads.reasons``; a plain str is stored as code ``text``; None or "": no
    reason) is stored as its code, its parameters and its English text.
    """
    code, params, text = stored(reason)
    allowed = TRANSITIONS[to]
    now = timezone.now()
    pk = workload.pk if isinstance(workload, Workload) else workload
    with transaction.atomic():
        current = Workload.objects.select_for_update().get(pk=pk)
        before = current.state
        if before not in allowed:
            logger.info("workload %s: %s → %s refused (from %s)", pk, before, to, before)
            return False
        same = (current.reason_code, current.reason_params, current.reason) == (code, params, text)
        if before == to and same and not fields:
            return False
        updates: dict[str, Any] = {
            "state": to,
            "reason": text,
            "reason_code": code,
            "reason_params": params,
            "updated_at": now,
            **fields,
        }
        if to == State.RUNNING and current.started_at is None:
            updates["started_at"] = now
        if to in TERMINAL:
            updates["finished_at"] = now
        moved = Workload.objects.filter(pk=pk, state=before).update(**updates)
        if not moved:
            return False
        for name, value in updates.items():
            setattr(current, name, value)
        if before != to:
            WorkloadEvent.objects.create(
                workload=current,
                from_state=before,
                to_state=to,
                actor=actor if getattr(actor, "pk", None) else None,
                reason=text,
                reason_code=code,
                reason_params=params,
            )
        if to in TERMINAL:
            _give_back(current)
        if isinstance(workload, Workload):
            for name, value in updates.items():
                setattr(workload, name, value)
        _announce(Transition(current, before, to, frozenset(fields)))
    return True


ROWS_PER_STATEMENT = 500


def queue_all(items: Sequence[tuple[Workload, Reason | str]]) -> int:
    """``transition(workload, Queued, reason=reason)`` for many waiting workloads at once (an
    admission session's line), in a few statements: the rows still waiting locked together,
    one UPDATE per distinct reason, the events in one INSERT. A workload already Queued with
    that reason is not written, one no longer waiting is left as it is; listeners hear of
    each move as from ``transition``. How many moved."""
    wanted = {w.pk: (w, stored(reason)) for w, reason in items}
    allowed = TRANSITIONS[State.QUEUED]
    now = timezone.now()
    moved = 0
    keys = list(wanted)
    with transaction.atomic():
        for start in range(0, len(keys), ROWS_PER_STATEMENT):
            rows = (
                Workload.objects.select_for_update()
                .filter(pk__in=keys[start : start + ROWS_PER_STATEMENT], state__in=allowed)
                .values_list("pk", "state", "reason_code", "reason_params", "reason")
            )
            groups: dict[tuple[str, str, str, str], list[Any]] = defaultdict(list)
            for pk, before, code, params, text in rows:
                _workload, (to_code, to_params, to_text) = wanted[pk]
                if before == State.QUEUED and (code, params, text) == (to_code, to_params, to_text):
                    continue
                key = (before, to_code, json.dumps(to_params, sort_keys=True), to_text)
                groups[key].append(pk)
            events = []
            for (before, code, params_json, text), pks in groups.items():
                updates = {
                    "state": State.QUEUED,
                    "reason": text,
                    "reason_code": code,
                    "reason_params": json.loads(params_json),
                    "updated_at": now,
                }
                Workload.objects.filter(pk__in=pks, state=before).update(**updates)
                for pk in pks:
                    workload = wanted[pk][0]
                    for name, value in updates.items():
                        setattr(workload, name, value)
                    if before != State.QUEUED:
                        events.append(
                            WorkloadEvent(
                                workload=workload,
                                from_state=before,
                                to_state=State.QUEUED,
                                reason=text,
                                reason_code=code,
                                reason_params=updates["reason_params"],
                            )
                        )
                    _announce(Transition(workload, before, State.QUEUED))
                moved += len(pks)
            WorkloadEvent.objects.bulk_create(events)
    return moved


def created(workload: Workload, *, actor: Any = None, reason: Reason | str = "") -> None:
    """Announce a workload just created in ``Pending`` (listeners admit it after commit),
    with the first event of its timeline."""
    note(workload, reason, actor=actor)
    _announce(Transition(workload, "", workload.state))


def note(workload: Workload, reason: Reason | str, *, actor: Any = None) -> WorkloadEvent:
    """An event without a state change (an idle warning, an extension)."""
    code, params, text = stored(reason)
    return WorkloadEvent.objects.create(
        workload=workload,
        from_state=workload.state,
        to_state=workload.state,
        reason=text,
        reason_code=code,
        reason_params=params,
        actor=actor if getattr(actor, "pk", None) else None,
    )


def _give_back(workload: Workload) -> None:
    """Release the quota charged at admission and the allocations, exactly once."""
    Allocation.objects.filter(workload=workload).delete()
    if not Workload.objects.filter(pk=workload.pk, charged=True).update(charged=False):
        return
    workload.charged = False
    request = charged_request(workload.quota_request)
    gpu_hours = Decimal(0)
    if workload.started_at and request.gpus:
        seconds = Decimal((timezone.now() - workload.started_at).total_seconds())
        gpu_hours = request.gpus * seconds / 3600
    tenant_services.release(
        tenant=workload.tenant, user=workload.owner, request=request, gpu_hours=gpu_hours
    )


class _Batch:
    """The transitions of one transaction, told to the listeners once it commits.

    One on_commit hook per batch, registered at the batch's first transition; the later
    transitions of the same transaction join it while it is still the newest hook (so the
    listeners hear of changes in the order they and any other hook were registered). A
    transition inside a savepoint that is rolled back may still be told: listeners read the
    rows again, and act on what they find.
    """

    def __init__(self) -> None:
        self.transitions: list[Transition] = []
        self.delivered = False

    def __call__(self) -> None:
        self.delivered = True  # what comes after belongs to the next batch
        _deliver(self.transitions)


def _announce(change: Transition) -> None:
    connection = transaction.get_connection()
    if not connection.in_atomic_block:
        _deliver([change])
        return
    batch: _Batch | None = getattr(connection, "_quanta_transitions", None)
    hooks = connection.run_on_commit
    if batch is None or batch.delivered or not hooks or hooks[-1][1] is not batch:
        batch = _Batch()
        connection._quanta_transitions = batch
        transaction.on_commit(batch)
    batch.transitions.append(change)


def _deliver(transitions: Sequence[Transition]) -> None:
    if not transitions:
        return
    for listener in list(_listeners):
        try:
            listener(transitions)
        except Exception:  # a broken listener must not break the lifecycle
            logger.exception("transition listener %r failed", listener)
