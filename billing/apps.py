from django.apps import AppConfig


class BillingConfig(AppConfig):
    """Metering from lifecycle intervals, price plans, ledger, invoices, budgets."""

    name = "billing"

    def ready(self) -> None:
        from billing import metering
        from workloads import lifecycle

        # After each commit: usage intervals opened and closed, ended work settled.
        lifecycle.on_transitions(metering.on_transitions)
