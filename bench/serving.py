"""Model serving on the local backend (issue 13, Measure): gateway overhead, throughput at 1
and 2 replicas, cold start from zero, scale-up reaction time under a step in load.

Starts the portal as ``make run`` does (``manage.py serve`` on a free port, a fresh SQLite
database and DATA_DIR, the demo seeded, SSH gateway off), then as student1 (ML-101, which
the demo grants the model-server template): registers a scikit-learn LogisticRegression
trained by the serving interpreter and two ``custom`` models (one that spends a fixed CPU
time per request, one that sleeps), deploys endpoints and creates an API key for each. Then,
in one run:

* overhead: the same v2 infer request, one at a time, straight to the replica's UNIX socket
  and through the portal (``/serve/<name>/v2/models/<m>/infer`` with the key), interleaved;
* throughput: C concurrent clients for T seconds against a CPU-bound model at 1 replica and at
  2 replicas (two endpoints, min = max);
* cold start: an endpoint with min 0 scaled to zero (idle past scale_to_zero_after_s), then
  the time of the first request (a replica starts, loads the model, answers);
* reaction: an endpoint at 1 replica (max 2, target 2 in flight) gets a step from 0 to 8
  concurrent clients; the time until the autoscaler asks for 2 and until 2 answer.

    SERVING_PYTHON=.apps/serving/bin/python .venv/bin/python bench/serving.py
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
PASSWORD = "bench-pass"

SETUP = r"""
import io, json, subprocess, sys, tempfile, zipfile
from pathlib import Path
from django.conf import settings
from tenants.models import User, Tenant
from workloads import model_registry, serving
from workloads.models import Flavor

TRAIN = '''
import joblib, sys
from sklearn.linear_model import LogisticRegression
X = [[x / 10, (20 - x) / 10] for x in range(20)]
y = [0] * 10 + [1] * 10
joblib.dump(LogisticRegression().fit(X, y), sys.argv[1] + "/model.joblib")
'''
BUSY = '''
import time
class Model:
    def __init__(self, model_dir):
        pass
    def predict(self, rows):
        end = time.process_time() + 0.005  # 5 ms of CPU per request
        while time.process_time() < end:
            pass
        return [sum(row) for row in rows.tolist()]
'''
SLEEPY = '''
import time
class Model:
    def __init__(self, model_dir):
        pass
    def predict(self, rows):
        time.sleep(0.2)  # 200 ms per request, off the CPU (a GPU kernel, say)
        return [sum(row) for row in rows.tolist()]
'''


def archive(files):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        for name, data in files.items():
            bundle.writestr(name, data)
    buffer.seek(0)
    return buffer


student = User.objects.get(username="student1")
flavor = Flavor.objects.get(slug="cpu-small")
folder = Path(tempfile.mkdtemp())
subprocess.run([settings.SERVING_PYTHON, "-c", TRAIN, str(folder)], check=True)
versions = {}
for slug, framework, files in [
    ("logreg", "sklearn", {"model.joblib": (folder / "model.joblib").read_bytes()}),
    ("busy", "custom", {"model.py": BUSY}),
    ("sleepy", "custom", {"model.py": SLEEPY}),
]:
    model = model_registry.create_model(actor=student, name=slug, slug=slug)
    versions[slug] = model_registry.register_upload(
        actor=student, model=model, archive=archive(files), filename="m.zip", framework=framework
    )
out = {}
for name, model, options in [
    ("direct", "logreg", {"min_replicas": 1, "max_replicas": 1}),
    ("busy1", "busy", {"min_replicas": 1, "max_replicas": 1}),
    ("busy2", "busy", {"min_replicas": 2, "max_replicas": 2}),
    ("cold", "logreg", {"min_replicas": 0, "max_replicas": 1, "scale_to_zero_after_s": 10}),
    ("step", "sleepy", {"min_replicas": 1, "max_replicas": 2, "target_concurrency": 2}),
]:
    endpoint = serving.deploy(
        actor=student, version=versions[model], flavor=flavor, name=name, slug=name,
        rate_limit=100000, **options,
    )
    _key, secret = serving.create_key(actor=student, endpoint=endpoint)
    out[name] = {"key": secret, "workload": str(endpoint.workload_id), "model": model}
