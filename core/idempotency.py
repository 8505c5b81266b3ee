"""Idempotent creates: a client that sends ``Idempotency-Key`` and retries gets the first
answer, and the thing is created once.

The key's row is written in the same transaction as what the request creates. A retry after
a lost answer (a timeout, a portal killed mid-request) finds the row and gets the stored
answer; a retry of a request that never committed finds nothing and runs again. Two requests
with one key at the same moment: the second waits on the first's row (the unique constraint)
and then gets its answer. The same key with a different body is refused (422): a client bug
that must not pass unnoticed. A request that is refused (400) stores nothing, so fixing the
body and retrying with the same key works.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from core.models import IdempotencyKey

HEADER = "Idempotency-Key"
MAX_KEY = 255
KEEP = dt.timedelta(hours=24)


class IdempotencyError(ValueError):
    """The key is unusable or reused for another request; ``status`` is the HTTP answer."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any
    replayed: bool = False


def fingerprint(body: Any) -> str:
    return hashlib.sha256(
        json.dumps(body, sort_keys=True, default=str, ensure_ascii=False).encode()
    ).hexdigest()


def check_key(key: str) -> str:
    if not 1 <= len(key) <= MAX_KEY or not key.isprintable() or not key.isascii():
        raise IdempotencyError(f"{HEADER} must be 1 to {MAX_KEY} printable ASCII characters", 400)
    return key


def once(*, user: Any, key: str, scope: str, body: Any, run: Callable[[], Answer]) -> Answer:
    """``run()`` once per (user, key): its answer, or the answer it gave the first time."""
    key = check_key(key)
    digest = fingerprint(body)
    with transaction.atomic():
        found = _first(user, key)
        if found is None:
            try:
                # One savepoint for the work and its key: if a twin request with the same key
                # committed first, the insert fails and the work is undone with it.
                with transaction.atomic():
                    answer = run()
                    IdempotencyKey.objects.create(
                        user=user,
                        key=key,
                        scope=scope,
                        fingerprint=digest,
                        status=answer.status,
                        response=answer.body,
                    )
                return answer
            except IntegrityError:
                found = _first(user, key)
                if found is None:
                    raise  # not the key: an error of the work itself
    if found.scope != scope or found.fingerprint != digest:
        raise IdempotencyError(f"this {HEADER} was used for a different request", 422)
    return Answer(found.status, found.response, replayed=True)


def _first(user: Any, key: str) -> IdempotencyKey | None:
    return IdempotencyKey.objects.filter(user=user, key=key).first()


def purge(now: dt.datetime | None = None) -> int:
    """Forget keys older than :data:`KEEP`; how many."""
    cutoff = (now or timezone.now()) - KEEP
    deleted, _ = IdempotencyKey.objects.filter(created_at__lt=cutoff).delete()
    return deleted
