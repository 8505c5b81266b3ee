"""Launch latency: from the launch request to Running, and to the first JupyterLab page
through the proxy, as a student sees it.

Starts the embedded portal (`manage.py serve`, SQLite, in-process tasks, local backend) on a
free port with a fresh data directory and the demo data, signs in as student1 over HTTP, and
launches JupyterLab N times (stopping each before the next: one session per student).

    .venv/bin/python bench/launch.py --runs 10 [--out bench/launch.md]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def wait(predicate, timeout: float, what: str, every: float = 0.02):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(every)
    raise SystemExit(f"timed out waiting for {what}")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p
    low, high = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def start_portal(password: str, **extra_env: str) -> tuple[subprocess.Popen[bytes], str, Path]:
    """The embedded portal (SQLite, in-process tasks, local backend) with a fresh data
    directory and the demo data, on a free port: the server, its address, its data dir."""
    data = Path(tempfile.mkdtemp(prefix="quanta-bench-"))
    port = free_port()
    env = {
        **os.environ,
        "DEBUG": "true",
        "DATA_DIR": str(data),
        "DEMO_PASSWORD": password,
        "LOG_LEVEL": "WARNING",
        **extra_env,
    }
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    manage(env, "migrate", "--noinput")
    manage(env, "seed_demo")
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return server, f"http://127.0.0.1:{port}", data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    server, base, _data = start_portal("bench-pass")
    to_running: list[float] = []
    to_page: list[float] = []
    try:
        client = httpx.Client(base_url=base, timeout=30)
        wait(lambda: _up(client), 60, "the portal to answer")
        client.get("/login/")
        client.post(
            "/login/",
            data={
                "username": "student1",
                "password": "bench-pass",
                "csrfmiddlewaretoken": client.cookies["csrftoken"],
            },
            headers={"Referer": base + "/login/"},
        )
        headers = {"X-CSRFToken": client.cookies["csrftoken"], "Referer": base + "/"}
        for run in range(args.runs):
            running, page = launch_once(client, headers)
            to_running.append(running)
            to_page.append(page)
            print(
                f"run {run + 1}: Running after {running:.2f} s, page after {page:.2f} s", flush=True
            )
    finally:
        server.terminate()
        server.wait(timeout=30)

    lines = [
        "| measure | median (s) | p90 (s) | min (s) | max (s) |",
        "|---|---|---|---|---|",
    ]
    for label, values in (("launch → Running", to_running), ("launch → first page", to_page)):
        lines.append(
            f"| {label} | {statistics.median(values):.2f} | "
            f"{percentile(values, 0.9):.2f} | {min(values):.2f} | {max(values):.2f} |"
        )
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")


def launch_once(client: httpx.Client, headers: dict[str, str]) -> tuple[float, float]:
    """Launch, wait for Running and the first page, stop; the two durations in seconds."""
    start = time.perf_counter()
    launched = client.post(
        "/api/v1/workloads/launch/",
        json={"template": "jupyter-pytorch", "flavor": "cpu-small"},
        headers=headers,
    )
    launched.raise_for_status()
    url = f"/api/v1/workloads/{launched.json()['id']}/"

    def running() -> dict | None:  # type: ignore[type-arg]
        body = client.get(url).json()
        if body["state"] in ("Failed", "Rejected", "Stopped"):
            raise SystemExit(f"the launch ended {body['state']}: {body['reason']}")
        return body if body["state"] == "Running" else None

    body = wait(running, 120, "Running")
    to_running = time.perf_counter() - start
    wait(lambda: client.get(body["open_url"]).status_code == 200, 60, "the page")
    to_page = time.perf_counter() - start
    client.post(url + "stop/", headers=headers)
    wait(lambda: client.get(url).json()["state"] == "Stopped", 60, "Stopped", every=0.2)
    return to_running, to_page


def _up(client: httpx.Client) -> bool:
    try:
        return client.get("/healthz").status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    main()
