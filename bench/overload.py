"""Overload: 1,000 simultaneous launch requests against a running portal.

Starts `manage.py serve` (the embedded default: in-process tasks) on a fresh PostgreSQL
database — or, with ``--redis``, the production shape: Redis as broker and channel layer and a
real Celery worker — with one class of ``--students`` students (each with a personal API token)
whose quota allows ``--limit`` environments at once, on the simulated GPU farm (so admitted
work "runs" without processes). A tenth of the students send a second launch at the same time
(their grant allows one environment each). Every request carries an ``Idempotency-Key`` and a
client retries a 503 after its ``Retry-After``, as a well-behaved client does.

Measured: answers by status (first tries and final), admitted against the limit, the
per-member limit, seconds to a final answer (p50/p99), and the most database connections the
portal held at once (``pg_stat_activity``).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python bench/overload.py [--redis redis://127.0.0.1:6379/9] \\
        [--out bench/overload.md]

The database named in DATABASE_URL is only used to create and drop ``quanta_overload``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[1]
BENCH_DB = "quanta_overload"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * p
    low, high = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def fresh_database(admin_url: str) -> str:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {BENCH_DB}")
    base = admin_url.rsplit("/", 1)[0]
    return f"{base}/{BENCH_DB}"


SETUP = """
import json, sys
from decimal import Decimal
from django.contrib.auth import get_user_model
from scheduling import demo
from scheduling.inventory import sync_backend_nodes
from tenants import services
from tenants.choices import Role, TenantKind
from workloads.models import AppTemplate, Flavor, Grant, Image

n, limit = int(sys.argv[1]), int(sys.argv[2])
User = get_user_model()
root = User.objects.create_superuser("root", "root@uni.example", "pw")
school = services.create_tenant(
    actor=root, kind=TenantKind.ORGANISATION, name="Uni", slug="uni"
)
dept = services.create_tenant(
    actor=root, kind=TenantKind.DEPARTMENT, name="CS", slug="cs", parent=school
)
klass = services.create_tenant(
    actor=root, kind=TenantKind.CLASS, name="ML-101", slug="ml-101", parent=dept
)
services.set_quota(actor=root, tenant=klass, environments=limit)
farm = demo.seed_simulated()
sync_backend_nodes(farm)
image = Image.objects.create(name="PyTorch", slug="pytorch", registry_ref="quanta/pytorch:2")
flavor = Flavor.objects.create(name="1 CPU", slug="cpu-1", cpu_milli=1000, memory_mib=2048)
template = AppTemplate.objects.create(
    name="JupyterLab", slug="jupyter", kind="jupyter", image=image, default_flavor=flavor
)
template.allowed_flavors.set([flavor])
grant = Grant.objects.create(
    template=template, tenant=klass, created_by=root, cluster=farm, member_limit=1
)
grant.flavors.set([flavor])
tokens = []
users = User.objects.bulk_create(
    [User(username=f"s{i:04d}", email=f"s{i:04d}@uni.example") for i in range(n)]
)
for user in users:
    services.set_membership(actor=root, tenant=klass, user=user, role=Role.STUDENT)
    tokens.append(services.create_api_token(actor=user, name="bench")[1])
print(json.dumps(tokens))
"""


def setup(env: dict[str, str], students: int, limit: int) -> list[str]:
    import json

    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    out = subprocess.run(
        [sys.executable, "-c", _django(SETUP), str(students), str(limit)],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return list(json.loads(out.strip().splitlines()[-1]))


def _django(code: str) -> str:
    return "import django, os; django.setup()\n" + code


class ConnectionSampler(threading.Thread):
    """The most connections to the bench database at once, sampled every 50 ms."""

    def __init__(self, admin_url: str) -> None:
        super().__init__(daemon=True)
        self.admin_url = admin_url
        self.most = 0
        self.stop = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            while not self.stop.is_set():
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (BENCH_DB,)
                ).fetchone()
                self.most = max(self.most, int(row[0]) if row else 0)
                time.sleep(0.05)


async def hammer(base: str, tokens: list[str], doubles: int, deadline: float) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    first: collections.Counter[int] = collections.Counter()
    final: collections.Counter[int] = collections.Counter()
    seconds: list[float] = []
    failures: collections.Counter[str] = collections.Counter()
    requests = [(token, str(uuid.uuid4())) for token in tokens]
    requests += [(token, str(uuid.uuid4())) for token in tokens[:doubles]]  # a second launch
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=deadline) as client:

        async def one(token: str, key: str) -> None:
            started = time.monotonic()
            tries = 0
            while True:
                tries += 1
                try:
                    response = await client.post(
                        "/api/v1/workloads/launch/",
                        json={"template": "jupyter"},
                        headers={"Authorization": f"Bearer {token}", "Idempotency-Key": key},
                    )
                    code = response.status_code
                except httpx.HTTPError as exc:
                    code = 0  # no answer at all (refused, reset, timeout)
                    failures[type(exc).__name__] += 1
                if tries == 1:
                    first[code] += 1
                if code == 503 and time.monotonic() - started < deadline:
                    await asyncio.sleep(float(response.headers.get("Retry-After", "1")))
                    continue
                final[code] += 1
                seconds.append(time.monotonic() - started)
                return

        started = time.monotonic()
        await asyncio.gather(*(one(t, k) for t, k in requests))
        wall = time.monotonic() - started
    return {"first": first, "final": final, "seconds": seconds, "wall": wall, "failures": failures}


def outcome(env: dict[str, str], limit: int) -> dict[str, Any]:
    import json

    code = """
