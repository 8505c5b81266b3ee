"""Routes of the notebook proxy: ``/nb/<workload id>/…`` over HTTP and WebSocket.

HTTP: ``portal/asgi.py`` puts ``http_urlpatterns`` before Django (the proxy consumer needs
the session, hence its own ``AuthMiddlewareStack``). WebSocket: ``portal/routing.py`` adds
``websocket_urlpatterns`` to its list, behind the origin check and authentication of
``portal/asgi.py``.
"""

from channels.auth import AuthMiddlewareStack
from django.urls import URLPattern, re_path

from workloads.proxy import NotebookHttpProxy, NotebookWebsocketProxy

http_urlpatterns: list[URLPattern] = [
    re_path(r"^nb/", AuthMiddlewareStack(NotebookHttpProxy.as_asgi())),
]

websocket_urlpatterns: list[URLPattern] = [
    re_path(r"^nb/", NotebookWebsocketProxy.as_asgi()),
]
