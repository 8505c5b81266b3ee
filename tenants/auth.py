"""Authentication: personal API tokens for the REST API; campus sign-in through OIDC, LDAP
and CAS. The three campus backends only translate what their provider says into a
``CampusIdentity``; matching and creating accounts is ``services.provision_campus_user``."""

from __future__ import annotations

import logging
from typing import Any
from xml.etree import ElementTree

import jwt
import ldap3
import requests
from django.conf import settings
from django.contrib.auth.backends import BaseBackend
from django.core.exceptions import SuspiciousOperation
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _
from django_cas_ng.backends import CASBackend
from django_cas_ng.utils import get_cas_client
from ldap3.core import exceptions as ldap_errors
from ldap3.utils.conv import escape_filter_chars
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from tenants.models import ApiToken
from tenants.services import TOKEN_PREFIX, hash_token, touch_api_token
from tenants.services.campus import (
    CampusIdentity,
    LocalAccountRefused,
    campus_role,
    campus_username,
    first,
    many,
    provision_campus_user,
)


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
        return self.update_user(None, claims)

    def update_user(self, user: Any, claims: dict[str, Any]) -> Any:
        number = settings.OIDC_STUDENT_NUMBER_CLAIM
        role = settings.OIDC_ROLE_CLAIM
        identity = CampusIdentity(
            source="oidc",
            username=self._username(claims),
            email=first(claims.get("email")),
            display_name=first(claims.get("name")),
            student_number=first(claims.get(number)) if number else "",
            role=campus_role(many(claims.get(role))) if role else None,
        )
        try:
            return provision_campus_user(identity)
        except LocalAccountRefused as exc:
            raise SuspiciousOperation(str(exc)) from exc


# Why a campus sign-in failed, for the sign-in form to say (``CampusAuthenticationForm``).
SIGN_IN_ERROR = "campus_sign_in_error"


def _refuse(request: Any, message: str) -> None:
    if request is not None:
        setattr(request, SIGN_IN_ERROR, message)


class CampusLDAPBackend(BaseBackend):
    """The sign-in form's username and password, checked against the campus directory.

    Search the entry (as ``LDAP_BIND_DN``, or anonymously), then bind as the entry's DN with
    the password: a successful bind is the proof. An empty password is refused before any
    bind (an LDAP "unauthenticated bind" with a DN and no password succeeds on many
    servers). A directory that cannot be reached is reported to the form, never raised.
    """

    def authenticate(
        self, request: Any, username: str | None = None, password: str | None = None, **kw: Any
    ) -> Any:
        login = (username or "").strip()
        if not settings.LDAP_ENABLED or not login or not password:
            return None
        try:
            entry = self._find(login)
            if entry is None or not self._bind(entry.entry_dn, password):
                return None
        except ldap_errors.LDAPException as exc:
            logger.warning("LDAP sign-in of %r failed: the directory answered %s", login, exc)
            _refuse(
                request,
                _(
                    "The campus directory cannot be reached right now, so campus accounts "
                    "cannot sign in. Try again in a few minutes."
                ),
            )
            return None
        identity = self._identity(entry)
        if not identity.username:
            logger.warning(
                "LDAP entry %s has no %s", entry.entry_dn, settings.LDAP_USERNAME_ATTRIBUTE
            )
            return None
        try:
            user = provision_campus_user(identity)
        except LocalAccountRefused:
            _refuse(request, _("This is a local account: sign in with its own password."))
            return None
        return user if user.is_active else None

    def get_user(self, user_id: int) -> Any:
        from django.contrib.auth import get_user_model

        return get_user_model()._default_manager.filter(pk=user_id, is_active=True).first()

    def _server(self) -> ldap3.Server:
        return ldap3.Server(
            settings.LDAP_URL, get_info=ldap3.NONE, connect_timeout=settings.LDAP_TIMEOUT
        )

    def _connection(self, user: str | None, password: str | None) -> ldap3.Connection:
        connection = ldap3.Connection(
            self._server(),
            user=user,
            password=password,
            raise_exceptions=False,
            receive_timeout=settings.LDAP_TIMEOUT,
        )
        connection.open()
        if settings.LDAP_START_TLS:
            connection.start_tls()
        return connection

    def _attributes(self) -> list[str]:
        names = [
            settings.LDAP_USERNAME_ATTRIBUTE,
            settings.LDAP_NAME_ATTRIBUTE,
            settings.LDAP_EMAIL_ATTRIBUTE,
            settings.LDAP_STUDENT_NUMBER_ATTRIBUTE,
            settings.LDAP_ROLE_ATTRIBUTE,
        ]
        return sorted({name for name in names if name})

    def _find(self, login: str) -> Any:
        connection = self._connection(settings.LDAP_BIND_DN or None, settings.LDAP_BIND_PASSWORD)
        try:
            if settings.LDAP_BIND_DN and not connection.bind():
                raise ldap_errors.LDAPBindError(
                    f"the search account {settings.LDAP_BIND_DN} was refused: "
                    f"{connection.result.get('description')}"
                )
            connection.search(
                settings.LDAP_USER_SEARCH_BASE,
                settings.LDAP_USER_FILTER.format(username=escape_filter_chars(login)),
                search_scope=ldap3.SUBTREE,
                attributes=self._attributes(),
                size_limit=2,
            )
            entries = list(connection.entries)
            outcome = connection.result.get("description")
            if not entries and outcome not in ("success", "sizeLimitExceeded"):
                # A wrong base DN or an ACL reads as "nobody found": say so in the log.
                logger.warning("LDAP search for %r answered %s", login, connection.result)
        finally:
            connection.unbind()
        if len(entries) != 1:
            if entries:
                logger.warning("LDAP sign-in of %r: %s entries match", login, len(entries))
            return None
        return entries[0]

    def _bind(self, dn: str, password: str) -> bool:
        connection = self._connection(dn, password)
        try:
            return bool(connection.bind())
        finally:
            connection.unbind()

    def _identity(self, entry: Any) -> CampusIdentity:
        values = entry.entry_attributes_as_dict

        def attribute(name: str) -> Any:
            return values.get(name) if name else None

        role = settings.LDAP_ROLE_ATTRIBUTE
        return CampusIdentity(
            source="ldap",
            username=campus_username(first(attribute(settings.LDAP_USERNAME_ATTRIBUTE))),
            email=first(attribute(settings.LDAP_EMAIL_ATTRIBUTE)),
            display_name=first(attribute(settings.LDAP_NAME_ATTRIBUTE)),
            student_number=first(attribute(settings.LDAP_STUDENT_NUMBER_ATTRIBUTE)),
            role=campus_role(many(attribute(role))) if role else None,
        )


