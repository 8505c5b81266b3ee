"""The Celery app. Tasks live in each app's ``tasks.py``; the beat schedule lives here, in code.

Without REDIS_URL, settings turn on ``task_always_eager`` and the same task functions run
in-process, so the embedded mode needs no worker.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("quanta")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
app.conf.imports = ["scheduling.whatif"]  # tasks that live outside a tasks.py

app.conf.task_routes = {
    # A Kubernetes watcher holds its worker slot for minutes: a queue of its own, so submits
    # and stops on the cluster queue never wait behind it.
    "quanta.cluster.kubernetes_watch": {"queue": "watch"},
    "quanta.cluster.*": {"queue": "cluster"},
    "quanta.*": {"queue": "default"},
}


def _seconds(name: str, default: float, minimum: float) -> float:
    """A beat period from the environment (read here: the schedule is built on import)."""
    raw = os.environ.get(name, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, not {raw!r}") from None
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum:g} seconds, not {raw}")
    return value


# name -> entry; each app adds its periodic work here as it grows.
app.conf.beat_schedule = {
    "reconcile-clusters": {"task": "quanta.cluster.reconcile", "schedule": 3.0},
    "cull-idle-environments": {"task": "quanta.workloads.cull", "schedule": 60.0},
    # Local clusters: endpoints to their schedule's minimum, idle ones to zero.
    "serving-floors": {"task": "quanta.serving.schedules", "schedule": 30.0},
    # GPU utilisation per device and workload: the hosts page, GPU-aware culling.
    "sample-gpus": {
        "task": "quanta.workloads.sample_gpus",
        "schedule": _seconds("GPU_SAMPLE_SECONDS", 60.0, 5.0),
    },
    "sync-nodes": {"task": "quanta.cluster.sync_nodes", "schedule": 300.0},
    "expire-grants": {"task": "quanta.workloads.expire_grants", "schedule": 600.0},
    "close-ended-terms": {"task": "quanta.tenants.close_ended_terms", "schedule": 3600.0},
    # Each tick writes an entry per open interval: a large install may settle less often.
    "settle-usage": {
        "task": "quanta.billing.settle",
        "schedule": _seconds("BILLING_SETTLE_SECONDS", 60.0, 10.0),
    },
    "close-invoices": {"task": "quanta.billing.close_invoices", "schedule": 3600.0},
    "purge-idempotency-keys": {"task": "quanta.core.purge_idempotency_keys", "schedule": 3600.0},
    # Kubernetes clusters: one watcher each (a lock keeps it to one), a full resync as the
    # safety net, GPU inventory, and the cluster objects (namespaces, quotas, queues).
    "kubernetes-watch": {"task": "quanta.cluster.kubernetes_watch_all", "schedule": 60.0},
    "kubernetes-resync": {"task": "quanta.cluster.kubernetes_resync", "schedule": 30.0},
    "kubernetes-inventory": {"task": "quanta.cluster.kubernetes_inventory", "schedule": 60.0},
    "kubernetes-objects": {"task": "quanta.cluster.kubernetes_objects", "schedule": 300.0},
    # Model servers' time windows (昼推夜训): minReplicas up by day, down at night.
    "serving-schedules": {"task": "quanta.cluster.apply_serving_schedules", "schedule": 60.0},
    # The living demo's load on the simulated farm: does nothing unless DEMO_LOAD=true.
    "demo-load": {
        "task": "quanta.console.demo_load",
        "schedule": _seconds("DEMO_LOAD_SECONDS", 5.0, 1.0),
    },
}
