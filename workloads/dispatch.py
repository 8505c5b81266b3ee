"""After each commit, the backend work its transitions call for, as Celery tasks.

Registered in ``WorkloadsConfig.ready`` as a lifecycle listener, so the code that changes a
workload never enqueues anything itself (and never imports the tasks):

- created in ``Pending``      → ``admit_soon``: a scheduling session over its cluster's line
  (coalesced: at most one pending per cluster);
- into ``Starting`` from the line, or a new attempt of a job → ``submit`` to the backend
  (not a backend's own in-place restart, nor a new reason while it starts);
- into ``Stopping``           → ``stop`` on the backend (re-sent by ``reconcile`` if lost).

The commit has happened when this runs: a broker that is down or refuses a message must not
turn the request into an error. Such a task is logged and left to the sweeper (the periodic
reconcile admits what waits, hands over again what was admitted but never submitted, and
re-sends stops that were not confirmed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from celery import Task

from workloads import tasks
from workloads.choices import WAITING, State
from workloads.lifecycle import Transition

logger = logging.getLogger(__name__)


def dispatch(transitions: Sequence[Transition]) -> None:
    admitting: set[int] = set()  # one session per cluster, however many launches
    for change in transitions:
        if change.before == "" and change.after in WAITING:
            if change.workload.cluster_id not in admitting:  # one session per cluster
                admitting.add(change.workload.cluster_id)
                _enqueue(tasks.admit_soon, change.workload.cluster_id)
            continue
        task = task_for(change)
        if task is not None:
            _enqueue(task.delay, str(change.workload.pk))


def task_for(change: Transition) -> Task | None:
    """The backend task a committed transition calls for, if any (admission is per cluster,
    above)."""
    if change.after == State.STARTING and (change.before in WAITING or "attempt" in change.changed):
        return tasks.submit
    if change.after == State.STOPPING and change.before != State.STOPPING:
        return tasks.stop
    return None


def _enqueue(send: Callable[[Any], object], argument: Any) -> None:
    try:
        send(argument)
    except Exception as exc:  # kombu's errors vary by transport; none may reach the request
        logger.warning(
            "could not enqueue work for %s (%s): the periodic reconcile will pick it up",
            argument,
            exc,
            exc_info=True,  # in-process the work itself ran here: its traceback matters
        )
