"""Authentication: personal API tokens for the REST API, campus sign-in through OIDC."""

from __future__ import annotations

import logging
from typing import Any

import jwt
import requests
from django.conf import settings
from django.core.exceptions import SuspiciousOperation
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from tenants.models import ApiToken
from tenants.services import TOKEN_PREFIX, hash_token, touch_api_token


class PersonalTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer qnt_…`` (or ``Token qnt_…``)."""

    keywords = ("bearer", "token")

    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0].lower() not in self.keywords:
            return None
        if len(header) != 2 or not header[1].startswith(TOKEN_PREFIX):
            raise exceptions.AuthenticationFailed(_("Malformed token header."))
        now = timezone.now()
        token = (
            ApiToken.objects.select_related("user")
            .filter(digest=hash_token(header[1]), revoked_at__isnull=True)
            .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
            .first()
        )
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed(_("Invalid, expired or revoked token."))
        touch_api_token(token)
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


logger = logging.getLogger(__name__)


class CampusOIDCBackend(OIDCAuthenticationBackend):
    """Campus single sign-on. Users are matched by username (``OIDC_USERNAME_CLAIM``), not by
    email: campus emails get recycled and aliased, student numbers do not.

    On top of mozilla-django-oidc's checks (signature, nonce, state) this checks the ID
    token's audience, refuses expired tokens cleanly, never signs into a superuser or an
    account that has a local password (a claim value must not take over ``admin``), and
    turns an unreachable or refusing IdP into a failed sign-in rather than a server error.
    """

    def authenticate(self, request: Any, **kwargs: Any) -> Any:
        try:
            return super().authenticate(request, **kwargs)
        except requests.RequestException as exc:
            logger.warning("campus sign-in failed: the identity provider answered %s", exc)
            return None

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        try:
            payload: dict[str, Any] = super().verify_token(token, **kwargs)
        except jwt.InvalidTokenError as exc:  # expired, not yet valid, malformed: PyJWT's word
            raise SuspiciousOperation(f"ID token refused: {exc}") from exc
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if self.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation("ID token was issued for another client (aud)")
        return payload

    def _username(self, claims: dict[str, Any]) -> str:
        return str(claims.get(settings.OIDC_USERNAME_CLAIM, "")).strip().lower()

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        return bool(self._username(claims))

    def filter_users_by_claims(self, claims: dict[str, Any]) -> Any:
        return self.UserModel.objects.filter(username=self._username(claims))

    def create_user(self, claims: dict[str, Any]) -> Any:
        user = self.UserModel.objects.create_user(
            username=self._username(claims), email=claims.get("email", "")
        )
        return self.update_user(user, claims)

    def update_user(self, user: Any, claims: dict[str, Any]) -> Any:
        if user.is_superuser or user.has_usable_password():
            raise SuspiciousOperation(
                f"campus sign-in refused for {user.username}: it is a local account"
            )
        user.email = claims.get("email", user.email) or user.email
        user.display_name = claims.get("name", user.display_name) or user.display_name
        claim = settings.OIDC_STUDENT_NUMBER_CLAIM
        if claim and claims.get(claim):
            user.student_number = str(claims[claim])
        user.save(update_fields=["email", "display_name", "student_number"])
        return user
