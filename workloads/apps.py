from django.apps import AppConfig


class WorkloadsConfig(AppConfig):
    """Images, flavors, templates and grants, notebooks, jobs, serving; the lifecycle."""

    name = "workloads"

    def ready(self) -> None:
        from workloads import dispatch, lifecycle, live

        live.register()  # topics and events of /ws/live/
        # After each commit: live status to the pages, backend work to the tasks.
        lifecycle.on_transitions(live.broadcast_transitions)
        lifecycle.on_transitions(dispatch.dispatch)
