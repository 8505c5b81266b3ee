"""Routes of the notebook proxy (``/nb/<workload id>/…``, HTTP and WebSocket) and of the
serving gateway (``/serve/<endpoint>/…``, HTTP).

HTTP: ``portal/asgi.py`` puts ``http_urlpatterns`` before Django (the proxy consumer needs
the session, hence its own ``AuthMiddlewareStack``). WebSocket: ``portal/routing.py`` adds
``websocket_urlpatterns`` to its list, behind the origin check and authentication of
``portal/asgi.py``.
"""

from channels.auth import AuthMiddlewareStack
from django.urls import URLPattern, re_path

from workloads.gateway import gateway_app
from workloads.proxy import NotebookHttpProxy, NotebookWebsocketProxy

http_urlpatterns: list[URLPattern] = [
    re_path(r"^nb/", AuthMiddlewareStack(NotebookHttpProxy.as_asgi())),
    # The serving gateway (workloads.gateway): /serve/<endpoint>/v2/…
    re_path(r"^serve/", gateway_app),  # type: ignore[arg-type]  # an ASGI app, not a view
]

websocket_urlpatterns: list[URLPattern] = [
    re_path(r"^nb/", NotebookWebsocketProxy.as_asgi()),
]
