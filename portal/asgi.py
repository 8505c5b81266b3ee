"""ASGI entry point: HTTP through Django (except the notebook proxy, /nb/…), WebSockets through
Channels (authenticated)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import re_path  # noqa: E402

from portal.routing import websocket_urlpatterns  # noqa: E402
from workloads.routing import http_urlpatterns as notebook_http_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        # Channels routes ASGI applications with Django's re_path; the stubs only know views.
        "http": URLRouter(
            [*notebook_http_urlpatterns, re_path(r"", django_asgi_app)]  # type: ignore[arg-type]
        ),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
