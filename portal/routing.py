"""WebSocket routes of every app, gathered in one list for the ASGI router."""

from django.urls import URLPattern

from workloads.routing import websocket_urlpatterns as notebook_websocket_urlpatterns

# Live status (workloads, logs, classes, inventory) registers here as those apps grow.
websocket_urlpatterns: list[URLPattern] = [*notebook_websocket_urlpatterns]
