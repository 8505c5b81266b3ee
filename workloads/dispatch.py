"""After each commit, the backend work its transitions call for, as Celery tasks.

Registered in ``WorkloadsConfig.ready`` as a lifecycle listener, so the code that changes a
workload never enqueues anything itself (and never imports the tasks):

- created in ``Pending``      → ``admit_soon``: a scheduling session over its cluster's line
  (coalesced: at most one pending per cluster);
- into ``Starting`` from the line, or a new attempt of a job → ``submit`` to the backend
  (not a backend's own in-place restart, nor a new reason while it starts);
- into ``Stopping``           → ``stop`` on the backend (re-sent by ``reconcile`` if lost).
"""

from __future__ import annotations

from collections.abc import Sequence

from workloads import tasks
from workloads.choices import WAITING, State
from workloads.lifecycle import Transition


def dispatch(transitions: Sequence[Transition]) -> None:
    admitting: set[int] = set()  # one session per cluster, however many launches
    for change in transitions:
        workload_id = str(change.workload.pk)
        if change.before == "" and change.after in WAITING:
            if change.workload.cluster_id not in admitting:
                admitting.add(change.workload.cluster_id)
                tasks.admit_soon(change.workload.cluster_id)
        elif change.after == State.STARTING and (
            change.before in WAITING or "attempt" in change.changed
        ):
            tasks.submit.delay(workload_id)
        elif change.after == State.STOPPING and change.before != State.STOPPING:
            tasks.stop.delay(workload_id)
