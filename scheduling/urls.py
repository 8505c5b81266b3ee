"""Console pages for clusters, mounted under /console/ (see portal/urls.py)."""

from django.urls import path

from scheduling import views

urlpatterns = [
    path("", views.overview, name="console"),
    path("hosts/", views.hosts, name="console-hosts"),
    path("hosts/<int:pk>/cordon/", views.cordon, name="console-node-cordon"),
    path("hosts/<int:pk>/uncordon/", views.uncordon, name="console-node-uncordon"),
    path("queues/", views.queues, name="console-queues"),
]
