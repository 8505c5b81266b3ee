"""Skip marks for tests that need a real service; each prints why it was skipped."""

import pytest
from django.conf import settings

on_postgres = "postgresql" in settings.DATABASES["default"]["ENGINE"]

requires_postgres = pytest.mark.skipif(
    not on_postgres,
    reason="needs PostgreSQL row locks: set DATABASE_URL=postgres://... (CI does)",
)
requires_redis = pytest.mark.skipif(
    not settings.REDIS_URL, reason="needs Redis: set REDIS_URL=redis://... (CI does)"
)
requires_shared_database = pytest.mark.skipif(
    not on_postgres,
    reason="needs PostgreSQL: a worker process must share the test database (CI does)",
)
