"""WebSocket routes of every app, gathered in one list for the ASGI router."""

from django.urls import URLPattern, re_path

from core.live import LiveConsumer
from workloads.routing import websocket_urlpatterns as notebook_websocket_urlpatterns

websocket_urlpatterns: list[URLPattern] = [
    re_path(r"^ws/live/$", LiveConsumer.as_asgi()),  # live status: workloads, logs, classes
    *notebook_websocket_urlpatterns,
]
