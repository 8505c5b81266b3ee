"""Live status: list + watch of Quanta's Volcano Jobs, PodGroups, pods and Deployments.

One reflector thread per kind lists (to get a consistent snapshot and its resourceVersion),
then watches from that version. A watch the server ends is resumed from the last version seen;
a ``410 Gone`` (the version was compacted away while disconnected) makes the reflector list
again, and the re-list replaces the cache for that kind, so a transition that happened while
nobody watched is still seen: as the new state of the object. Broken connections are retried
with backoff, at most ``max_reconnects`` times in a row; then the watcher gives up with a
transient error and its caller (a Celery task) starts a new one later.

The main thread owns the cache and calls ``on_change`` with an Observation whenever what the
portal would show for a workload changes. Nothing is emitted before every kind has been listed
once, so a Job is never judged without its pods.
"""

from __future__ import annotations

import datetime as dt
import logging
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import watch

from scheduling import reasons as R
from scheduling.backends.base import BackendError, Observation, Phase
from scheduling.backends.kubernetes import client as k
from scheduling.backends.kubernetes import names, status
from scheduling.backends.kubernetes.config import KubernetesConfig

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name)
WATCHED = (k.VOLCANO_JOB, k.PODGROUP, k.POD, k.DEPLOYMENT)
SHORT_WATCH = 1.0  # seconds: a watch that ends sooner without an event counts as a failure


@dataclass
class WatchStats:
    lists: int = 0
    events: int = 0
    reconnects: int = 0
    expired: int = 0  # 410 Gone: re-listed
    emitted: int = 0


class _Reflector(threading.Thread):
    """Lists then watches one kind, putting what it sees on the shared queue."""

    def __init__(
        self,
        kube: k.Kube,
        kind: k.Kind,
        settings: KubernetesConfig,
        out: queue.Queue[tuple[Any, ...]],
        stop: threading.Event,
        deadline: float,
    ) -> None:
        super().__init__(name=f"quanta-watch-{kind.plural}", daemon=True)
        self.kube = kube
        self.kind = kind
        self.settings = settings
        self.out = out
        self.stop_event = stop
        self.deadline = deadline
        self.stream: watch.Watch | None = None

    def run(self) -> None:
        version = ""
        failures = 0
        while not self.stop_event.is_set():
            started = time.monotonic()
            seen = 0
            try:
                if not version:
                    items, version = self.kube.list(
                        self.kind, label_selector=names.MANAGED_SELECTOR
                    )
                    self.out.put(("sync", self.kind, items))
                    failures = 0
                remaining = self.deadline - time.monotonic()
                if remaining <= 0:
                    return
                self.stream = watch.Watch(return_type="object")  # type: ignore[no-untyped-call]
                timeout = max(1, int(min(remaining, self.settings.watch_timeout_seconds)))
                for event in self.kube.watch(
                    self.kind,
                    resource_version=version,
                    label_selector=names.MANAGED_SELECTOR,
                    timeout_seconds=timeout,
                    stream=self.stream,
                ):
                    if self.stop_event.is_set():
                        return
                    seen += 1
                    failures = 0
                    obj = event["object"]
                    version = str(obj.get("metadata", {}).get("resourceVersion") or version)
                    if event["type"] != "BOOKMARK":
                        self.out.put(("event", self.kind, event["type"], obj))
                if seen or time.monotonic() - started >= SHORT_WATCH:
                    continue  # the server ended the watch on time: resume from ``version``
                error: BackendError = BackendError("the watch ended at once", transient=True)
            except k.Gone:
                self.out.put(("expired", self.kind))
                version = ""
                continue
            except BackendError as exc:
                error = exc
            if self.stop_event.is_set():
                return
            if not error.transient:
                self.out.put(("error", self.kind, error))
                return
            failures += 1
            if failures > self.settings.max_reconnects:
                self.out.put(("error", self.kind, error))
                return
            self.out.put(("reconnect", self.kind, error))
            delay = min(
                self.settings.backoff_seconds * 2 ** (failures - 1),
                self.settings.max_backoff_seconds,
            )
            self.stop_event.wait(delay)

    def interrupt(self) -> None:
        if self.stream is not None:
            self.stream.stop()  # type: ignore[no-untyped-call]