import json
from django.db.models import Count
from workloads.models import Workload
from workloads.choices import ACTIVE, HOLDING
from tenants.models import Tenant
per = Workload.objects.filter(state__in=ACTIVE).values("owner").annotate(n=Count("id"))
quota = Tenant.objects.get(slug="ml-101").quota
print(json.dumps({
    "holding": Workload.objects.filter(state__in=HOLDING).count(),
    "waiting": Workload.objects.filter(state__in=("Pending", "Queued")).count(),
    "created": Workload.objects.count(),
    "most_per_student": max([r["n"] for r in per] or [0]),
    "used_environments": quota.used_environments,
}))
"""
    out = subprocess.run(
        [sys.executable, "-c", _django(code)],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def run_mode(admin_url: str, redis_url: str, args: argparse.Namespace) -> dict[str, Any]:
    database_url = fresh_database(admin_url)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DATABASE_URL": database_url,
        "DEBUG": "true",
        "DATA_DIR": str(ROOT / "var" / "bench-overload"),
        "LOG_LEVEL": "WARNING",
    }
    env.pop("REDIS_URL", None)
    if redis_url:
        env["REDIS_URL"] = redis_url
        subprocess.run(["redis-cli", "-u", redis_url, "FLUSHDB"], check=True, capture_output=True)
    tokens = setup(env, args.students, args.limit)
    port = free_port()
    procs = []
    if redis_url:
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "portal",
                    "worker",
                    "-Q",
                    "default,cluster,watch",
                    "-c",
                    "2",
                    "--loglevel",
                    "WARNING",
                ],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
    procs.append(
        subprocess.Popen(
            [sys.executable, "manage.py", "serve", f"127.0.0.1:{port}"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        sampler = ConnectionSampler(admin_url)
        sampler.start()
        result = asyncio.run(hammer(base, tokens, args.students // 10, args.deadline))
        time.sleep(args.settle)  # queued admissions finish (Redis mode)
        sampler.stop.set()
        sampler.join()
        result["connections"] = sampler.most
        result["db"] = outcome(env, args.limit)
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=30)
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
    return result


def describe(name: str, r: dict[str, Any], args: argparse.Namespace) -> str:
    def counts(counter: collections.Counter[int]) -> str:
        return ", ".join(f"{n} × {code or 'no answer'}" for code, n in sorted(counter.items()))

    db = r["db"]
    fives = sum(n for code, n in r["final"].items() if code >= 500 or code == 0)
    return (
        f"| {name} | {sum(r['first'].values())} | {counts(r['first'])} | {counts(r['final'])} "
        f"| {fives} | {db['holding']} of {args.limit} (quota used {db['used_environments']}) "
        f"| {db['most_per_student']} | {percentile(r['seconds'], 0.5):.1f} s "
        f"| {percentile(r['seconds'], 0.99):.1f} s | {r['connections']} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=909)
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--redis", default="", help="also run the Redis mode on this URL")
    parser.add_argument("--deadline", type=float, default=180.0)
    parser.add_argument("--settle", type=float, default=5.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    admin_url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    results = [run_mode(admin_url, "", args)]
    rows = [describe("embedded (in-process tasks), PostgreSQL", results[0], args)]
    if args.redis:
        results.append(run_mode(admin_url, args.redis, args))
        rows.append(describe("Redis + Celery worker, PostgreSQL", results[1], args))
    header = (
        "| mode | requests | first answers | final answers | 5xx / none | holding (limit) "
        "| most per student (limit 1) | p50 to final | p99 to final | most DB connections |\n"
        "|---|---|---|---|---|---|---|---|---|---|"
    )
    table = "\n".join([header, *rows])
    print(table)
    print("no answer, by error:", [dict(r.get("failures", {})) for r in results])
    if args.out:
        args.out.write_text(
            args.out.read_text().split("<!-- results -->")[0]
            + "<!-- results -->\n\n"
            + table
            + "\n"
        )


if __name__ == "__main__":
    main()
