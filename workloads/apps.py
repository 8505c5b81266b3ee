from django.apps import AppConfig


class WorkloadsConfig(AppConfig):
    """Images, flavors, templates and grants, notebooks, jobs, serving; the lifecycle."""

    name = "workloads"

    def ready(self) -> None:
        from workloads import lifecycle, live

        live.register()  # topics and events of /ws/live/
        lifecycle.on_transitions(live.broadcast_transitions)  # live status pages, after commit
