"""Console pages for tenants, the audit log and the catalog, mounted under /console/."""

from django.urls import path

from portal import views

urlpatterns = [
    path("tenants/", views.tenant_tree, name="console-tenants"),
    path("tenants/<slug:slug>/quota/", views.quota_edit, name="console-quota"),
    path("catalog/", views.catalog, name="console-catalog"),
    path("audit/", views.audit_log, name="console-audit"),
]
