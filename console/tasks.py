"""The demo's periodic task: the background load on the simulated farm (``console.demo_load``),
on only with DEMO_LOAD=true (`make run` sets it)."""

from __future__ import annotations

from celery import shared_task
from django.core.cache import cache

from console import demo_load

LOCK_SECONDS = 60


@shared_task(name="quanta.console.demo_load", acks_late=True, ignore_result=True)
def run_demo_load() -> dict[str, int] | None:
    if not demo_load.enabled():
        return None
    # One tick at a time, wherever the beat runs (a slow tick is not doubled by the next).
    if not cache.add("quanta:demo-load", 1, LOCK_SECONDS):
        return None
    try:
        return demo_load.tick()
    finally:
        cache.delete("quanta:demo-load")
