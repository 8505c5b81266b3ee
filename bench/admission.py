"""Admission at campus scale: one scheduling session over a line of 10 to 10,000 waiting
workloads on a full 1,000-node simulated cluster.

The cluster is the simulated backend's mix at 1,000 nodes (500 × 8 A100, 500 × 8 V100M32,
synced into Node and GpuDevice rows as `serve` does), every GPU held by running work (8,000
allocation rows). The line: N workloads from 100 students in 10 classes — 1 GPU, 2 GPUs, half
a GPU, a 2-worker gang, and a tenth from a class whose GPU quota is spent. For each N three
sessions (``services.admit_queued``) are measured:

- **first**: the line is new (Pending); every workload gets its reason (N writes, necessarily);
- **steady**: nothing changed since the last session (the case the beat repeats every 3 s);
- **8 GPUs freed**: one node's running work has stopped; eight 1-GPU workloads start.

Reports seconds and SQL queries per session. The dispatcher (which enqueues the backend
submits after commit) is switched off: what is measured is admission alone.

    .venv/bin/python bench/admission.py [--waiting 10,100,1000,10000] [--out bench/admission.md]

Uses a throw-away SQLite database unless DATABASE_URL is set; with DATABASE_URL the tables of
that database are emptied before each size (use a database of its own).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)
NODES = 1000


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

    from workloads import dispatch, lifecycle

    if dispatch.dispatch in lifecycle._listeners:
        lifecycle._listeners.remove(dispatch.dispatch)


def build(waiting: int) -> Any:
    """The tenants, the full cluster and ``waiting`` Pending workloads; returns the cluster."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from scheduling.inventory import sync_backend_nodes
    from scheduling.models import Allocation, Cluster, GpuDevice, Node
    from tenants import services as tenant_services
    from tenants.choices import TenantKind
    from workloads.choices import State, WorkloadKind
    from workloads.models import AppTemplate, Flavor, Grant, Image, Workload

    call_command("flush", interactive=False, verbosity=0)
    User = get_user_model()
    root = User.objects.create_user(username="root", is_superuser=True)
    school = tenant_services.create_tenant(
        actor=root, kind=TenantKind.ORGANISATION, name="Uni", slug="uni"
    )
    dept = tenant_services.create_tenant(
        actor=root, kind=TenantKind.DEPARTMENT, name="CS", slug="cs", parent=school
    )
    classes = [
        tenant_services.create_tenant(
            actor=root, kind=TenantKind.CLASS, name=f"C{i}", slug=f"c{i}", parent=dept
        )
        for i in range(10)
    ]
    tenant_services.set_quota(actor=root, tenant=classes[-1], gpus=0)  # spent: waits for quota
    User.objects.bulk_create([User(username=f"s{i:03d}") for i in range(100)])
    students = list(User.objects.filter(username__startswith="s").order_by("username"))

    cluster = Cluster.objects.create(
        name="Farm",
        slug="farm",
        backend="simulated",
        config={
            "mix": [
                {
                    "count": NODES // 2,
                    "gpus": 8,
                    "model": model,
                    "gpu_memory_mib": memory,
                    "cpu_milli": 96000,
                    "memory_mib": 786432,
                }
                for model, memory in (("A100", 40960), ("V100M32", 32768))
            ]
        },
    )
    sync_backend_nodes(cluster)
    assert Node.objects.filter(cluster=cluster).count() == NODES

    image = Image.objects.create(name="PyTorch", slug="pytorch")
    flavors = {
        "full": Flavor.objects.create(
            name="8 GPUs", slug="8gpu", cpu_milli=32000, memory_mib=262144, gpus=8
        ),
        "one": Flavor.objects.create(
            name="1 GPU", slug="gpu", cpu_milli=4000, memory_mib=16384, gpus=1
        ),
        "two": Flavor.objects.create(
            name="2 GPUs", slug="2gpu", cpu_milli=8000, memory_mib=32768, gpus=2
        ),
        "half": Flavor.objects.create(
            name="half GPU",
            slug="half",
            cpu_milli=2000,
            memory_mib=8192,
            gpu_milli=500,
            gpu_memory_mib=16384,
        ),
    }
    template = AppTemplate.objects.create(
        name="JupyterLab",
        slug="jupyter",
        kind="jupyter",
        image=image,
        default_flavor=flavors["one"],
    )
    template.allowed_flavors.set(flavors.values())
    grants = {}
    for tenant in classes:
        grants[tenant.pk] = Grant.objects.create(template=template, tenant=tenant, member_limit=99)
        grants[tenant.pk].flavors.set(flavors.values())

    def workload(i: int, state: str, flavor: Flavor, **extra: Any) -> Workload:
        tenant = classes[i % len(classes)]
        return Workload(
            kind=extra.pop("kind", WorkloadKind.NOTEBOOK),
            name=f"w{i}",
            owner=students[i % len(students)],
            tenant=tenant,
            cluster=cluster,
            template=template,
            grant=grants[tenant.pk],
            flavor=flavor,
            image=image,
            state=state,
            **extra,
        )

    # Every GPU held: one 8-GPU environment per node (from the first nine classes).
    running = Workload.objects.bulk_create(
        [workload(i * 10 + i % 9, State.RUNNING, flavors["full"]) for i in range(NODES)],
        batch_size=500,
    )
    devices: dict[int, list[Any]] = {}
    for device in GpuDevice.objects.filter(node__cluster=cluster).order_by("node", "index"):
        devices.setdefault(device.node_id, []).append(device)
    allocations = []
    for run, node in zip(running, Node.objects.filter(cluster=cluster).order_by("pk"), strict=True):
        for i, device in enumerate(devices[node.pk]):
            allocations.append(
                Allocation(
                    workload=run,
                    task=0,
                    node=node,
                    device=device,
                    gpu_milli=1000,
                    gpu_memory_mib=device.memory_mib,
                    cpu_milli=32000 if i == 0 else 0,
                    memory_mib=262144 if i == 0 else 0,
                )
            )
    Allocation.objects.bulk_create(allocations, batch_size=500)

    line = []
    for i in range(waiting):
        kind = i % 10
        if kind < 6:
            line.append(workload(i, State.PENDING, flavors["one"]))
        elif kind == 6:
            line.append(workload(i, State.PENDING, flavors["two"]))
        elif kind == 7:
            line.append(workload(i, State.PENDING, flavors["half"]))
        else:  # 8: a 2-worker gang job; 9: from the class whose GPU quota is spent
            line.append(
                workload(i, State.PENDING, flavors["one"], kind=WorkloadKind.JOB, workers=2)
            )
    Workload.objects.bulk_create(line, batch_size=500)
    return cluster


