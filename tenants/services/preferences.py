"""A person's own preferences."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from core.audit import record

PREFERENCE_FIELDS = ("display_name", "language", "time_zone")


@transaction.atomic
def update_preferences(*, actor: Any, **changes: Any) -> Any:
    """A person's own display name, language and time zone."""
    unknown = set(changes) - set(PREFERENCE_FIELDS)
    if unknown:
        raise ValidationError({name: _("cannot be changed here") for name in unknown})
    changed = {k: v for k, v in changes.items() if getattr(actor, k) != v}
    if changed:
        for name, value in changed.items():
            setattr(actor, name, value)
        actor.save(update_fields=list(changed))
        record("user.preferences", actor=actor, target=actor, changes=changed)
    return actor
