from collections.abc import Sequence
from typing import Any

from django import template

from workloads import windows as weekly
from workloads.choices import State
from workloads.reasons import translate

register = template.Library()


@register.filter
def reason(text: str) -> str:
    """A workload's reason (or event) in the reader's language."""
    return translate(text or "")


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
