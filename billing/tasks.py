"""The settlement tick (``quanta.billing.settle``, on the beat schedule in portal/celery.py):
repair the intervals a lost listener call left, then charge every unsettled one up to now."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from billing import metering, services


@shared_task(name="quanta.billing.settle", acks_late=True)
def settle() -> dict[str, Any]:
    repaired = metering.sync_intervals()
    done = services.settle()
    return {
        **repaired,
        "intervals": done.intervals,
        "entries": done.entries,
        "amount": str(done.amount),
    }
