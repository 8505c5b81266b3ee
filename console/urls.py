"""The console pages, mounted under /console/ (see portal/urls.py)."""

from django.urls import path

from console import billing_views, cluster_views, views

urlpatterns = [
    path("", cluster_views.overview, name="console"),
    path("hosts/", cluster_views.hosts, name="console-hosts"),
    path("hosts/<int:pk>/cordon/", cluster_views.cordon, name="console-node-cordon"),
    path("hosts/<int:pk>/uncordon/", cluster_views.uncordon, name="console-node-uncordon"),
    path("queues/", cluster_views.queues, name="console-queues"),
    path("tenants/", views.tenant_tree, name="console-tenants"),
    path("tenants/<slug:slug>/quota/", views.quota_edit, name="console-quota"),
    path("catalog/", views.catalog, name="console-catalog"),
    path("audit/", views.audit_log, name="console-audit"),
    path("budgets/", billing_views.budget_list, name="console-budgets"),
    path("budgets/<int:pk>/", billing_views.budget_edit, name="console-budget-edit"),
]
