"""Write audit rows. Called inside the service function's transaction."""

from __future__ import annotations

from typing import Any

from django.db import models

from core.models import AuditEvent


def record(
    action: str,
    *,
    actor: Any,
    target: models.Model,
    tenant: Any = None,
    **data: Any,
) -> AuditEvent:
    return AuditEvent.objects.create(
        actor=actor if getattr(actor, "pk", None) else None,
        action=action,
        target_type=target._meta.label_lower,
        target_id=str(target.pk or ""),
        target_repr=str(target)[:255],
        tenant=tenant,
        data=_jsonable(data),
    )


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
