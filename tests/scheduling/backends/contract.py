"""What every cluster backend must do, whatever it runs on.

A backend's test module subclasses :class:`BackendContract` and provides a ``backend`` fixture
(a fresh backend per test). The commands are plain POSIX (``sh``, ``sleep``) so that an image
or a simulated cluster can run them; override the ``*_command`` methods where that does not
hold, and :meth:`started` to say what "one set of processes" means for the backend.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from scheduling.backends.base import (
    TERMINAL_PHASES,
    Backend,
    Handle,
    Observation,
    Phase,
    WorkloadSpec,
)

Launch = Callable[[WorkloadSpec], Handle]


def wait_for(
    backend: Backend, handle: Handle, *phases: Phase, timeout: float = 30.0
) -> Observation:
    """Poll ``observe`` until the workload is in one of ``phases``; fail with what it last was."""
    deadline = time.monotonic() + timeout
    while True:
        observation = backend.observe([handle])[handle.workload_id]
        if observation.phase in phases:
            return observation
        if time.monotonic() > deadline:
            pytest.fail(f"still {observation.phase} ({observation.reason!r}), wanted {phases}")
        time.sleep(0.1)


def all_logs(backend: Backend, handle: Handle, task: int = 0) -> str:
    """A task's whole log, read chunk by chunk as the portal would."""
    text, offset = "", 0
    while True:
        chunk = backend.logs(handle, task=task, offset=offset, limit=4096)
        text += chunk.text
        if chunk.next_offset == offset:
            return text
        offset = chunk.next_offset


class BackendContract:
    """Subclass with a ``backend`` fixture; the tests read as the contract itself."""

    wait_seconds = 30.0

    def job(self, command: tuple[str, ...], **fields: Any) -> WorkloadSpec:
        return WorkloadSpec(
            workload_id=str(uuid.uuid4()),
            kind="job",
            app="command",
            owner="contract",
            command=command,
            **fields,
        )

    def print_command(self, text: str) -> tuple[str, ...]:
        return ("sh", "-c", f"echo {text}")

    def exit_command(self, code: int) -> tuple[str, ...]:
        return ("sh", "-c", f"echo about to fail; exit {code}")

    def sleep_command(self) -> tuple[str, ...]:
        return ("sleep", "300")

    def started(self, backend: Backend, handle: Handle) -> object:
        """What identifies the running set of a workload (pids, pod uids, …)."""
        return handle.state

    @pytest.fixture
    def launch(self, backend: Backend) -> Iterator[Launch]:
        """``launch(spec)`` submits; afterwards everything launched is stopped and gone."""
        handles: list[Handle] = []

        def submit(spec: WorkloadSpec) -> Handle:
            handle = backend.submit(spec)
            handles.append(handle)
            return handle

        yield submit
        for handle in handles:
            backend.stop(handle)
        for handle in handles:
            wait_for(backend, handle, *TERMINAL_PHASES, timeout=self.wait_seconds)
        ids = {handle.workload_id for handle in handles}
        deadline = time.monotonic() + self.wait_seconds
        while ids & backend.running() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not ids & backend.running(), "workloads still alive after the test"

    def test_submitting_the_same_attempt_twice_starts_it_once(
        self, backend: Backend, launch: Launch
    ) -> None:
        spec = self.job(self.sleep_command())
        first = launch(spec)
        second = backend.submit(spec)
        assert self.started(backend, second) == self.started(backend, first)
        assert wait_for(backend, first, Phase.RUNNING).attempt == 0

    def test_stopping_twice_is_harmless(self, backend: Backend, launch: Launch) -> None:
        handle = launch(self.job(self.sleep_command()))
        wait_for(backend, handle, Phase.RUNNING)
        backend.stop(handle)
        backend.stop(handle)
        wait_for(backend, handle, Phase.STOPPED, timeout=self.wait_seconds)
        backend.stop(handle)
        assert backend.observe([handle])[handle.workload_id].phase == Phase.STOPPED

    def test_stopping_an_unknown_workload_does_nothing(self, backend: Backend) -> None:
        backend.stop(Handle(str(uuid.uuid4())))

    def test_an_unknown_workload_is_observed_as_unknown(self, backend: Backend) -> None:
        workload_id = str(uuid.uuid4())
        assert backend.observe([Handle(workload_id)])[workload_id].phase == Phase.UNKNOWN

    def test_a_job_that_exits_zero_succeeds_with_its_output_in_the_logs(
        self, backend: Backend, launch: Launch
    ) -> None:
        handle = launch(self.job(self.print_command("hello-from-the-job")))
        observation = wait_for(backend, handle, *TERMINAL_PHASES, timeout=self.wait_seconds)
        assert observation.phase == Phase.SUCCEEDED, observation.reason
        assert observation.exit_code == 0
        assert "hello-from-the-job" in all_logs(backend, handle)

    def test_a_failing_job_fails_with_its_exit_code_in_the_reason(
        self, backend: Backend, launch: Launch
    ) -> None:
        handle = launch(self.job(self.exit_command(3)))
        observation = wait_for(backend, handle, *TERMINAL_PHASES, timeout=self.wait_seconds)
        assert observation.phase == Phase.FAILED
        assert observation.exit_code == 3
        assert "code 3" in str(observation.reason)

    def test_stopping_a_running_job_stops_it_and_leaves_nothing_running(
        self, backend: Backend, launch: Launch
    ) -> None:
        handle = launch(self.job(self.sleep_command(), workers=2))
        wait_for(backend, handle, Phase.RUNNING)
        assert handle.workload_id in backend.running()
        backend.stop(handle)
        observation = wait_for(backend, handle, Phase.STOPPED, timeout=self.wait_seconds)
        assert observation.reason
        assert handle.workload_id not in backend.running()

    def test_a_new_attempt_starts_afresh_with_new_logs(
        self, backend: Backend, launch: Launch
    ) -> None:
        spec = self.job(self.exit_command(3))
        first = launch(spec)
        wait_for(backend, first, Phase.FAILED, timeout=self.wait_seconds)
        retry = dataclasses.replace(spec, command=self.print_command("second-try"), attempt=1)
        second = launch(retry)
        observation = wait_for(backend, second, *TERMINAL_PHASES, timeout=self.wait_seconds)
        assert (observation.phase, observation.attempt) == (Phase.SUCCEEDED, 1)
        text = all_logs(backend, second)
        assert "second-try" in text
        assert "about to fail" not in text
