from django import template

from workloads.reasons import translate

register = template.Library()


@register.filter
def reason(text: str) -> str:
    """A workload's reason (or event) in the reader's language."""
    return translate(text or "")
