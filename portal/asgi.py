"""ASGI entry point: HTTP through Django behind the concurrency gate (``portal/overload.py``;
the notebook proxy, /nb/…, beside it), WebSockets through Channels (authenticated)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402
from django.urls import re_path  # noqa: E402

from portal.http_limits import answer_long_lines  # noqa: E402
from portal.overload import ConcurrencyGate  # noqa: E402
from portal.routing import websocket_urlpatterns  # noqa: E402
from workloads.routing import http_urlpatterns as notebook_http_urlpatterns  # noqa: E402

answer_long_lines()  # daphne: a 414, not a dropped connection, for a request line over 16 KiB
gated_django = ConcurrencyGate(
    django_asgi_app, limit=settings.WEB_CONCURRENCY, wait_seconds=settings.WEB_QUEUE_SECONDS
)

application = ProtocolTypeRouter(
    {
        # Channels routes ASGI applications with Django's re_path; the stubs only know views.
        "http": URLRouter(
            [*notebook_http_urlpatterns, re_path(r"", gated_django)]  # type: ignore[arg-type]
        ),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
