from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The pages that bring several apps together: the admin console (tenant tree, quotas,
    audit log, catalog, clusters, hosts, queues) and the demo data. Above the domain apps;
    nothing below imports it."""

    name = "console"
    verbose_name = "Console"
