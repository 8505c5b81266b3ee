"""A real Celery worker, over Redis, drives a workload on the local backend from Pending to
Running to Stopped: the wiring that unit tests with in-process tasks cannot prove."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from portal.celery import app
from scheduling.backends import registry
from scheduling.backends.local import LocalBackend
from tests.marks import requires_redis, requires_shared_database
from tests.workloads.conftest import local_catalog
from workloads import services
from workloads.choices import State
from workloads.models import Workload

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    requires_shared_database,
    requires_redis,
    pytest.mark.celery_worker,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def worker(tmp_path, settings):
    """`celery worker -B` against this test's database and a private data directory."""
    settings.DATA_DIR = tmp_path
    registry.forget()
    app.control.purge()
    db = connection.settings_dict
    env = {
        **os.environ,
        "DEBUG": "true",
        "DATA_DIR": str(tmp_path),
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "REDIS_URL": settings.REDIS_URL,
    }
    log = (tmp_path / "worker.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "portal",
            "worker",
            "-B",
            "-Q",
            "default,cluster",
            "--pool",
            "solo",
            "-l",
            "info",
            "-s",
            str(tmp_path / "beat-schedule"),
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    yield process
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
    log.close()
    registry.forget()


def wait_for(workload: Workload, state: str, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workload.refresh_from_db()
        if workload.state == state:
            return
        time.sleep(0.2)
    pytest.fail(
        f"still {workload.state} ({workload.reason}) after {timeout}s, wanted "
        f"{state}; worker log:\n{log.read_text()[-3000:]}"
    )


def test_a_real_worker_drives_a_job_from_pending_to_running_to_stopped(
    world, worker, tmp_path
) -> None:
    cluster, _template, flavor = local_catalog(world, "terminal")
    job = services.submit_job(
        actor=world.bob,
        tenant=world.class_a,
        flavor=flavor,
        command=[sys.executable, "-c", "import time; time.sleep(120)"],
    )
    log = tmp_path / "worker.log"
    wait_for(job, State.RUNNING, 60, log)
    backend = LocalBackend(settings.DATA_DIR / "workloads" / cluster.slug)
    assert backend.running() == {str(job.pk)}

    services.stop(actor=world.bob, workload=job)
    wait_for(job, State.STOPPED, 60, log)
    assert backend.running() == set()
    assert [e.to_state for e in job.events.all() if e.from_state != e.to_state] == [
        "Starting",
        "Running",
        "Stopping",
        "Stopped",
    ]
