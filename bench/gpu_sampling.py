"""GPU utilisation sampling: the cost of one beat tick at campus scale, and the rows the
history holds once it has run for longer than it keeps.

- **tick**: ``workloads.utilisation.sample`` over a cluster of ``--nodes`` × 8 GPUs whose
  backend reads every device (half of them held by running 1-GPU workloads): seconds and SQL
  queries for one tick (readings matched to devices, device and workload samples written,
  both histories compacted), after a first tick has warmed the caches.
- **bound**: a small cluster (``--history-nodes`` × 8 GPUs) sampled every 60 s for
  ``--hours`` of simulated time with the default retention (24 h kept, 60 minutes at full
  resolution, 10-minute buckets before): the rows per device and per workload at the end.

The backend's readings are made up in-process (what NVML or Prometheus would return is not
what is measured); everything else is the portal's code on its database.

    .venv/bin/python bench/gpu_sampling.py [--nodes 750] [--history-nodes 2] [--hours 26]

Uses a throw-away SQLite database unless DATABASE_URL is set (then its tables are written:
use a database of its own).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def setup_django() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DEBUG", "true")
    os.environ.setdefault("DATA_DIR", tempfile.mkdtemp(prefix="quanta-bench-"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.pop("REDIS_URL", None)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


class Readings:
    """A backend that reads every device of its nodes: random utilisation and memory."""

    kind = "bench"

    def __init__(self, nodes: list[str]) -> None:
        self.nodes = nodes
        self.random = random.Random(7)

    def gpu_readings(self) -> tuple[Any, ...]:
        from scheduling.backends.base import GpuReading

        return tuple(
            GpuReading(node, index, self.random.randint(0, 100), self.random.randint(0, 40960))
            for node in self.nodes
            for index in range(8)
        )


def build(slug: str, nodes: int) -> tuple[Any, list[str]]:
    """A cluster of ``nodes`` × 8 A100 rows, every other device held by a running workload."""
    from django.contrib.auth import get_user_model

    from scheduling.models import Allocation, Cluster, GpuDevice, Node
    from tenants.choices import TenantKind
    from tenants.models import Tenant
    from workloads.choices import State, WorkloadKind
    from workloads.models import Flavor, Workload

    user = get_user_model().objects.get_or_create(username="bench")[0]
    tenant = Tenant.objects.get_or_create(
        slug="bench", defaults={"name": "Bench", "kind": TenantKind.CLASS}
    )[0]
    flavor = Flavor.objects.get_or_create(
        slug="gpu-1", defaults={"name": "1 GPU", "cpu_milli": 1000, "memory_mib": 1024, "gpus": 1}
    )[0]
    cluster = Cluster.objects.create(name=slug, slug=slug, backend="simulated")
    names = [f"{slug}-{i:04d}" for i in range(nodes)]
    rows = Node.objects.bulk_create(
        [Node(cluster=cluster, name=n, cpu_milli=96000, memory_mib=786432) for n in names]
    )
    devices = GpuDevice.objects.bulk_create(
        [GpuDevice(node=n, index=i, model="A100", memory_mib=40960) for n in rows for i in range(8)]
    )
    held = devices[::2]
    now = dt.datetime.now(dt.UTC)
    workloads = Workload.objects.bulk_create(
        [
            Workload(
                kind=WorkloadKind.NOTEBOOK,
                name=f"nb-{i}",
                owner=user,
                tenant=tenant,
                cluster=cluster,
                flavor=flavor,
                state=State.RUNNING,
                started_at=now,
                gpu_idle_percent=5,
                gpu_idle_minutes=60,
            )
            for i in range(len(held))
        ]
    )
    Allocation.objects.bulk_create(
        [
            Allocation(workload=w, node=d.node, device=d, gpu_milli=1000)
            for w, d in zip(workloads, held, strict=True)
        ]
    )
    return cluster, names


def tick(args: argparse.Namespace, backends: dict[int, Any]) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from workloads import utilisation

    cluster, names = build("tick", args.nodes)
    backends[cluster.pk] = Readings(names)
    now = dt.datetime.now(dt.UTC)
    utilisation.sample(now=now)  # warm
    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        done = utilisation.sample(now=now + dt.timedelta(seconds=60))
        seconds = time.perf_counter() - started
    return {
        "gpus": args.nodes * 8,
        "seconds": seconds,
        "queries": len(queries.captured_queries),
        "device_rows": done.devices,
        "workload_rows": done.workloads,
    }


def bound(args: argparse.Namespace, backends: dict[int, Any]) -> dict[str, Any]:
    from scheduling.backends import registry
    from scheduling.models import Cluster, GpuSample
    from workloads import utilisation
    from workloads.models import WorkloadGpuSample

    for other in Cluster.objects.filter(slug="tick"):  # the tick's cluster reads no more
        backends.pop(other.pk, None)
    registry.forget()  # built backends are kept per cluster: drop the tick's
    cluster, names = build("hist", args.history_nodes)
    backends[cluster.pk] = Readings(names)
    start = dt.datetime.now(dt.UTC) - dt.timedelta(hours=args.hours)
    ticks = args.hours * 60
    started = time.perf_counter()
    for minute in range(ticks):
        utilisation.sample(now=start + dt.timedelta(minutes=minute))
    seconds = time.perf_counter() - started
    devices = args.history_nodes * 8
    device_rows = GpuSample.objects.filter(device__node__cluster=cluster).count()
    workload_rows = WorkloadGpuSample.objects.filter(workload__cluster=cluster).count()
    return {
        "ticks": ticks,
        "seconds_per_tick": seconds / ticks,
        "rows_per_device": device_rows / devices,
        "rows_per_workload": workload_rows / (devices // 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=750)
    parser.add_argument("--history-nodes", type=int, default=2)
    parser.add_argument("--hours", type=int, default=26)
    args = parser.parse_args()
    setup_django()
    from scheduling.backends import registry

    backends: dict[int, Any] = {}
    registry._build = lambda cluster: backends.get(cluster.pk) or Readings([])  # type: ignore[assignment]
    registry.forget()
    one = tick(args, backends)
    print(
        f"tick: {one['gpus']} GPUs, {one['workload_rows']} workloads: {one['seconds']:.2f} s, "
        f"{one['queries']} queries ({one['device_rows']} device rows written)"
    )
    history = bound(args, backends)
    print(
        f"bound: {history['ticks']} ticks ({args.hours} h at 60 s), "
        f"{history['seconds_per_tick'] * 1000:.0f} ms per tick on {args.history_nodes * 8} GPUs; "
        f"rows per device {history['rows_per_device']:.0f}, "
        f"per workload {history['rows_per_workload']:.0f}"
    )


if __name__ == "__main__":
    main()
