"""The backend contract, on the emulated API server with a fake Volcano whose pods run their
commands as local processes: submit, observe, logs, stop and running() end to end through the
official client, as the portal uses them."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from scheduling.backends.base import Backend, Handle, WorkloadSpec
from scheduling.backends.kubernetes import KubernetesBackend
from tests.scheduling.backends.contract import BackendContract
from tests.scheduling.kubernetes.conftest import TENANT
from tests.scheduling.kubernetes.emulator import ApiServer
from tests.scheduling.kubernetes.fake_volcano import FakeVolcano


class TestKubernetesContract(BackendContract):
    wait_seconds = 15.0

    @pytest.fixture
    def backend(
        self, api: ApiServer, make_backend: Callable[..., KubernetesBackend]
    ) -> Iterator[KubernetesBackend]:
        volcano = FakeVolcano(api)
        yield make_backend()
        volcano.close()

    def job(self, command: tuple[str, ...], **fields: Any) -> WorkloadSpec:
        workload_id = str(uuid.uuid4())
        return WorkloadSpec(
            workload_id=workload_id,
            kind="job",
            app="command",
            owner="contract",
            command=command,
            image="busybox:1.37",
            labels={"quanta.workload-id": workload_id, "quanta.tenant": TENANT},
            **fields,
        )

    def started(self, backend: Backend, handle: Handle) -> object:
        return handle.state["uid"]  # the same Job, not a second one
