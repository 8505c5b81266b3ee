"""Capacity what-if for admins: replay a workload trace on an inventory under several
placement policies and compare how much GPU each hands out (the arrival mode of
``scheduling.core.replay``, the paper's metric)."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

from celery import shared_task
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from core.audit import record
from scheduling.core.model import Node as CoreNode
from scheduling.core.policies import POLICIES
from scheduling.core.replay import arrival_curve, run_arrival, summarize_arrival
from scheduling.core.trace import TraceError, load_nodes, load_tasks
from scheduling.models import Cluster, WhatIfRun

MAX_SEEDS = 5
MAX_TRACE_BYTES = 8 * 1024 * 1024
# A small trace shipped with Quanta (scripts/openb_sample.py made it from openb's default pod
# list): 60 GPU nodes and 800 pods, about a second per policy and seed, enough that the
# policies differ. The what-if page offers it as its default input.
SAMPLE_DIR = Path(__file__).resolve().parent / "data"
SAMPLE_NAME = "openb sample (60 nodes, 800 pods)"


def sample_trace() -> tuple[str, str]:
    """The shipped sample: (node list, pod list) as CSV text."""
    return (
        (SAMPLE_DIR / "openb_sample_nodes.csv").read_text(),
        (SAMPLE_DIR / "openb_sample_pods.csv").read_text(),
    )


def cluster_nodes(cluster: Cluster) -> list[CoreNode]:
    """A cluster's current nodes as the scheduler core sees them."""
    nodes = []
    for node in cluster.nodes.filter(gone_at__isnull=True).prefetch_related("gpus"):
        gpus = list(node.gpus.all())
        nodes.append(
            CoreNode(
                node.name,
                node.cpu_milli,
                node.memory_mib,
                gpu_count=len(gpus),
                gpu_model=gpus[0].model if gpus else "",
                unschedulable=node.cordoned,
            )
        )
    return nodes


def _parse(text: str, name: str, loader: Any, **kwargs: Any) -> Any:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_text(text)
        try:
            return loader(path, **kwargs)
        except TraceError as exc:
            field = "nodes_csv" if "node" in name else "pods_csv"
            where = _("line %(n)s") % {"n": exc.line}
            if exc.column:
                where += _(", column %(column)r") % {"column": exc.column}
            raise ValidationError({field: f"{name}, {where}: {exc.message}"}) from None


def inventory(run: WhatIfRun) -> list[CoreNode]:
    if run.nodes_csv:
        return list(_parse(run.nodes_csv, "nodes.csv", load_nodes))
    if run.cluster is None:
        raise ValidationError({"cluster": _("choose a cluster or upload a node list")})
    nodes = cluster_nodes(run.cluster)
    if not any(n.gpu_count for n in nodes):
        raise ValidationError(
            {"cluster": _("%(cluster)s has no GPUs to plan") % {"cluster": run.cluster.name}}
        )
    return nodes


def create(
    *,
    actor: Any,
    pods_csv: str,
    trace_name: str,
    policies: list[str],
    seeds: int,
    cluster: Cluster | None = None,
    nodes_csv: str = "",
) -> WhatIfRun:
    """Check everything (both files fully parsed), save the run, queue the replay."""
    unknown = [p for p in policies if p not in POLICIES]
    if not policies or unknown:
        raise ValidationError(
            {"policies": _("choose from %(policies)s") % {"policies": ", ".join(POLICIES)}}
        )
    if not 1 <= seeds <= MAX_SEEDS:
        raise ValidationError({"seeds": _("between 1 and %(n)s") % {"n": MAX_SEEDS}})
    if len(pods_csv.encode()) > MAX_TRACE_BYTES or len(nodes_csv.encode()) > MAX_TRACE_BYTES:
        raise ValidationError({"pods_csv": _("a trace file is limited to 8 MiB")})
    run = WhatIfRun(
        created_by=actor,
        pods_csv=pods_csv,
        trace_name=trace_name[:200],
        policies=list(dict.fromkeys(policies)),
        seeds=seeds,
        cluster=cluster,
        nodes_csv=nodes_csv,
    )
    nodes = inventory(run)
    models = {n.gpu_model for n in nodes if n.gpu_count}
    _parse(pods_csv, "pods.csv", load_tasks, known_models=models)
    with transaction.atomic():
        run.save()
        record("whatif.create", actor=actor, target=run, policies=run.policies, seeds=seeds)
        transaction.on_commit(lambda: replay.delay(run.pk))
    return run


def execute(run_id: int) -> WhatIfRun:
    """Run the replay (seconds per policy and seed) and store the summary and the curves."""
    claimed = WhatIfRun.objects.filter(pk=run_id, status=WhatIfRun.PENDING).update(
        status=WhatIfRun.RUNNING
    )
    run = WhatIfRun.objects.get(pk=run_id)
    if not claimed:
        return run
    try:
        nodes = inventory(run)
        tasks = _parse(
            run.pods_csv,
            "pods.csv",
            load_tasks,
            known_models={n.gpu_model for n in nodes if n.gpu_count},
        )
        runs = [
            run_arrival(nodes, tasks, policy, seed=42 + s)
            for policy in run.policies
            for s in range(run.seeds)
        ]
    except (ValidationError, ValueError) as exc:
        run.status, run.error = WhatIfRun.FAILED, "; ".join(getattr(exc, "messages", [str(exc)]))
    else:
        summary = summarize_arrival(runs)
        for item in summary.values():
            item.pop("runs", None)
        run.status = WhatIfRun.DONE
        run.result = _finite(
            {
                "summary": summary,
                "curve": arrival_curve(runs, step=2),
                "nodes": len(nodes),
                "gpus": sum(n.gpu_count for n in nodes),
                "tasks": len(tasks),
            }
        )
    run.save(update_fields=["status", "error", "result"])
    return run


def _finite(value: Any) -> Any:
    """JSON has no NaN: a metric that is undefined (no event at that arrived %) is null."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@shared_task(name="quanta.scheduling.whatif", acks_late=True)
def replay(run_id: int) -> str:
    """The Celery task (listed in portal/celery.py's imports, as this is not a tasks module)."""
    return execute(run_id).status
