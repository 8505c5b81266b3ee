"""Log filters that keep the portal's log readable: one line per request, no traceback for a
refusal (403, 404: the client's mistake, not the portal's), and no line per periodic task that
merely ran (the embedded beat runs reconcile twice a second). portal/settings.py LOGGING
attaches them unless ``LOG_LEVEL=DEBUG``."""

from __future__ import annotations

import logging

# Set by `manage.py serve`, whose server writes one access line per request ("HTTP GET /x 404
# [0.02, 127.0.0.1]"): there, Django's own "Not Found: /x" would be a second line for the same
# request. Under daphne without an access log (docker compose) Django's line is the only one.
access_logged = False


class ClientErrorsInOneLine(logging.Filter):
    """For ``django.request``: a 4xx answer is one line without its traceback (dropped where
    the server's access line already says it); a 5xx keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if status is None or status >= 500:
            return True
        if access_logged:
            return False
        record.exc_info = None
        record.exc_text = None
        return True


class QuietTaskSuccess(logging.Filter):
    """For ``celery.app.trace``: drop "Task … succeeded in …s" (a periodic task that ran is not
    news; what it changed, the task logs itself). Retries and failures stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno <= logging.INFO and "succeeded in" in str(record.msg))
