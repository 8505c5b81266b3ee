"""Kubernetes inventory sync at campus scale: 1,000 GPU nodes and 10,000 pods in one pass.

An emulated API server (the test suite's, on 127.0.0.1) holds a synthetic cluster; the
Kubernetes backend lists nodes and live pods through the official client (pages of 500), turns
them into node inventories, and scheduling.inventory.sync_inventory writes the Node and
GpuDevice rows. Three passes: a fresh database, the same cluster again (nothing changed), and
the cluster with ten changes (a cordon, a taint, a label, a node gone, a node NotReady, a
memory change, others' pods arriving on four nodes; and GPU feature discovery re-stamping
every node, which must cost nothing). Reports the time of each stage and the database writes
(rows and statements).

    .venv/bin/python bench/k8s_sync.py [--nodes 1000] [--pods 10000] [--out bench/k8s_sync.md]

Uses a throw-away SQLite database unless DATABASE_URL is set.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)


def setup_django() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DEBUG", "true")
    os.environ.setdefault("DATA_DIR", tempfile.mkdtemp(prefix="quanta-bench-"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def one_pass(backend: Any, cluster: Any) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scheduling.inventory import sync_inventory

    calls = backend.kube.calls
    started = time.perf_counter()
    inventory = backend.inventory()
    listed = time.perf_counter()
    with CaptureQueriesContext(connection) as queries:
        result = sync_inventory(cluster, inventory)
    synced = time.perf_counter()
    statements = sum(1 for q in queries.captured_queries if WRITE.match(q["sql"]))
    return {
        "nodes": len(inventory),
        "list": listed - started,
        "sync": synced - listed,
        "total": synced - started,
        "requests": backend.kube.calls - calls,
        "rows": result.rows_written,
        "statements": statements,
        "result": result,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--out", help="write the results as Markdown here")
    args = parser.parse_args()

    setup_django()
    from django.db import connection

    from scheduling.backends.kubernetes import KubernetesBackend, KubernetesConfig
    from scheduling.models import Cluster
    from tests.scheduling.kubernetes import synthetic
    from tests.scheduling.kubernetes.emulator import ApiServer

    nodes, pods = synthetic.cluster(args.nodes, args.pods)
    changed_nodes, changed_pods = synthetic.ten_changes(nodes, pods)
    rows = []
    with ApiServer() as api:
        api.check_namespaces = False
        for obj in nodes + pods:
            api.put(obj)
        config = KubernetesConfig.from_mapping(
            {"host": api.url, "gpu_products": {"V100M32": "Tesla-V100-SXM2-32GB"}}
        )
        backend = KubernetesBackend(config)
        cluster, _ = Cluster.objects.get_or_create(
            slug="bench", defaults={"name": "Bench", "backend": "kubernetes"}
        )
        rows.append(("first sync (empty database)", one_pass(backend, cluster)))
        rows.append(("same cluster again", one_pass(backend, cluster)))
        with api.cond:
            for obj in api.all("nodes") + api.all("pods"):
                meta = obj["metadata"]
                plural = obj["kind"].lower() + "s"
                api.remove(plural, meta.get("namespace", ""), meta["name"], cascade=False)
            for obj in changed_nodes + changed_pods:
                api.put(obj)
        rows.append(("ten changes", one_pass(backend, cluster)))

    lines = [
        f"{args.nodes} nodes, {args.pods} pods, database {connection.vendor}",
        "",
        "| pass | list + parse (s) | DB sync (s) | total (s) | API requests | rows written "
        "| write statements |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in rows:
        lines.append(
            f"| {name} | {row['list']:.2f} | {row['sync']:.2f} | {row['total']:.2f} "
            f"| {row['requests']} | {row['rows']} | {row['statements']} |"
        )
    lines.append("")
    lines.append(f"ten changes: {rows[2][1]['result']}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
