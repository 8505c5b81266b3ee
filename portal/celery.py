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

app.conf.task_routes = {
    "quanta.cluster.*": {"queue": "cluster"},
    "quanta.*": {"queue": "default"},
}

# name -> entry; each app adds its periodic work here as it grows.
app.conf.beat_schedule = {
    "close-ended-terms": {
        "task": "quanta.tenants.close_ended_terms",
        "schedule": 3600.0,
    },
}
