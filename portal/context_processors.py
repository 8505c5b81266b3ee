from typing import Any

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY
from django.http import HttpRequest

from core.notices import unread
from tenants.permissions import Access


def site(request: HttpRequest) -> dict[str, Any]:
    return {
        "nav": _nav(request),
        "OIDC_ENABLED": settings.OIDC_ENABLED,
        "OIDC_PROVIDER_NAME": settings.OIDC_PROVIDER_NAME,
        "LDAP_ENABLED": settings.LDAP_ENABLED,
        "CAS_ENABLED": settings.CAS_ENABLED,
        "CAS_PROVIDER_NAME": settings.CAS_PROVIDER_NAME,
        "SIGNED_IN_WITH_CAS": _signed_in_with_cas(request),
        "CLUSTER_BACKEND": settings.CLUSTER_BACKEND,
    }


def _signed_in_with_cas(request: HttpRequest) -> bool:
    session = getattr(request, "session", None)
    return bool(
        settings.CAS_ENABLED
        and session is not None
        and session.get(BACKEND_SESSION_KEY) == "tenants.auth.CampusCASBackend"
    )


def _nav(request: HttpRequest) -> dict[str, bool | int]:
    """Which sections a person's roles open (django-guardian grants included)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    access = Access.of(user)
    return {
        "teaching": access.manages_anything(),
        "tenants": access.administers_anything(),
        "notices": unread(user).count(),  # the badge beside Home
    }
