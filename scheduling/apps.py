from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    """Inventory (hosts, GPUs), queues, admission, placement policies and cluster backends."""

    name = "scheduling"

    def ready(self) -> None:
        from scheduling import live

        live.register()  # the cluster:<slug> topic of /ws/live/
