"""A lock held across processes for a while: one worker per cluster for long-running work
(the Kubernetes watcher)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

from django.core.cache import cache


@contextlib.contextmanager
def cluster_lock(name: str, seconds: float) -> Iterator[bool]:
    """True if this process holds ``name`` (for at most ``seconds``). ``cache.add`` is atomic
    on Redis and on the in-process cache; the expiry frees the lock of a worker that died."""
    token = uuid.uuid4().hex
    held = bool(cache.add(name, token, timeout=seconds))
    try:
        yield held
    finally:
        if held and cache.get(name) == token:
            cache.delete(name)
