"""The living demo: how fast the background load (``console.demo_load``) fills the simulated
GPU farm after `make run`, and what it leaves in the database.

Seeds the demo (``seed_demo``) into a throw-away SQLite database, then does what the embedded
beat of `manage.py serve` does with DEMO_LOAD=true: a load tick every ``--every`` seconds
(DEMO_LOAD_SECONDS, 5 by default) and a reconcile of the farm between ticks, in real time, for
``--seconds``. Every 10 s it records the farm's GPUs allocated and stranded, the load's
workloads running and waiting, and how many points of the home page's chart (the last
15 minutes in 15 s steps) are above zero.

    .venv/bin/python bench/demo_load.py [--seconds 120] [--every 5] [--out bench/demo_load.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from io import StringIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def setup_django() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DEBUG", "true")
    os.environ["DATA_DIR"] = tempfile.mkdtemp(prefix="quanta-bench-")
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("REDIS_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ["DEMO_PASSWORD"] = "bench"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    call_command("seed_demo", stdout=StringIO())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--every", type=float, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    setup_django()

    from django.db import connection
    from django.utils import timezone

    from console import demo_load
    from console.cluster_views import allocation_series, cluster_summaries
    from console.home import RECENT_STEP, RECENT_WINDOW
    from scheduling.models import Cluster
    from workloads import reconcile
    from workloads.choices import HOLDING, WAITING
    from workloads.models import Workload

    farm = Cluster.objects.get(slug=demo_load.CLUSTER)
    load = Workload.objects.filter(tenant__slug=demo_load.PROJECT[0])
    rows = []
    started = time.monotonic()
    next_tick = next_report = started
    while (now := time.monotonic()) - started <= args.seconds:
        if now >= next_tick:
            demo_load.tick()
            next_tick += args.every
        reconcile.reconcile(farm)
        if now >= next_report:
            summary = cluster_summaries([farm])[farm.pk].total
            at = timezone.now()
            series = allocation_series([farm], start=at - RECENT_WINDOW, now=at, step=RECENT_STEP)
            rows.append(
                (
                    round(now - started),
                    summary.allocated,
                    summary.devices,
                    summary.fragmented,
                    load.filter(state__in=HOLDING).count(),
                    load.filter(state__in=WAITING).count(),
                    load.count(),
                    sum(1 for _t, v in series[farm.pk] if v > 0),
                )
            )
            next_report += 10
        time.sleep(0.5)
    lines = [
        "# The living demo's background load",
        "",
        f"`.venv/bin/python bench/demo_load.py --seconds {args.seconds:g} --every {args.every:g}`"
        f" on {platform.node()} ({os.cpu_count()} cores, {connection.vendor}), "
        f"{timezone.now():%Y-%m-%d}.",
        "",
        "GPUs allocated counts all of the farm's work: the load's own and the demo students' "
        "simulated GPU sessions it starts; the load's columns count its own tenant only.",
        "",
        "| seconds | GPUs allocated | of | stranded GPUs | load running | load waiting "
        "| load workloads so far | chart points above 0 |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for second, allocated, devices, stranded, running, waiting, total, points in rows:
        lines.append(
            f"| {second} | {allocated:.2f} | {devices} | {stranded:.2f} | {running} | {waiting} "
            f"| {total} | {points} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
