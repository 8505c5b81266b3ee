"""Liveness and readiness endpoints for load balancers and orchestrators."""

import pytest
from django.conf import settings


def test_healthz_answers_without_a_database(client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_reports_each_dependency(client) -> None:
    response = client.get("/readyz")
    body = response.json()
    assert response.status_code == 200 and body["checks"]["database"]["ok"] is True
    assert ("redis" in body["checks"]) == bool(settings.REDIS_URL)


@pytest.mark.django_db
def test_readyz_is_unavailable_when_redis_is_down(client, settings) -> None:
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["redis"]["ok"] is False
    assert "ConnectionError" in response.json()["checks"]["redis"]["error"]
