"""The console pages, mounted under /console/ (see portal/urls.py)."""

from django.urls import path

from console import billing_views, cluster_views, edit_views, views

urlpatterns = [
    path("", cluster_views.overview, name="console"),
    path("hosts/", cluster_views.hosts, name="console-hosts"),
    path("hosts/<int:pk>/cordon/", cluster_views.cordon, name="console-node-cordon"),
    path("hosts/<int:pk>/uncordon/", cluster_views.uncordon, name="console-node-uncordon"),
    path("queues/", cluster_views.queues, name="console-queues"),
    path("queues/new/", edit_views.queue_new, name="console-queue-new"),
    path("queues/<int:pk>/", edit_views.queue_edit, name="console-queue-edit"),
    path("queues/<int:pk>/delete/", edit_views.queue_delete, name="console-queue-delete"),
    path("priority-classes/new/", edit_views.priority_class_new, name="console-priority-new"),
    path(
        "priority-classes/<int:pk>/", edit_views.priority_class_edit, name="console-priority-edit"
    ),
    path(
        "priority-classes/<int:pk>/delete/",
        edit_views.priority_class_delete,
        name="console-priority-delete",
    ),
    path("tenants/", views.tenant_tree, name="console-tenants"),
    path("tenants/<slug:slug>/quota/", views.quota_edit, name="console-quota"),
    path("catalog/", views.catalog, name="console-catalog"),
    path("catalog/images/new/", edit_views.image_new, name="console-image-new"),
    path("catalog/images/<slug:slug>/", edit_views.image_edit, name="console-image-edit"),
    path(
        "catalog/images/<slug:slug>/retire/", edit_views.image_retire, name="console-image-retire"
    ),
    path("audit/", views.audit_log, name="console-audit"),
    path("budgets/", billing_views.budget_list, name="console-budgets"),
    path("budgets/<int:pk>/", billing_views.budget_edit, name="console-budget-edit"),
]
