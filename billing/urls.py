"""Invoice and statement pages, mounted at /billing/ (portal/urls.py)."""

from django.urls import path

from billing import views

urlpatterns = [
    path("", views.invoice_list, name="billing"),
    path("invoices/<int:pk>/", views.invoice_detail, name="invoice"),
    path("invoices/<int:pk>/csv/", views.invoice_detail, {"mode": "csv"}, name="invoice-csv"),
    path("invoices/<int:pk>/print/", views.invoice_detail, {"mode": "print"}, name="invoice-print"),
    path("accounts/<int:pk>/<str:month>/", views.account_statement, name="statement"),
    path(
        "accounts/<int:pk>/<str:month>/csv/",
        views.account_statement,
        {"mode": "csv"},
        name="statement-csv",
    ),
    path(
        "accounts/<int:pk>/<str:month>/print/",
        views.account_statement,
        {"mode": "print"},
        name="statement-print",
    ),
    path("terms/<int:pk>/", views.term_statement, name="term-statement"),
    path("terms/<int:pk>/csv/", views.term_statement, {"mode": "csv"}, name="term-statement-csv"),
    path(
        "terms/<int:pk>/print/",
        views.term_statement,
        {"mode": "print"},
        name="term-statement-print",
    ),
    path("classes/<slug:slug>/usage.csv", views.class_usage_csv, name="class-usage-csv"),
    path("mine/", views.my_usage, name="my-usage"),
    path("mine/csv/", views.my_usage, {"mode": "csv"}, name="my-usage-csv"),
    path("mine/print/", views.my_usage, {"mode": "print"}, name="my-usage-print"),
]
