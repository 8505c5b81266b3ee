"""Weekly time windows of a grant ("Tue 14:00–16:00"), in the portal's time zone."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from typing import Any

from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.dates import WEEKDAYS_ABBR
from django.utils.translation import gettext as _

from workloads.choices import WEEKDAYS

_HHMM = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")


def validate(windows: Any) -> list[dict[str, Any]]:
    """Check a list of {"day": 0-6, "start": "HH:MM", "end": "HH:MM"}; return it cleaned."""
    if not isinstance(windows, list):
        raise ValidationError({"windows": _("must be a list of {day, start, end}")})
    cleaned = []
    for i, window in enumerate(windows):
        where = _("window %(n)s") % {"n": i + 1}
        if not isinstance(window, dict) or set(window) != {"day", "start", "end"}:
            raise ValidationError(
                {"windows": _("%(where)s: give exactly day, start and end") % {"where": where}}
            )
        day, start, end = window["day"], window["start"], window["end"]
        if not isinstance(day, int) or not 0 <= day <= 6:
            raise ValidationError(
                {"windows": _("%(where)s: day must be 0 (Monday) to 6 (Sunday)") % {"where": where}}
            )
        if not (isinstance(start, str) and _HHMM.match(start)) or not (
            isinstance(end, str) and _HHMM.match(end)
        ):
            raise ValidationError(
                {"windows": _("%(where)s: times are HH:MM, e.g. 14:00") % {"where": where}}
            )
        if end <= start:
            raise ValidationError(
                {"windows": _("%(where)s: ends before it starts") % {"where": where}}
            )
        cleaned.append({"day": day, "start": start, "end": end})
    return cleaned


def describe(windows: Sequence[dict[str, Any]]) -> str:
    """In English, as reasons and the API keep it ("Tue 14:00–16:00")."""
    return ", ".join(f"{WEEKDAYS[w['day']]} {w['start']}–{w['end']}" for w in windows)


def describe_local(windows: Sequence[dict[str, Any]]) -> str:
    """As ``describe``, with the day names in the active language (for pages)."""
    return ", ".join(f"{WEEKDAYS_ABBR[w['day']]} {w['start']}–{w['end']}" for w in windows)


def is_open(windows: Sequence[dict[str, Any]], when: dt.datetime | None = None) -> bool:
    """True when there are no windows or ``when`` (default now) falls inside one."""
    if not windows:
        return True
    local = timezone.localtime(when or timezone.now())
    hhmm = local.strftime("%H:%M")
    return any(w["day"] == local.weekday() and w["start"] <= hhmm < w["end"] for w in windows)
