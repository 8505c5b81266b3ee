from django.apps import AppConfig


class BillingConfig(AppConfig):
    """Metering from lifecycle intervals, price plans, ledger, invoices, budgets."""

    name = "billing"
