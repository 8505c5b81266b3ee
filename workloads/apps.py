from django.apps import AppConfig


class WorkloadsConfig(AppConfig):
    """Images, flavors, templates and grants, notebooks, jobs, serving; the lifecycle."""

    name = "workloads"

    def ready(self) -> None:
        from scheduling import services as scheduling_services
        from scheduling import serving
        from workloads import autoscale, dispatch, in_use, lifecycle, live

        live.register()  # topics and events of /ws/live/
        # After each commit: live status to the pages, backend work to the tasks.
        lifecycle.on_transitions(live.broadcast_transitions)
        lifecycle.on_transitions(dispatch.dispatch)
        # The serving workloads alive on each cluster, for the Kubernetes schedule task.
        serving.register_serving_specs(autoscale.serving_targets)
        # What of ours still uses a queue or a priority class, before an admin deletes one.
        scheduling_services.register_queue_in_use(in_use.queue_in_use)
        scheduling_services.register_priority_class_in_use(in_use.priority_class_in_use)
