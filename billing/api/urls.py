from rest_framework.routers import DefaultRouter

from billing.api import budgets, invoices, views

app_name = "billing-api"

router = DefaultRouter()
router.register("price-plans", views.PricePlanViewSet, basename="price-plan")
router.register("accounts", views.AccountViewSet, basename="account")
router.register("ledger-entries", views.LedgerEntryViewSet, basename="ledger-entry")
router.register("usage-intervals", views.UsageIntervalViewSet, basename="usage-interval")
router.register("invoices", invoices.InvoiceViewSet, basename="invoice")
router.register("statements", invoices.StatementViewSet, basename="statement")
router.register("budgets", budgets.BudgetViewSet, basename="budget")
router.register("credits", budgets.CreditViewSet, basename="credit")

urlpatterns = router.urls
