"""Personal API tokens: created with a secret shown once, revoked, touched on use."""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from core.audit import record
from tenants.models import ApiToken

TOKEN_PREFIX = "qnt_"


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@transaction.atomic
def create_api_token(
    *, actor: Any, name: str, expires_at: dt.datetime | None = None
) -> tuple[ApiToken, str]:
    """A new personal token for ``actor``; the secret is returned once and never stored."""
    name = name.strip()
    if not name:
        raise ValidationError({"name": _("give the token a name, e.g. 'laptop'")})
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": _("must be in the future")})
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=actor,
        name=name[:100],
        prefix=secret[: len(TOKEN_PREFIX) + 6],
        digest=hash_token(secret),
        expires_at=expires_at,
    )
    record("token.create", actor=actor, target=token, name=token.name)
    return token, secret


@transaction.atomic
def revoke_api_token(*, actor: Any, token: ApiToken) -> ApiToken:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        record("token.revoke", actor=actor, target=token, name=token.name)
    return token


def touch_api_token(token: ApiToken) -> None:
    """Record use, at most once per API_TOKEN_TOUCH_INTERVAL (no write on every request)."""
    now = timezone.now()
    interval = dt.timedelta(seconds=settings.API_TOKEN_TOUCH_INTERVAL)
    if token.last_used_at is None or now - token.last_used_at >= interval:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
