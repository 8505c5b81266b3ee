from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    """Inventory (hosts, GPUs), queues, admission, placement policies and cluster backends."""

    name = "scheduling"
