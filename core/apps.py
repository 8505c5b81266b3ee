from django.apps import AppConfig


class CoreConfig(AppConfig):
    """The bottom layer: the audit log, live-update plumbing, page guards and the reader's
    language. It imports no other app of the project; the apps above register with it."""

    name = "core"
    verbose_name = "Core"
