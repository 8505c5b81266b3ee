"""Every operation of the OpenAPI schema, fed what schemathesis makes of it, answers below
500 for every role: anonymous, a student (bob), his teacher (alice), the outsider (charlie),
the department admin (dean) and a superuser (root).

In-process against the WSGI app, derandomized (the same examples every run) and bounded:
``FUZZ_EXAMPLES`` per operation and role (default 4; raise it locally to dig deeper)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections

from tenants import services as tenant_services

schemathesis = pytest.importorskip(
    "schemathesis", reason="schemathesis is not installed (pip install -e '.[dev]')"
)
hypothesis = pytest.importorskip("hypothesis")

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "4"))
ROLES = ["anonymous", "bob", "alice", "charlie", "dean", "root"]


@pytest.fixture
def keep_connection() -> Iterator[None]:
    """Requests go straight into the WSGI app, not through Django's test client: keep it
    from closing the test's connection (and its transaction) after each request, as the
    test client does."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def _headers(class_a: Any, role: str) -> dict[str, str]:
    if role == "anonymous":
        return {}
    user = getattr(class_a.world, role)
    _token, secret = tenant_services.create_api_token(actor=user, name=f"fuzz-{role}")
    return {"Authorization": f"Bearer {secret}"}


@pytest.mark.parametrize("role", ROLES)
def test_no_operation_answers_5xx(class_a: Any, role: str, keep_connection: None) -> None:
    schema = schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())
    headers = _headers(class_a, role)
    failures: list[str] = []
    started = time.monotonic()
    operations = [result.ok() for result in schema.get_all_operations()]
    for operation in operations:
        _fuzz(operation, headers, failures)
    print(f"{role}: {len(operations)} operations x {EXAMPLES} in {time.monotonic() - started:.1f}s")
    assert not failures, "\n".join(dict.fromkeys(failures))


def _fuzz(operation: Any, headers: dict[str, str], failures: list[str]) -> None:
    from hypothesis import HealthCheck, Phase, given, settings

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],
    )
    @given(case=operation.as_strategy())
    def run(case: Any) -> None:
        response = case.call(headers=headers)
        if response.status_code >= 500:
            failures.append(
                f"{operation.method.upper()} {operation.path} -> {response.status_code}: "
                f"{case.as_curl_command(headers=headers)}"
            )

    run()