class _TimeoutSession(requests.Session):
    """python-cas calls the server without a timeout; a hung server must not hang us."""

    def request(self, *args: Any, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", settings.CAS_TIMEOUT)
        return super().request(*args, **kwargs)


def cas_session() -> requests.Session:
    return _TimeoutSession()


class CampusCASBackend(CASBackend):
    """CAS (protocol 2 or 3): the ticket is validated at ``CAS_SERVER_URL`` by django-cas-ng's
    client; the user and attributes it returns go through the same provisioning as OIDC."""

    def authenticate(self, request: Any, ticket: str, service: str) -> Any:  # type: ignore[override]
        client = get_cas_client(service_url=service, request=request)
        try:
            cas_user, attributes, _pgtiou = client.verify_ticket(ticket)
        except (requests.RequestException, ElementTree.ParseError, IndexError) as exc:
            logger.warning("CAS ticket validation failed: %s", exc)
            _refuse(request, _("The campus sign-in service cannot be reached right now."))
            return None
        if not cas_user:
            _refuse(request, _("Campus sign-in refused the ticket; please sign in again."))
            return None
        attributes = attributes or {}

        def attribute(name: str) -> Any:
            return attributes.get(name) if name else None

        key = settings.CAS_USERNAME_ATTRIBUTE
        role = settings.CAS_ROLE_ATTRIBUTE
        identity = CampusIdentity(
            source="cas",
            username=campus_username(cas_user if key == "cas:user" else first(attribute(key))),
            email=first(attribute(settings.CAS_EMAIL_ATTRIBUTE)),
            display_name=first(attribute(settings.CAS_NAME_ATTRIBUTE)),
            student_number=first(attribute(settings.CAS_STUDENT_NUMBER_ATTRIBUTE)),
            role=campus_role(many(attribute(role))) if role else None,
        )
        if not identity.username:
            _refuse(request, _("Campus sign-in did not say who you are; ask the IT office."))
            return None
        try:
            user = provision_campus_user(identity)
        except LocalAccountRefused:
            _refuse(request, _("This is a local account: sign in with its own password."))
            return None
        return user if self.user_can_authenticate(user) else None
