"""The settlement tick (``quanta.billing.settle``, on the beat schedule in portal/celery.py):
repair the intervals a lost listener call left, meter the datasets' storage
(``billing.storage``), charge every unsettled interval up to now, then
evaluate the budgets (``billing.budgets.evaluate``)."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from billing import budgets, invoices, metering, services, storage


@shared_task(name="quanta.billing.settle", acks_late=True)
def settle() -> dict[str, Any]:
    repaired = metering.sync_intervals()
    stored = storage.sync_storage()
    done = services.settle()
    # Budgets read the ledger just written: notices at thresholds, stop policies carried out.
    judged = budgets.evaluate()
    return {
        **repaired,
        **stored,
        "intervals": done.intervals,
        "entries": done.entries,
        "amount": str(done.amount),
        "budgets": judged.budgets,
        "budget_notices": judged.notices,
        "stopped_for_budget": len(judged.stopped),
    }


@shared_task(name="quanta.billing.close_invoices", acks_late=True)
def close_invoices() -> list[dict[str, Any]]:
    """Close the months that are over (``billing.invoices.close_due``): idempotent, so an
    hourly run, a retry or two workers at once write each invoice once."""
    return [
        {
            "month": done.month,
            "invoices": done.invoices,
            "lines": done.lines,
            "entries": done.entries,
            "total": str(done.total),
            "not_settled": done.not_settled,
        }
        for done in invoices.close_due()
    ]
