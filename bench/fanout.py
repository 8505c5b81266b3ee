"""Live status fan-out: N WebSocket clients subscribed, one state change, how long until each
client has the message (issue 6, Measure), through the Redis channel layer.

Starts a real daphne server (``daphne portal.asgi:application``) on a free port with REDIS_URL,
DEBUG=true and a fresh SQLite database and data directory holding the demo data; signs in over
HTTP; opens N WebSocket clients (the ``websockets`` library, spread over a few processes so
that one client loop is not the bottleneck), each subscribed to a topic the change reaches:

    teacher1  tenant:ml-101    the class's group
    admin     tenant:cs        the department's group (the ancestor fan-out)
    student1  workloads:mine   the owner's group

then moves a workload of student1 from Pending to Queued, in this process, the way a Celery
worker does (``lifecycle.transition``: commit, then the listener publishes), and records when
each client receives the event. Several rounds, one state change (of a new workload) each.

    REDIS_URL=redis://127.0.0.1:6379/0 .venv/bin/python bench/fanout.py --clients 1000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
SUBSCRIBERS = [
    ("teacher1", "tenant:ml-101"),
    ("admin", "tenant:cs"),
    ("student1", "workloads:mine"),
]
PASSWORD = "bench-pass"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p
    low, high = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def cpu_ms(pid: int) -> float | None:
    """User + system CPU time of a process so far (Linux), in milliseconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def raise_fd_limit(wanted: int) -> int:
    """Each client is a socket here and one in daphne: lift the soft limit toward the hard."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, wanted)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# -- clients (child processes) ---------------------------------------------------------------


def clients(
    port: int,
    plan: list[tuple[str, str]],
    concurrency: int,
    rounds: multiprocessing.Queue,  # type: ignore[type-arg]
    results: multiprocessing.Queue,  # type: ignore[type-arg]
) -> None:
    """Open one WebSocket per (cookie, topic) of ``plan``, subscribe, report ready; then for
    each round (``(number, t0, reason, timeout)`` from ``rounds``) report each client's delay
    after ``t0``, and how many did not get the event within ``timeout`` seconds."""
    asyncio.run(_clients(port, plan, concurrency, rounds, results))


async def _clients(
    port: int,
    plan: list[tuple[str, str]],
    concurrency: int,
    rounds: Any,
    results: Any,
) -> None:
    from websockets.asyncio.client import connect

    uri, origin = f"ws://127.0.0.1:{port}/ws/live/", f"http://127.0.0.1:{port}"
    gate = asyncio.Semaphore(concurrency)
    received: list[dict[str, float]] = [{} for _ in plan]  # per client: reason -> time
    sockets: list[Any] = [None] * len(plan)
    errors: Counter[str] = Counter()

    async def open_one(i: int, cookie: str, topic: str) -> None:
        async with gate:
            try:
                ws = await connect(
                    uri,
                    origin=origin,  # type: ignore[arg-type]
                    additional_headers={"Cookie": cookie},
                    open_timeout=60,
                    ping_interval=None,
                    max_queue=None,
                )
                await ws.send(json.dumps({"action": "subscribe", "topic": topic}))
                while json.loads(await asyncio.wait_for(ws.recv(), 60))["type"] != "snapshot":
                    pass
            except Exception as exc:
                errors[f"{type(exc).__name__}: {exc}"[:160]] += 1
                return
        sockets[i] = ws

    async def listen(i: int) -> None:
        ws = sockets[i]
        try:
            async for frame in ws:
                now = time.time()
                message = json.loads(frame)
                if message.get("type") == "workload.state":
                    received[i].setdefault(message["reason"], now)
        except Exception:
            pass

    start = time.perf_counter()
    await asyncio.gather(*(open_one(i, cookie, topic) for i, (cookie, topic) in enumerate(plan)))
    opened = [i for i, ws in enumerate(sockets) if ws is not None]
    results.put(("ready", len(opened), time.perf_counter() - start, dict(errors)))
    listeners = [asyncio.create_task(listen(i)) for i in opened]

    loop = asyncio.get_running_loop()
    while True:
        order = await loop.run_in_executor(None, rounds.get)
        if order is None:
            break
        number, t0, reason, timeout = order
        deadline = time.time() + timeout
        while time.time() < deadline and any(reason not in received[i] for i in opened):
            await asyncio.sleep(0.01)
        delays = [received[i][reason] - t0 for i in opened if reason in received[i]]
        by_topic: dict[str, list[float]] = {}
        for i in opened:
            if reason in received[i]:
                by_topic.setdefault(plan[i][1], []).append(received[i][reason] - t0)
        expected = Counter(plan[i][1] for i in opened)
        results.put(("round", number, delays, len(opened) - len(delays), by_topic, expected))
    for task in listeners:
        task.cancel()
    await asyncio.gather(*(sockets[i].close() for i in opened), return_exceptions=True)


# -- the server and the change (this process) -------------------------------------------------


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def sign_in(base: str, username: str) -> str:
    with httpx.Client(base_url=base, timeout=30) as client:
        client.get("/login/")
        client.post(
            "/login/",
            data={
                "username": username,
                "password": PASSWORD,
                "csrfmiddlewaretoken": client.cookies["csrftoken"],
            },
            headers={"Referer": base + "/login/"},
        )
        session = client.cookies.get("sessionid")
    if not session:
        raise SystemExit(f"could not sign in as {username}")
    return f"sessionid={session}"


def wait_up(base: str, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"daphne exited:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit("daphne did not answer in 60 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--procs", type=int, default=4, help="client processes")
    parser.add_argument("--rounds", type=int, default=5, help="state changes, one at a time")
    parser.add_argument("--concurrency", type=int, default=50, help="handshakes in flight")
    parser.add_argument("--timeout", type=float, default=15, help="seconds to wait per round")
    parser.add_argument("--pause", type=float, default=1.0, help="idle seconds before a round")
    args = parser.parse_args()

    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    limit = raise_fd_limit(2 * args.clients + 256)
    data = Path(tempfile.mkdtemp(prefix="quanta-fanout-"))
    env = {
        **os.environ,
        "DEBUG": "true",
        "DATA_DIR": str(data),
        "DATABASE_URL": f"sqlite:///{data / 'quanta.sqlite3'}",
        "REDIS_URL": redis_url,
        "DEMO_PASSWORD": PASSWORD,
        "LOG_LEVEL": "WARNING",
    }
    manage(env, "migrate", "--noinput")
    manage(env, "seed_demo")

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = data / "daphne.log"
    daphne = str(Path(sys.executable).with_name("daphne"))
    with log.open("wb") as out:
        server = subprocess.Popen(
            [daphne, "-b", "127.0.0.1", "-p", str(port), "portal.asgi:application"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    procs: list[multiprocessing.process.BaseProcess] = []
    try:
        wait_up(base, server, log)
        cookies = {user: sign_in(base, user) for user, _topic in SUBSCRIBERS}

        # This process makes the change: the same settings as the server.
        os.environ.update(env)
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
        sys.path[:0] = [str(data), str(ROOT)]
        import django

        django.setup()

        plan = [
            (cookies[SUBSCRIBERS[i % len(SUBSCRIBERS)][0]], SUBSCRIBERS[i % len(SUBSCRIBERS)][1])
            for i in range(args.clients)
        ]
        context = multiprocessing.get_context("spawn")
        results = context.Queue()
        orders = [context.Queue() for _ in range(args.procs)]
        for n in range(args.procs):
            share = plan[n :: args.procs]
            proc = context.Process(
                target=clients,
                args=(port, share, max(1, args.concurrency // args.procs), orders[n], results),
            )
            proc.start()
            procs.append(proc)

        opened, setup, errors = 0, 0.0, Counter[str]()
        for _ in procs:
            _kind, count, seconds, failed = results.get(timeout=600)
            opened += count
            setup = max(setup, seconds)
            errors.update(failed)
        print(f"{opened} of {args.clients} clients subscribed in {setup:.1f} s", flush=True)
        for error, count in errors.most_common(5):
            print(f"  {count} × {error}", flush=True)

        all_delays: list[float] = []
        missing_total = 0
        per_topic: dict[str, list[float]] = {}
        per_topic_expected: Counter[str] = Counter()
        cpu_notes: list[str] = []
        rows = []
        for number in range(args.rounds):
            time.sleep(args.pause)
            reason = f"fan-out round {number + 1}"
            workload = make_workload()
            cpu_before = [cpu_ms(server.pid), *(cpu_ms(p.pid or 0) for p in procs)]
            t0 = time.time()
            moved, took = move(workload, reason)
            if not moved:
                raise SystemExit("the transition was refused")
            for order in orders:
                order.put((number, t0, reason, args.timeout))
            delays: list[float] = []
            missing = 0
            for _ in procs:
                _kind, _number, got, lost, by_topic, expected = results.get(
                    timeout=args.timeout + 60
                )
                delays += got
                missing += lost
                per_topic_expected.update(expected)
                for topic, values in by_topic.items():
                    per_topic.setdefault(topic, []).extend(values)
            all_delays += delays
            missing_total += missing
            cpu_after = [cpu_ms(server.pid), *(cpu_ms(p.pid or 0) for p in procs)]
            used = [
                (after or 0) - (before or 0)
                for before, after in zip(cpu_before, cpu_after, strict=True)
            ]
            cpu_notes.append(
                f"round {number + 1}: daphne {used[0]:.0f} ms CPU, clients {sum(used[1:]):.0f} ms"
            )
            row = summary(f"round {number + 1}", delays, missing, took)
            rows.append(row)
            print(row, flush=True)
        for order in orders:
            order.put(None)
        for proc in procs:
            proc.join(timeout=60)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()

    print()
    print(f"clients: {args.clients} requested, {opened} subscribed; fd soft limit {limit}")
    print("| what | received | p50 (ms) | p99 (ms) | max (ms) |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(row)
    print(summary("all rounds", all_delays, missing_total, None))
    for topic, expected_count in sorted(per_topic_expected.items()):
        values = per_topic.get(topic, [])
        print(summary(f"all rounds, {topic}", values, expected_count - len(values), None))
    print("CPU while waiting for each round (includes the idle wait for stragglers):")
    for note in cpu_notes:
        print(f"  {note}")
    print(f"(daphne log: {log})")


def summary(label: str, delays: list[float], missing: int, took: float | None) -> str:
    total = len(delays) + missing
    if not delays:
        return f"| {label} | 0 of {total} | – | – | – |"
    ms = [d * 1000 for d in delays]
    note = f" (transition call {took * 1000:.0f} ms)" if took is not None else ""
    return (
        f"| {label}{note} | {len(delays)} of {total} | {statistics.median(ms):.0f} | "
        f"{percentile(ms, 0.99):.0f} | {max(ms):.0f} |"
    )


def make_workload() -> Any:
    """A waiting notebook of student1 in ML-101, made directly (no admission task queued)."""
    from django.contrib.auth import get_user_model

    from tenants.models import Tenant
    from workloads.choices import State, WorkloadKind
    from workloads.models import AppTemplate, Flavor, Workload
    from workloads.services import default_cluster

    return Workload.objects.create(
        kind=WorkloadKind.NOTEBOOK,
        name="fan-out",
        owner=get_user_model().objects.get(username="student1"),
        tenant=Tenant.objects.get(slug="ml-101"),
        cluster=default_cluster(),
        template=AppTemplate.objects.first(),
        flavor=Flavor.objects.get(slug="cpu-small"),
        state=State.PENDING,
    )


def move(workload: Any, reason: str) -> tuple[bool, float]:
    """One state change, Pending → Queued, committed; the listener publishes after commit,
    inside this call."""
    from workloads import lifecycle
    from workloads.choices import State

    start = time.perf_counter()
    moved = lifecycle.transition(workload.pk, State.QUEUED, reason=reason)
    return moved, time.perf_counter() - start


if __name__ == "__main__":
    main()
