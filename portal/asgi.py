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

from portal.http_limits import answer_long_lines  # noqa: E402
from portal.routing import websocket_urlpatterns  # noqa: E402
from workloads.routing import http_urlpatterns as notebook_http_urlpatterns  # noqa: E402

answer_long_lines()  # daphne: a 414, not a dropped connection, for a request line over 16 KiB

application = ProtocolTypeRouter(
    {
        "http": URLRouter([*notebook_http_urlpatterns, re_path(r"", django_asgi_app)]),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
