from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class PortalConfig(AppConfig):
    default = True
    name = "portal"
    verbose_name = "Portal"

    def ready(self) -> None:
        from portal import metrics
        from workloads import lifecycle

        # After each commit: launch-to-running observed for /metrics.
        lifecycle.on_transitions(metrics.on_transitions)


class QuantaAdminConfig(admin_apps.AdminConfig):
    """Django admin, open to superusers only (staff flags grant nothing here)."""

    default = False
    default_site = "portal.admin_site.QuantaAdminSite"
