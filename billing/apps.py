from django.apps import AppConfig


class BillingConfig(AppConfig):
    """Metering from lifecycle intervals, price plans, ledger, invoices, budgets."""

    name = "billing"

    def ready(self) -> None:
        from billing import budgets, metering, quotes
        from billing import reasons as _reasons  # noqa: F401 (registers billing's codes)
        from workloads import admission_checks, costs, lifecycle

        # After each commit: usage intervals opened and closed, ended work settled.
        lifecycle.on_transitions(metering.on_transitions)
        # Prices in the App Center, cost so far on the workload page.
        costs.register(
            hourly=quotes.hourly_prices, so_far=quotes.cost_so_far, spend=quotes.tenant_spend
        )
        # Budgets: launches and admission refused with the reason; the App Center and the
        # class dashboard show what is left.
        admission_checks.register(budgets.check)
        costs.register(budget=budgets.budget_of)
