"""Skip marks for tests that need a real service; each prints why it was skipped."""

from pathlib import Path

import pytest
from django.conf import settings

# The project's shared data sits beside the checkout (<repo>/../shared), never at a path of
# one machine; tests that need more than the samples in tests/ skip, saying so, without it.
SHARED = Path(__file__).resolve().parents[1].parent / "shared"
OPENB = SHARED / "traces" / "openb"
requires_openb = pytest.mark.skipif(
    not OPENB.is_dir(), reason=f"needs the openb traces in {OPENB} (../shared beside the repo)"
)

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