print("BENCH-SETUP " + json.dumps(out))
"""
# The endpoints ask for 1+1+2+1+2 = 7 replicas of cpu-small; ML-101's demo quota and the
# member limit of its model-server grant are raised for the bench (SETUP runs as the admin).
QUOTA = """
from tenants.models import Tenant, User
from tenants import services
from workloads.models import Grant
root = User.objects.filter(is_superuser=True).first()
ml = Tenant.objects.get(slug="ml-101")
Grant.objects.filter(tenant=ml, template__slug="model-server").update(member_limit=10)
for tenant in Tenant.objects.all():
    services.set_quota(actor=root, tenant=tenant, cpu_cores=64, memory_mib=262144)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p
    low, high = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def body(rows: int = 1) -> bytes:
    data = [0.3, 1.7] * rows
    return json.dumps(
        {"inputs": [{"name": "x", "shape": [rows, 2], "datatype": "FP64", "data": data}]}
    ).encode()


class Bench:
    def __init__(self, url: str, data_dir: Path, endpoints: dict[str, Any]) -> None:
        self.url = url
        self.data_dir = data_dir
        self.endpoints = endpoints

    def infer_url(self, name: str) -> str:
        return f"{self.url}/serve/{name}/v2/models/{self.endpoints[name]['model']}/infer"

    def headers(self, name: str) -> dict[str, str]:
        return {
            "authorization": f"Bearer {self.endpoints[name]['key']}",
            "content-type": "application/json",
        }

    def socket_of(self, name: str) -> str:
        workload = self.endpoints[name]["workload"]
        return str(self.data_dir / "workloads" / "local" / workload / "run" / "serving" / "r0.sock")

    async def stats(self, client: httpx.AsyncClient, name: str) -> dict[str, Any]:
        answer = await client.get(f"{self.url}/api/v1/endpoints/{name}/stats/")
        return dict(answer.json())

    async def wait_ready(self, client: httpx.AsyncClient, name: str, replicas: int) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            stats = await self.stats(client, name)
            if stats["state"] == "Running" and stats["replicas"]["ready"] >= replicas:
                return
            await asyncio.sleep(0.5)
        raise RuntimeError(f"{name} not ready: {stats}")

    async def overhead(self, n: int) -> dict[str, Any]:
        direct = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=self.socket_of("direct")))
        portal = httpx.AsyncClient(timeout=30)
        path = f"/v2/models/{self.endpoints['direct']['model']}/infer"
        times: dict[str, list[float]] = {"direct": [], "gateway": []}
        async with direct, portal:
            for _ in range(50):  # warm both paths (connections, caches)
                await direct.post("http://localhost" + path, content=body())
                await portal.post(
                    self.infer_url("direct"), content=body(), headers=self.headers("direct")
                )
            for _ in range(n):
                started = time.perf_counter()
                answer = await direct.post("http://localhost" + path, content=body())
                times["direct"].append(time.perf_counter() - started)
                assert answer.status_code == 200, answer.text
                started = time.perf_counter()
                answer = await portal.post(
                    self.infer_url("direct"), content=body(), headers=self.headers("direct")
                )
                times["gateway"].append(time.perf_counter() - started)
                assert answer.status_code == 200, answer.text
        out = {
            key: {
                "p50_ms": round(percentile(v, 0.5) * 1000, 3),
                "p99_ms": round(percentile(v, 0.99) * 1000, 3),
            }
            for key, v in times.items()
        }
        out["added_p50_ms"] = round(out["gateway"]["p50_ms"] - out["direct"]["p50_ms"], 3)
        out["added_p99_ms"] = round(out["gateway"]["p99_ms"] - out["direct"]["p99_ms"], 3)
        out["requests"] = n
        return out

    async def throughput(self, name: str, clients: int, seconds: float) -> dict[str, Any]:
        done = errors = 0
        latencies: list[float] = []
        stop_at = time.monotonic() + seconds
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=clients)) as c:

            async def worker() -> None:
                nonlocal done, errors
                while time.monotonic() < stop_at:
                    started = time.perf_counter()
                    answer = await c.post(
                        self.infer_url(name), content=body(), headers=self.headers(name)
                    )
                    latencies.append(time.perf_counter() - started)
                    if answer.status_code == 200:
                        done += 1
                    else:
                        errors += 1

            started = time.monotonic()
            await asyncio.gather(*(worker() for _ in range(clients)))
            elapsed = time.monotonic() - started
        return {
            "clients": clients,
            "requests_per_s": round(done / elapsed, 1),
            "p50_ms": round(percentile(latencies, 0.5) * 1000, 1),
            "p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
            "errors": errors,
        }

    async def cold_start(self, client: httpx.AsyncClient, rounds: int) -> list[float]:
        out = []
        for _ in range(rounds):
            # One request (so this process's autoscaler follows the endpoint), then idle
            # until it is at zero.
            await client.post(self.infer_url("cold"), content=body(), headers=self.headers("cold"))
            deadline = time.monotonic() + 60
            while (await self.stats(client, "cold"))["replicas"]["desired"] > 0:
                if time.monotonic() > deadline:
                    raise RuntimeError("the cold endpoint never scaled to zero")
                await asyncio.sleep(0.5)
            await asyncio.sleep(1.0)  # the replica's process is gone
            started = time.perf_counter()
            answer = await client.post(
                self.infer_url("cold"), content=body(), headers=self.headers("cold"), timeout=90
            )
            out.append(round(time.perf_counter() - started, 3))
            assert answer.status_code == 200, answer.text
        return out

    async def reaction(self, client: httpx.AsyncClient, clients: int) -> dict[str, Any]:
        stop = asyncio.Event()

        async def worker(c: httpx.AsyncClient) -> None:
            while not stop.is_set():
                await c.post(self.infer_url("step"), content=body(), headers=self.headers("step"))

        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=clients)) as c:
            started = time.monotonic()
            tasks = [asyncio.ensure_future(worker(c)) for _ in range(clients)]
            asked = ready = None
            while time.monotonic() - started < 60 and ready is None:
                replicas = (await self.stats(client, "step"))["replicas"]
                if asked is None and replicas["desired"] >= 2:
                    asked = time.monotonic() - started
                if replicas["ready"] >= 2:
                    ready = time.monotonic() - started
                await asyncio.sleep(0.05)
            stop.set()
            await asyncio.gather(*tasks)
        return {
            "clients": clients,
            "asked_for_2_s": round(asked, 2) if asked is not None else None,
            "2_ready_s": round(ready, 2) if ready is not None else None,
        }