def session(cluster: Any) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from workloads import services

    connection.queries_log = deque(maxlen=10**7)  # Django keeps the last 9,000 by default
    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        admitted = services.admit_queued(cluster)
        seconds = time.perf_counter() - started
    sql = [q["sql"] for q in queries.captured_queries]
    return {
        "seconds": seconds,
        "queries": len(sql),
        "writes": sum(1 for q in sql if WRITE.match(q)),
        "started": admitted,
    }


def free_one_node(cluster: Any) -> None:
    """The 8-GPU environment on the first node ends (its allocations go)."""
    from scheduling.models import Allocation, Node
    from workloads.choices import State
    from workloads.lifecycle import transition

    node = Node.objects.filter(cluster=cluster).order_by("pk").first()
    holder = Allocation.objects.filter(node=node).values_list("workload", flat=True).first()
    transition(holder, State.STOPPED, reason="bench: ended")
    assert not Allocation.objects.filter(node=node).exists()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waiting", default="10,100,1000,10000")
    parser.add_argument("--out", help="write the results as Markdown here")
    args = parser.parse_args()

    setup_django()
    from django.db import connection

    from workloads.choices import State
    from workloads.models import Workload

    rows = []
    for waiting in [int(n) for n in args.waiting.split(",")]:
        cluster = build(waiting)
        first = session(cluster)
        steady = session(cluster)
        free_one_node(cluster)
        freed = session(cluster)
        queued = Workload.objects.filter(cluster=cluster, state=State.QUEUED).count()
        rows.append((waiting, first, steady, freed, queued))
        print(waiting, first, steady, freed, queued, flush=True)

    lines = [
        f"{NODES} nodes, database {connection.vendor}",
        "",
        "| waiting | first session (s) | queries | steady session (s) | queries "
        "| 8 GPUs freed (s) | queries | started |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for waiting, first, steady, freed, _queued in rows:
        lines.append(
            f"| {waiting:,} | {first['seconds']:.2f} | {first['queries']:,} "
            f"| {steady['seconds']:.2f} | {steady['queries']:,} "
            f"| {freed['seconds']:.2f} | {freed['queries']:,} | {freed['started']} |"
        )
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
