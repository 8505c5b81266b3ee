from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class PortalConfig(AppConfig):
    default = True
    name = "portal"
    verbose_name = "Portal"


class QuantaAdminConfig(admin_apps.AdminConfig):
    """Django admin, open to superusers only (staff flags grant nothing here)."""

    default = False
    default_site = "portal.admin_site.QuantaAdminSite"
