import datetime as dt
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from django import template
from django.utils.formats import number_format
from django.utils.translation import gettext as _

from workloads import windows as weekly
from workloads.choices import State
from workloads.reasons import reason_of

register = template.Library()


@register.filter
def reason(value: Any) -> str:
    """The reason of a workload or an event (or a reason itself) in the reader's language,
    from its code and parameters; a plain string is shown as it is."""
    if isinstance(value, str):
        return value
    found = reason_of(value)
    return found.render() if found is not None else ""


@register.filter
def state_label(value: str) -> str:
    """A workload state ("Running") by its name in the reader's language."""
    try:
        return str(State(value).label)
    except ValueError:
        return value or ""


@register.filter
def windows(value: Sequence[dict[str, Any]] | None) -> str:
    """A grant's weekly time windows ("Tue 14:00–16:00") with the reader's day names."""
    return weekly.describe_local(value or [])


@register.filter
def duration(value: dt.timedelta | None) -> str:
    """A run's length, short: "3 d 4 h", "2 h 05 min", "12 min", "40 s"; "" for none."""
    if value is None:
        return ""
    seconds = max(0, int(value.total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return _("%(d)d d %(h)d h") % {"d": days, "h": hours}
    if hours:
        return _("%(h)d h %(m)02d min") % {"h": hours, "m": minutes}
    if minutes:
        return _("%(m)d min") % {"m": minutes}
    return _("%(s)d s") % {"s": seconds}


@register.filter
def per(value: Any, unit: Any) -> str:
    """``value`` counted in ``unit``, to two places at most and without trailing zeros, in
    the reader's number format (``{{ f.cpu_milli|per:1000 }}``: 500 milli-CPU is "0.5", not
    the "0" that ``widthratio`` rounds it to)."""
    try:
        amount = (Decimal(value) / Decimal(unit)).quantize(Decimal("0.01"))
    except (ArithmeticError, TypeError, ValueError):
        return ""
    return number_format(amount.normalize() if amount else Decimal(0))
