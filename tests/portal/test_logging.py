"""The portal's log: one line per request, refusals without tracebacks, and periodic tasks
that merely ran say nothing (core/logs.py, LOGGING in portal/settings.py)."""

from __future__ import annotations

import logging
import sys

import pytest
from django.core.exceptions import PermissionDenied

from core import logs
from portal.celery import app

pytestmark = pytest.mark.django_db


def test_django_writes_through_the_one_root_handler_only() -> None:
    # Django's own DEBUG console handler would write every request a second time.
    assert logging.getLogger("django").handlers == []
    assert logging.getLogger("django.server").handlers == []


def test_a_refused_page_leaves_the_line_to_the_server_and_no_traceback(
    world, client, caplog
) -> None:
    client.force_login(world.bob)  # a student of class A: sees it, does not manage it
    with caplog.at_level(logging.INFO):
        assert client.get(f"/teaching/{world.class_a.slug}/").status_code == 403
        assert client.get("/teaching/no-such-class/").status_code == 404
    assert not [r for r in caplog.records if r.name == "django.request"]
    assert "Traceback" not in caplog.text


def _refusal(status: int) -> logging.LogRecord:
    try:
        raise PermissionDenied("no")
    except PermissionDenied:
        record = logging.LogRecord(
            "django.request", logging.WARNING, __file__, 1, "Forbidden: %s", ("/x",),
            sys.exc_info(),
        )  # fmt: skip
    record.status_code = status
    return record


def test_at_debug_a_refusal_is_one_line_and_a_server_error_keeps_its_traceback() -> None:
    refused, failed = _refusal(403), _refusal(500)
    assert logs.ClientErrorsWithoutTraceback().filter(refused) and refused.exc_info is None
    assert logs.ClientErrorsWithoutTraceback().filter(failed) and failed.exc_info is not None
    assert not logs.DropClientErrors().filter(_refusal(404))
    assert logs.DropClientErrors().filter(_refusal(500))


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
