"""Faults: a Celery worker killed with SIGKILL mid-submit and mid-stop, and Redis restarted
empty with tasks in it; are workloads lost, duplicated or stuck, and how long until the portal
is consistent again?

Runs the production shape on this host: PostgreSQL (a fresh ``quanta_faults`` database), a
private Redis started here (so it can be killed and restarted empty), a Celery worker and
Celery beat, and the local backend running real processes (``sleep``) for the jobs. Each
scenario submits or stops ``--jobs`` training jobs through the service functions, injects the
fault, and then polls the database and the host's processes until every job is where it
should be (Running with exactly one process session, or Stopped with none), or ``--deadline``
passes.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python bench/faults.py [--jobs 20] [--out bench/faults.md]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import psycopg

ROOT = Path(__file__).resolve().parents[1]
BENCH_DB = "quanta_faults"
TRANSITIONAL = ("Pending", "Queued", "Starting", "Stopping")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Stack:
    """Redis, a worker and beat, each a process this bench can kill and start again."""

    def __init__(self, env: dict[str, str], redis_port: int, workdir: Path) -> None:
        self.env, self.redis_port, self.workdir = env, redis_port, workdir
        self.redis: subprocess.Popen[bytes] | None = None
        self.worker: subprocess.Popen[bytes] | None = None
        self.beat: subprocess.Popen[bytes] | None = None

    def start_redis(self) -> None:
        self.redis = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for _ in range(100):
            ping = subprocess.run(
                ["redis-cli", "-p", str(self.redis_port), "ping"], capture_output=True, text=True
            )
            if ping.stdout.strip() == "PONG":
                return
            time.sleep(0.05)
        raise SystemExit("redis did not start")

    def kill_redis(self) -> None:
        assert self.redis is not None
        self.redis.kill()  # nothing on disk: it comes back empty
        self.redis.wait()

    def start_worker(self) -> None:
        self.worker = self._celery(
            "worker",
            "-Q",
            "default,cluster,watch",
            "-c",
            "2",
            "--without-gossip",
            "--without-mingle",
        )

    def kill_worker(self) -> None:
        assert self.worker is not None
        os.killpg(self.worker.pid, signal.SIGKILL)  # the worker and its pool, unacknowledged
        self.worker.wait()

    def start_beat(self) -> None:
        self.beat = self._celery("beat", "-s", str(self.workdir / "beat-schedule"))

    def _celery(self, *args: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "portal", *args, "--loglevel", "WARNING"],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def stop_all(self) -> None:
        for proc in (self.beat, self.worker, self.redis):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def sessions_by_workload() -> dict[str, set[int]]:
    """Live process sessions per workload id (the local backend starts each task in a session
    of its own and marks it with QUANTA_WORKLOAD_ID)."""
    found: dict[str, set[int]] = collections.defaultdict(set)
    for proc in psutil.process_iter(["pid"]):
        try:
            workload = proc.environ().get("QUANTA_WORKLOAD_ID")
            if workload and proc.status() != psutil.STATUS_ZOMBIE:
                found[workload].add(os.getsid(proc.pid))
        except (psutil.Error, ProcessLookupError):
            continue
    return found


def settle(ids: list[str], want: str, deadline: float) -> dict[str, Any]:
    """Poll until every workload is ``want`` (Running: one live session; Stopped: none)."""
    from workloads.models import Workload

    started = time.monotonic()
    while True:
        states = {
            str(pk): state
            for pk, state in Workload.objects.filter(pk__in=ids).values_list("pk", "state")
        }
        sessions = sessions_by_workload()
        ok = 0
        for pk in ids:
            live = len(sessions.get(pk, ()))
            if states.get(pk) == want and live == (1 if want == "Running" else 0):
                ok += 1
        elapsed = time.monotonic() - started
        if ok == len(ids) or elapsed > deadline:
            break
        time.sleep(0.25)
    duplicated = sum(1 for pk in ids if len(sessions.get(pk, ())) > 1)
    stuck = sum(1 for pk in ids if states.get(pk) in TRANSITIONAL)
    lost = sum(
        1
        for pk in ids
        if states.get(pk) not in (*TRANSITIONAL, want)
        or (want == "Running" and states.get(pk) == want and not sessions.get(pk))
    )
    return {
        "consistent": ok == len(ids),
        "seconds": elapsed,
        "lost": lost,
        "duplicated": duplicated,
        "stuck": stuck,
        "states": collections.Counter(states.values()),
    }


def wait_until(predicate: Callable[[], bool], timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end and not predicate():
        time.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--deadline", type=float, default=120.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    admin_url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {BENCH_DB}")
    workdir = Path(tempfile.mkdtemp(prefix="quanta-faults-"))
    redis_port = free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DATABASE_URL": admin_url.rsplit("/", 1)[0] + "/" + BENCH_DB,
        "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "DEBUG": "true",
        "DATA_DIR": str(workdir / "data"),
        "LOG_LEVEL": "WARNING",
    }
    os.environ.update(env)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from scheduling.inventory import sync_backend_nodes
    from scheduling.models import Cluster
    from tenants import services as tenant_services
    from tenants.choices import Role, TenantKind
    from workloads import services
    from workloads.models import AppTemplate, Flavor, Grant, Image, Workload

    root = get_user_model().objects.create_superuser("root", "root@uni.example", "pw")
    school = tenant_services.create_tenant(
        actor=root, kind=TenantKind.ORGANISATION, name="Uni", slug="uni"
    )
    klass = tenant_services.create_tenant(
        actor=root, kind=TenantKind.CLASS, name="ML-101", slug="ml-101", parent=school
    )
    student = get_user_model().objects.create_user("bob", "bob@uni.example")
    tenant_services.set_membership(actor=root, tenant=klass, user=student, role=Role.STUDENT)
    cluster = Cluster.objects.create(
        name="This host",
        slug="host",
        backend="local",
        is_default=True,
        config={"cpu_overcommit": 64},
    )
    sync_backend_nodes(cluster)
    image = Image.objects.create(name="Python", slug="py")
    flavor = Flavor.objects.create(name="tiny", slug="tiny", cpu_milli=100, memory_mib=64)
    template = AppTemplate.objects.create(
        name="Shell", slug="shell", kind="jupyter", image=image, default_flavor=flavor
    )
    grant = Grant.objects.create(template=template, tenant=klass, created_by=root, member_limit=1)
    grant.flavors.set([flavor])

    def submit(n: int) -> list[str]:
        return [
            str(
                services.submit_job(
                    actor=student, tenant=klass, flavor=flavor, command="sleep 600", name=f"j{i}"
                ).pk
            )
            for i in range(n)
        ]

    def stop(ids: list[str]) -> None:
        for workload in Workload.objects.filter(pk__in=ids):
            services.stop(actor=student, workload=workload)

    def handed_over(ids: list[str]) -> int:
        return Workload.objects.filter(pk__in=ids).exclude(backend_state={}).count()

    stack = Stack(env, redis_port, workdir)
    rows = []
    try:
        stack.start_redis()
        stack.start_worker()
        stack.start_beat()
        time.sleep(3)

        # 1. The worker killed while it submits.
        ids = submit(args.jobs)
        wait_until(lambda: handed_over(ids) >= 1, 30)
        stack.kill_worker()
        at = handed_over(ids)
        stack.start_worker()
        rows.append(
            (
                "worker SIGKILL mid-submit",
                f"{at} of {len(ids)} handed over",
                settle(ids, "Running", args.deadline),
            )
        )

        # 2. The worker killed while it stops them.
        stop(ids)
        wait_until(lambda: Workload.objects.filter(pk__in=ids, state="Stopped").exists(), 30)
        stack.kill_worker()
        done = Workload.objects.filter(pk__in=ids, state="Stopped").count()
        stack.start_worker()
        rows.append(
            (
                "worker SIGKILL mid-stop",
                f"{done} of {len(ids)} stopped",
                settle(ids, "Stopped", args.deadline),
            )
        )

        # 3. Redis restarted empty with the submit tasks in it (the worker paused, so none
        #    was taken).
        assert stack.worker is not None
        os.killpg(stack.worker.pid, signal.SIGSTOP)
        ids = submit(args.jobs)
        stack.kill_redis()
        stack.start_redis()
        os.killpg(stack.worker.pid, signal.SIGCONT)
        rows.append(
            (
                "Redis restarted empty after submits",
                "tasks lost",
                settle(ids, "Running", args.deadline),
            )
        )

        # 4. Redis restarted empty with the stop tasks in it.
        os.killpg(stack.worker.pid, signal.SIGSTOP)
        stop(ids)
        stack.kill_redis()
        stack.start_redis()
        os.killpg(stack.worker.pid, signal.SIGCONT)
        rows.append(
            (
                "Redis restarted empty after stops",
                "tasks lost",
                settle(ids, "Stopped", args.deadline),
            )
        )
    finally:
        stack.stop_all()
        for workload in Workload.objects.filter(state__in=("Starting", "Running", "Stopping")):
            services.stop(actor=None, workload=workload)
        for sessions in sessions_by_workload().values():
            for sid in sessions:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(sid, signal.SIGKILL)
        from django.db import connections

        connections.close_all()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")

    header = (
        "| fault | when | jobs | lost | duplicated | stuck | consistent after |\n"
        "|---|---|---|---|---|---|---|"
    )

    def after(r: dict[str, Any]) -> str:
        seconds = f"{r['seconds']:.1f} s"
        return seconds if r["consistent"] else f"{seconds} (not consistent: {dict(r['states'])})"

    lines = [
        f"| {name} | {when} | {args.jobs} | {r['lost']} | {r['duplicated']} | {r['stuck']} "
        f"| {after(r)} |"
        for name, when, r in rows
    ]
    table = "\n".join([header, *lines])
    print(table)
    if args.out:
        text = args.out.read_text() if args.out.exists() else ""
        args.out.write_text(
            text.split("<!-- results -->")[0] + "<!-- results -->\n\n" + table + "\n"
        )


if __name__ == "__main__":
    main()
