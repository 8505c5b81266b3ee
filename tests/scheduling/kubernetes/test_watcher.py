"""The watcher: list + watch with resourceVersion, re-list on 410 Gone, bounded reconnects."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from scheduling.backends.base import BackendError, Observation, Phase
from scheduling.backends.kubernetes import KubernetesBackend, manifests
from scheduling.backends.kubernetes.watcher import WatchStats
from tests.scheduling.kubernetes.conftest import NAMESPACE, spec
from tests.scheduling.kubernetes.emulator import ApiServer


class Running:
    """A watcher in a thread, with what it reported."""

    def __init__(self, backend: KubernetesBackend, seconds: float = 20.0) -> None:
        self.seen: list[Observation] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.stats: WatchStats | None = None
        self.thread = threading.Thread(target=self._run, args=(backend, seconds), daemon=True)
        self.thread.start()

    def _run(self, backend: KubernetesBackend, seconds: float) -> None:
        try:
            self.stats = backend.watch(self.seen.append, seconds=seconds, stop=self.stop)
        except BaseException as exc:
            self.error = exc

    def phases(self, workload_id: str) -> list[Phase]:
        return [o.phase for o in self.seen if o.workload_id == workload_id]

    def wait_for(self, workload_id: str, phase: Phase, timeout: float = 10.0) -> Observation:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for observation in reversed(self.seen):
                if observation.workload_id == workload_id and observation.phase == phase:
                    return observation
            if self.error:
                raise self.error
            time.sleep(0.01)
        pytest.fail(f"never saw {phase}; saw {self.phases(workload_id)}")

    def finish(self) -> WatchStats:
        self.stop.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()
        if self.error:
            raise self.error
        assert self.stats is not None
        return self.stats


@pytest.fixture
def watching(backend: KubernetesBackend) -> Iterator[Callable[[], Running]]:
    started: list[Running] = []

    def start() -> Running:
        started.append(Running(backend))
        return started[-1]

    yield start
    for running in started:
        running.stop.set()
        running.thread.join(timeout=10)


def set_job(api: ApiServer, name: str, phase: str, **status: Any) -> None:
    def change(job: dict[str, Any]) -> None:
        job["status"] = {"state": {"phase": phase}, **status}

    api.update("jobs", NAMESPACE, name, change)


def test_the_watcher_follows_a_job_from_its_queue_to_its_end(
    api: ApiServer, backend: KubernetesBackend, watching: Callable[[], Running]
) -> None:
    handle = backend.submit(spec(workers=2))
    name, workload_id = handle.state["name"], handle.workload_id
    watcher = watching()
    watcher.wait_for(workload_id, Phase.PENDING)
    api.put(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {
                "name": f"{name}-{handle.state['uid']}",
                "namespace": NAMESPACE,
                "labels": api.get("jobs", NAMESPACE, name)["metadata"]["labels"],  # type: ignore[index]
            },
            "status": {"phase": "Inqueue"},
        }
    )
    watcher.wait_for(workload_id, Phase.STARTING)
    set_job(api, name, "Running")
    watcher.wait_for(workload_id, Phase.RUNNING)
    set_job(api, name, "Completed", succeeded=2)
    done = watcher.wait_for(workload_id, Phase.SUCCEEDED)
    assert str(done.reason) == "completed (2 tasks succeeded)"
    stats = watcher.finish()
    assert watcher.phases(workload_id) == [
        Phase.PENDING,
        Phase.STARTING,
        Phase.RUNNING,
        Phase.SUCCEEDED,
    ]
    assert stats.lists == 4  # one list per kind, then only watch events


def test_a_dropped_watch_and_410_relist_lose_no_transition(
    api: ApiServer, backend: KubernetesBackend, watching: Callable[[], Running]
) -> None:
    handle = backend.submit(spec())
    name, workload_id = handle.state["name"], handle.workload_id
    watcher = watching()
    watcher.wait_for(workload_id, Phase.PENDING)
    set_job(api, name, "Running")
    watcher.wait_for(workload_id, Phase.RUNNING)
    with api.cond:
        # The connection drops; while nobody watches the job completes, and the server
        # compacts its history, so resuming from the last version seen answers 410 Gone.
        api.drop_watches()
        set_job(api, name, "Completed", succeeded=1)
        api.compact()
    watcher.wait_for(workload_id, Phase.SUCCEEDED)
    stats = watcher.finish()
    assert watcher.phases(workload_id) == [Phase.PENDING, Phase.RUNNING, Phase.SUCCEEDED]
    assert stats.expired >= 1 and stats.lists >= 5  # re-listed after the 410


def test_the_watcher_gives_up_after_its_bounded_reconnects(
    api: ApiServer, backend: KubernetesBackend, watching: Callable[[], Running]
) -> None:
    handle = backend.submit(spec())
    watcher = watching()
    watcher.wait_for(handle.workload_id, Phase.PENDING)
    api.fail(path="/jobs$", watch=True, status=0, times=100)
    api.fail(path="/jobs$", watch=False, status=503, times=100)
    started = len(api.requests)
    api.drop_watches()
    watcher.thread.join(timeout=10)
    assert isinstance(watcher.error, BackendError) and watcher.error.transient
    assert "stopped watching jobs" in str(watcher.error)
    tries = [p for m, p in api.requests[started:] if "/jobs?" in p and "watch=" in p]
    assert len(tries) == backend.config.max_reconnects


def test_the_watcher_remembers_why_a_job_failed_after_its_pods_are_gone(
    api: ApiServer, backend: KubernetesBackend, watching: Callable[[], Running]
) -> None:
    workload = spec()
    handle = backend.submit(workload)
    name = handle.state["name"]
    watcher = watching()
    watcher.wait_for(handle.workload_id, Phase.PENDING)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-master-0",
            "namespace": NAMESPACE,
            "labels": manifests.workload_labels(workload, "job"),
        },
        "spec": {"containers": [{"name": "main", "image": "x"}]},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {"name": "main", "state": {"terminated": {"exitCode": 2, "reason": "Error"}}}
            ],
        },
    }
    api.put(pod)
    api.remove("pods", NAMESPACE, pod["metadata"]["name"])  # Volcano's RestartJob deletes it
    set_job(api, name, "Failed", retryCount=3)
    failed = watcher.wait_for(handle.workload_id, Phase.FAILED)
    assert (str(failed.reason), failed.exit_code) == (
        "failed after 3 restarts: master-0 exited with code 2",
        2,
    )
    watcher.finish()


def test_a_deleted_workload_is_reported_unknown(
    api: ApiServer, backend: KubernetesBackend, watching: Callable[[], Running]
) -> None:
    handle = backend.submit(spec("serving"))
    watcher = watching()
    watcher.wait_for(handle.workload_id, Phase.STARTING)
    api.remove("deployments", NAMESPACE, handle.state["name"])
    gone = watcher.wait_for(handle.workload_id, Phase.UNKNOWN)
    assert str(gone.reason) == "deleted from the cluster"
    watcher.finish()
