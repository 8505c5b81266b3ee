"""Housekeeping of the bottom layer."""

from __future__ import annotations

from celery import shared_task

from core import idempotency


@shared_task(name="quanta.core.purge_idempotency_keys", acks_late=True)
def purge_idempotency_keys() -> int:
    return idempotency.purge()