class Watcher:
    """The cache of one cluster's Quanta objects and the observations derived from it."""

    def __init__(
        self,
        kube: k.Kube,
        settings: KubernetesConfig,
        on_change: Callable[[Observation], None],
        *,
        now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.on_change = on_change
        self.now = now
        # InferenceServices only where the cluster has KServe (elsewhere the watch would 404).
        self.kinds = WATCHED + ((k.INFERENCE_SERVICE,) if settings.serving == "kserve" else ())
        self.objects: dict[k.Kind, dict[Key, Obj]] = {kind: {} for kind in self.kinds}
        self.index: dict[k.Kind, dict[str, set[Key]]] = {
            kind: defaultdict(set) for kind in self.kinds
        }
        self.last_failure: dict[str, status.PodProblem] = {}
        self.emitted: dict[str, Observation] = {}
        self.stats = WatchStats()

    def run(self, seconds: float, stop: threading.Event | None = None) -> WatchStats:
        """Watch for ``seconds`` (or until ``stop`` is set). Raises a transient BackendError
        when a kind cannot be watched any more (after its bounded reconnects)."""
        stop = stop or threading.Event()
        events: queue.Queue[tuple[Any, ...]] = queue.Queue()
        deadline = time.monotonic() + seconds
        halt = threading.Event()
        reflectors = [
            _Reflector(self.kube, kind, self.settings, events, halt, deadline)
            for kind in self.kinds
        ]
        for reflector in reflectors:
            reflector.start()
        synced: set[k.Kind] = set()
        pending: set[str] = set()
        try:
            while not stop.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    item = events.get(timeout=min(remaining, 0.2))
                except queue.Empty:
                    continue
                pending |= self._take(item, synced)
                # Drain what else is queued before deciding: one decision per burst.
                while not events.empty():
                    pending |= self._take(events.get_nowait(), synced)
                if len(synced) == len(self.kinds) and pending:
                    self._emit(pending)
                    pending = set()
        finally:
            halt.set()
            for reflector in reflectors:
                reflector.interrupt()
            for reflector in reflectors:
                reflector.join(timeout=2)
        return self.stats

    # -- the cache -------------------------------------------------------------------------------

    def _take(self, item: tuple[Any, ...], synced: set[k.Kind]) -> set[str]:
        what, kind = item[0], item[1]
        if what == "sync":
            self.stats.lists += 1
            synced.add(kind)
            return self._replace(kind, item[2])
        if what == "event":
            self.stats.events += 1
            return self._apply(kind, item[2], item[3])
        if what == "expired":
            self.stats.expired += 1
        elif what == "reconnect":
            self.stats.reconnects += 1
            log.info("watch of %s reconnecting: %s", kind.plural, item[2])
        elif what == "error":
            raise BackendError(
                f"stopped watching {kind.plural}: {item[2]}", transient=True
            ) from item[2]
        return set()

    def _replace(self, kind: k.Kind, items: list[Obj]) -> set[str]:
        touched = set(self.index[kind])
        self.objects[kind] = {}
        self.index[kind] = defaultdict(set)
        for obj in items:
            touched |= self._apply(kind, "ADDED", obj)
        return touched

    def _apply(self, kind: k.Kind, event: str, obj: Obj) -> set[str]:
        meta = obj.get("metadata", {})
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        workload_id = status.workload_id_of(obj)
        if event == "DELETED":
            self.objects[kind].pop(key, None)
        else:
            self.objects[kind][key] = obj
        if not workload_id:
            return set()
        if event == "DELETED":
            self.index[kind][workload_id].discard(key)
        else:
            self.index[kind][workload_id].add(key)
        if kind is k.POD:
            job = names.workload_name(workload_id, status.attempt_of(obj))
            failure = status.pod_failure(obj, _task(obj, job))
            if failure is not None:
                self.last_failure[workload_id] = failure
        return {workload_id}

    def _of(self, kind: k.Kind, workload_id: str) -> list[Obj]:
        objects = self.objects[kind]
        return [objects[key] for key in self.index[kind].get(workload_id, ()) if key in objects]

    # -- deciding --------------------------------------------------------------------------------

    def observation(self, workload_id: str) -> Observation | None:
        jobs = self._of(k.VOLCANO_JOB, workload_id)
        if jobs:
            job = max(jobs, key=status.attempt_of)
            attempt = status.attempt_of(job)
            pods = [p for p in self._of(k.POD, workload_id) if status.attempt_of(p) == attempt]
            groups = [
                g for g in self._of(k.PODGROUP, workload_id) if status.attempt_of(g) == attempt
            ]
            failure = self.last_failure.get(workload_id)
            return status.job_observation(
                job,
                podgroup=groups[0] if groups else None,
                pods=pods,
                now=self.now(),
                pull_grace_seconds=self.settings.image_pull_grace_seconds,
                last_failure=failure,
            )
        isvcs = (
            self._of(k.INFERENCE_SERVICE, workload_id) if k.INFERENCE_SERVICE in self.kinds else []
        )
        if isvcs:
            isvc = max(isvcs, key=status.attempt_of)
            attempt = status.attempt_of(isvc)
            return status.inference_service_observation(
                isvc,
                pods=[p for p in self._of(k.POD, workload_id) if status.attempt_of(p) == attempt],
                now=self.now(),
                pull_grace_seconds=self.settings.image_pull_grace_seconds,
            )
        deployments = self._of(k.DEPLOYMENT, workload_id)
        if deployments:
            deployment = max(deployments, key=status.attempt_of)
            return status.deployment_observation(
                deployment,
                pods=self._of(k.POD, workload_id),
                now=self.now(),
                pull_grace_seconds=self.settings.image_pull_grace_seconds,
            )
        return None

    def _emit(self, workload_ids: set[str]) -> None:
        for workload_id in sorted(workload_ids):
            observation = self.observation(workload_id)
            before = self.emitted.get(workload_id)
            if observation is None:
                if before is None or before.phase == Phase.UNKNOWN:
                    continue
                observation = Observation(
                    workload_id, Phase.UNKNOWN, R.DELETED_FROM_CLUSTER(), attempt=before.attempt
                )
            if before is not None and _same(before, observation):
                continue
            try:
                self.on_change(observation)
            except Exception:  # the next change or the periodic resync tries again
                log.exception("could not apply %s", observation)
                continue
            self.emitted[workload_id] = observation
            self.stats.emitted += 1


def _same(a: Observation, b: Observation) -> bool:
    return _key(a) == _key(b)


def _key(o: Observation) -> tuple[object, ...]:
    return (o.phase, o.reason, o.exit_code, o.attempt)


def _task(pod: Mapping[str, Any], job_name: str) -> str:
    name = str(pod.get("metadata", {}).get("name", "pod"))
    return name[len(job_name) + 1 :] if name.startswith(job_name + "-") else name
