from django.apps import AppConfig


class WorkloadsConfig(AppConfig):
    """Images, flavors, templates and grants, notebooks, jobs, serving; the lifecycle."""

    name = "workloads"
