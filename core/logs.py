"""Log filters that keep the portal's log readable: one line per request, no traceback for a
refusal (403, 404: the client's mistake, not the portal's), and no line per periodic task that
merely ran (the embedded beat runs reconcile twice a second). portal/settings.py LOGGING
attaches them; ``LOG_LEVEL=DEBUG`` keeps the lines they drop."""

from __future__ import annotations

import logging


def _client_error(record: logging.LogRecord) -> bool:
    status = getattr(record, "status_code", None)
    return status is not None and 400 <= status < 500


class ClientErrorsWithoutTraceback(logging.Filter):
    """For ``django.request``: a 4xx answer ("Forbidden (Permission denied): /x") is one line,
    without the traceback of the exception that made it; a 5xx keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _client_error(record):
            record.exc_info = None
            record.exc_text = None
        return True


class DropClientErrors(logging.Filter):
    """For ``django.request`` below DEBUG: drop the 4xx line. The server (daphne, and
    `manage.py serve`) already writes one access line per request with its status ("HTTP GET
    /x 404 [0.02, 127.0.0.1]"): Django's "Not Found: /x" would be a second line for it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _client_error(record)


class QuietTaskSuccess(logging.Filter):
    """For ``celery.app.trace`` below DEBUG: drop "Task … succeeded in …s" (a periodic task
    that ran is not news; what it changed, the task logs itself). Retries and failures stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno <= logging.INFO and "succeeded in" in str(record.msg))
