"""A backend whose cluster the test controls: it records calls and reports the phases the
test sets, so lifecycle logic can be checked without real processes."""

from __future__ import annotations

from collections.abc import Sequence

from core.reasons import Reason
from scheduling.backends.base import (
    BackendError,
    Endpoint,
    Handle,
    LogChunk,
    NodeInfo,
    Observation,
    Phase,
    WorkloadSpec,
)
from scheduling.backends.local import APPS as LOCAL_APPS


class FakeBackend:
    kind = "fake"
    apps: frozenset[str] | None = LOCAL_APPS  # it stands in for this host's backend

    def __init__(self) -> None:
        self.specs: dict[str, WorkloadSpec] = {}
        self.submits: list[tuple[str, int]] = []
        self.stops: list[str] = []
        self.phases: dict[str, Observation] = {}
        self.fail_submit: BackendError | None = None
        self.orphans: set[str] = set()
        self.node_list: tuple[NodeInfo, ...] = ()

    # --- test controls ---------------------------------------------------------------------

    def set(
        self, workload_id: object, phase: Phase, reason: Reason | str = "", **extra: object
    ) -> None:
        """``reason``: a Reason, or words from outside (a str, as code ``text``)."""
        key = str(workload_id)
        why = Reason.from_json(reason) if reason else None
        self.phases[key] = Observation(key, phase, why, **extra)  # type: ignore[arg-type]

    # --- the contract ----------------------------------------------------------------------

    def submit(self, spec: WorkloadSpec) -> Handle:
        if self.fail_submit is not None:
            raise self.fail_submit
        if (spec.workload_id, spec.attempt) not in self.submits:
            self.submits.append((spec.workload_id, spec.attempt))
            self.set(spec.workload_id, Phase.STARTING, attempt=spec.attempt)
        self.specs[spec.workload_id] = spec
        return Handle(spec.workload_id, {"attempt": spec.attempt, "fake": True})

    def stop(self, handle: Handle) -> None:
        self.stops.append(handle.workload_id)
        if handle.workload_id in self.phases:
            self.set(handle.workload_id, Phase.STOPPED)
        self.orphans.discard(handle.workload_id)

    def observe(self, handles: Sequence[Handle]) -> dict[str, Observation]:
        return {
            h.workload_id: self.phases.get(h.workload_id, Observation(h.workload_id, Phase.UNKNOWN))
            for h in handles
        }

    def endpoint(self, handle: Handle) -> Endpoint | None:
        return Endpoint("http://127.0.0.1:9/", {"Authorization": "token fake"})

    def logs(self, handle: Handle, task: int = 0, offset: int = 0, limit: int = 65536) -> LogChunk:
        text = f"log of task {task}\n"[offset:]
        return LogChunk(text, offset + len(text), 1)

    def nodes(self) -> tuple[NodeInfo, ...]:
        return self.node_list

    def running(self) -> set[str]:
        live = {k for k, o in self.phases.items() if o.phase in (Phase.STARTING, Phase.RUNNING)}
        return live | self.orphans
