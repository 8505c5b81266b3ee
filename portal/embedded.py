"""The embedded mode's stand-in for Celery beat: without REDIS_URL there is no beat process,
so `manage.py serve` runs the periodic tasks on a thread, in-process, on the same schedule
(reconcile every second so status changes show quickly)."""

from __future__ import annotations

import logging
import threading
import time

from django.db import close_old_connections

from portal.celery import app

logger = logging.getLogger(__name__)

FAST = {"quanta.cluster.reconcile": 0.5}  # seconds, overriding the beat schedule


class EmbeddedBeat(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="quanta-embedded-beat", daemon=True)
        app.loader.import_default_modules()  # the apps' tasks modules, as a worker would
        self.stopping = threading.Event()
        self.schedule = {
            entry["task"]: FAST.get(entry["task"], float(entry["schedule"]))
            for entry in app.conf.beat_schedule.values()
        }

    def run(self) -> None:
        due = dict.fromkeys(self.schedule, 0.0)
        while not self.stopping.is_set():
            now = time.monotonic()
            for name, every in self.schedule.items():
                if now >= due[name]:
                    due[name] = now + every
                    self._run(name)
            self.stopping.wait(0.2)

    def _run(self, name: str) -> None:
        close_old_connections()
        try:
            app.tasks[name].apply()
        except Exception:
            logger.exception("periodic task %s failed", name)
        finally:
            close_old_connections()
