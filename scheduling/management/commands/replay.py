"""`manage.py replay`: replay an openb-format trace under placement policies.

Thin on purpose: arguments in, scheduling.core does the work, files out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling.core import plots
from scheduling.core.policies import POLICIES, RECOMMENDED
from scheduling.core.replay import summarize_arrival
from scheduling.core.report import arrival_runs, time_runs, time_summary, write_arrival, write_time
from scheduling.core.trace import TraceError, load_nodes, load_tasks


class Command(BaseCommand):
    help = (
        "Replay a trace (openb CSV format) under placement policies: the paper's arrival mode "
        "(unallocated GPU %% at arrived = 100 %%) or a time mode with queueing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--nodes", required=True, help="node CSV (sn,cpu_milli,...)")
        parser.add_argument("--pods", required=True, help="pod CSV (name,cpu_milli,...)")
        parser.add_argument(
            "--policy",
            action="append",
            help=f"policy name, repeatable or comma-separated: {', '.join(POLICIES)}; "
            f"'all' for every one (default: {RECOMMENDED}, the recommended policy)",
        )
        parser.add_argument("--mode", choices=("arrival", "time"), default="arrival")
        parser.add_argument("--seeds", type=int, default=10, help="runs per policy (10)")
        parser.add_argument("--first-seed", type=int, default=42, help="seeds count up from here")
        parser.add_argument(
            "--target", type=float, default=1.3, help="arrival mode: GPU demand / capacity (1.3)"
        )
        parser.add_argument(
            "--time-scale", type=float, default=1.0, help="time mode: compress arrivals by this"
        )
        parser.add_argument("--out", default="var/replay", help="directory for CSV and PNG")
        parser.add_argument("--json", dest="json_path", help="write a JSON summary here")

    def handle(self, *args: Any, **opts: Any) -> None:
        given = opts["policy"] or [RECOMMENDED]
        policies = [p.strip() for item in given for p in item.split(",") if p.strip()]
        if "all" in policies:
            policies = list(POLICIES)
        if not policies:
            raise CommandError("--policy names no policy")
        unknown = [p for p in policies if p not in POLICIES]
        if unknown:
            raise CommandError(
                f"unknown policy {', '.join(unknown)}; choose from {', '.join(POLICIES)}"
            )
        if opts["seeds"] < 1:
            raise CommandError("--seeds must be at least 1")
        if not 0 < opts["target"] <= 1.3:
            raise CommandError("--target must be in (0, 1.3]")
        try:
            nodes = load_nodes(opts["nodes"])
            tasks = load_tasks(
                opts["pods"],
                known_models={n.gpu_model for n in nodes if n.gpu_count},
                require_times=opts["mode"] == "time",
            )
        except TraceError as exc:
            raise CommandError(str(exc)) from exc
        seeds = list(range(opts["first_seed"], opts["first_seed"] + opts["seeds"]))
        out = Path(opts["out"])
        meta = {
            "mode": opts["mode"],
            "nodes": opts["nodes"],
            "pods": opts["pods"],
            "seeds": seeds,
        }

        def report(run: Any) -> None:
            self.stdout.write(f"{run.policy} seed {run.seed}: {run.summary()}")

        if opts["mode"] == "arrival":
            runs = arrival_runs(nodes, tasks, policies, seeds, opts["target"], on_run=report)
            files = write_arrival(runs, out)
            summary = {**meta, "target": opts["target"], "policies": summarize_arrival(runs)}
        else:
            truns = time_runs(nodes, tasks, policies, seeds, opts["time_scale"], on_run=report)
            files = write_time(truns, out)
            summary = {**meta, "time_scale": opts["time_scale"], "policies": time_summary(truns)}
        if opts["json_path"]:
            path = Path(opts["json_path"])
            path.write_text(json.dumps(summary, indent=2) + "\n")
            files.append(path)
        for name, numbers in summary["policies"].items():
            headline = numbers.get("unallocated_gpu_pct") or numbers.get("queueing_delay_mean_s")
            self.stdout.write(f"{name}: {headline}")
        if not plots.available():
            self.stderr.write(plots.MISSING)
        self.stdout.write(self.style.SUCCESS("wrote " + ", ".join(str(f) for f in files)))
