"""The settlement tick (``quanta.billing.settle``, on the beat schedule in portal/celery.py):
repair the intervals a lost listener call left, charge every unsettled one up to now, then
evaluate the budgets (``billing.budgets.evaluate``)."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from billing import budgets, metering, services


@shared_task(name="quanta.billing.settle", acks_late=True)
def settle() -> dict[str, Any]:
    repaired = metering.sync_intervals()
    done = services.settle()
    # Budgets read the ledger just written: notices at thresholds, stop policies carried out.
    judged = budgets.evaluate()
    return {
        **repaired,
        "intervals": done.intervals,
        "entries": done.entries,
        "amount": str(done.amount),
        "budgets": judged.budgets,
        "budget_notices": judged.notices,
        "stopped_for_budget": len(judged.stopped),
    }