async def measure(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    token_client = httpx.AsyncClient(
        timeout=30, headers={"authorization": f"Bearer {args.api_token}"}
    )
    async with token_client as client:
        for name, replicas in [("direct", 1), ("busy1", 1), ("busy2", 2), ("cold", 1), ("step", 1)]:
            await bench.wait_ready(client, name, replicas)
        results: dict[str, Any] = {"overhead": await bench.overhead(args.requests)}
        results["throughput"] = {
            "1_replica": await bench.throughput("busy1", args.clients, args.seconds),
            "2_replicas": await bench.throughput("busy2", args.clients, args.seconds),
        }
        results["cold_start_s"] = await bench.cold_start(client, args.cold_rounds)
        results["reaction"] = await bench.reaction(client, 8)
    return results


def manage(args: list[str], env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if result.returncode:
        raise RuntimeError(f"manage.py {args[0]}: {result.stdout}\n{result.stderr}")
    return result.stdout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--cold-rounds", type=int, default=3)
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="qsb-", dir="/tmp"))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(
        DJANGO_SETTINGS_MODULE="portal.settings",
        DEBUG="true",
        DATA_DIR=str(data_dir),
        DATABASE_URL=f"sqlite:///{data_dir / 'quanta.sqlite3'}",
        DEMO_PASSWORD=PASSWORD,
        SSH_GATEWAY_PORT="0",
        PYTHONPATH=str(ROOT),
    )
    url = f"http://127.0.0.1:{port}"
    server = None
    try:
        manage(["migrate", "--noinput"], env)
        manage(["seed_demo", "--url", url + "/"], env)
        manage(["shell", "-c", QUOTA], env)
        token = manage(
            ["shell", "-c", "from tenants.models import User; from tenants.services import "
             "create_api_token; print(create_api_token(actor=User.objects.get(username="
             "'student1'), name='bench')[1])"],
            env,
        ).strip().splitlines()[-1]  # fmt: skip
        log = open(data_dir / "serve.log", "wb")  # noqa: SIM115 (open while the server runs)
        server = subprocess.Popen(
            [sys.executable, "manage.py", "serve", f"127.0.0.1:{port}"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the portal did not start")
            time.sleep(0.3)
        setup = manage(["shell", "-c", SETUP], env)
        line = next(x for x in setup.splitlines() if x.startswith("BENCH-SETUP "))
        endpoints = json.loads(line.split(" ", 1)[1])
        args.api_token = token
        results = asyncio.run(measure(Bench(url, data_dir, endpoints), args))
        results["host"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
        print(json.dumps(results, indent=1))
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
        # Replicas run in sessions of their own: end what is left that names the data dir.
        for process in psutil.process_iter(["pid", "cmdline"]):
            if any(str(data_dir) in part for part in process.info["cmdline"] or ()):
                with contextlib.suppress(psutil.Error):
                    process.terminate()
        time.sleep(1)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
