from typing import Any

from django.conf import settings
from django.http import HttpRequest


def site(request: HttpRequest) -> dict[str, Any]:
    return {
        "OIDC_ENABLED": settings.OIDC_ENABLED,
        "OIDC_PROVIDER_NAME": settings.OIDC_PROVIDER_NAME,
        "CLUSTER_BACKEND": settings.CLUSTER_BACKEND,
    }
