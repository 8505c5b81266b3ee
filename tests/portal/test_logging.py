"""The portal's log: one line per request, refusals without tracebacks, and periodic tasks
that merely ran say nothing (core/logs.py, LOGGING in portal/settings.py)."""

from __future__ import annotations

import logging

import pytest

from core import logs
from portal.celery import app

pytestmark = pytest.mark.django_db


def test_django_writes_through_the_one_root_handler_only() -> None:
    # Django's own DEBUG console handler would write every request a second time.
    assert logging.getLogger("django").handlers == []
    assert logging.getLogger("django.server").handlers == []


def test_a_refused_page_is_one_line_without_a_traceback(world, client, caplog) -> None:
    client.force_login(world.bob)  # a student of class A: sees it, does not manage it
    with caplog.at_level(logging.INFO):
        assert client.get(f"/teaching/{world.class_a.slug}/").status_code == 403
        assert client.get("/teaching/no-such-class/").status_code == 404
    refused = [r for r in caplog.records if r.name == "django.request"]
    assert [r.getMessage() for r in refused] == [
        f"Forbidden (Permission denied): /teaching/{world.class_a.slug}/",
        "Not Found: /teaching/no-such-class/",
    ]
    assert all(r.exc_info is None and r.exc_text is None for r in refused)
    assert "Traceback" not in caplog.text


def test_under_serve_the_access_line_is_the_only_line_of_a_404(
    world, client, caplog, monkeypatch
) -> None:
    monkeypatch.setattr(logs, "access_logged", True)
    client.force_login(world.bob)
    with caplog.at_level(logging.INFO):
        assert client.get("/teaching/no-such-class/").status_code == 404
    assert not [r for r in caplog.records if r.name == "django.request"]


def test_a_periodic_task_that_just_ran_logs_nothing(world, caplog) -> None:
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            app.tasks["quanta.cluster.reconcile"].apply()
    assert not [r for r in caplog.records if "succeeded in" in r.getMessage()]


def test_a_task_that_fails_is_still_logged(caplog) -> None:
    record = logging.LogRecord(
        "celery.app.trace", logging.ERROR, __file__, 1, "Task %(name)s raised", ({"name": "x"},),
        None,
    )  # fmt: skip
    assert logs.QuietTaskSuccess().filter(record)
