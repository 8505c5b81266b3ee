"""The invoices API: closed invoices with their lines (and as CSV), statements computed live
(an account's open month, a class's term, one's own usage).

Who sees what (``billing.invoices``): superusers all; admins, teachers and TAs the invoices
of the tenants in their subtrees; everyone their own person account's, and their own usage
in anyone's. An invoice one may not see is not found; an account or class one may not see
is a 400, as an unknown one is.
"""

from __future__ import annotations

import csv
import io
from decimal import ROUND_HALF_EVEN
from typing import Any

from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from billing import invoices
from billing.choices import InvoiceState, LineKind
from billing.models import Invoice, InvoiceLine


def _money(**kwargs: Any) -> serializers.DecimalField:
    return serializers.DecimalField(
        max_digits=18, decimal_places=2, rounding=ROUND_HALF_EVEN, read_only=True, **kwargs
    )


def _exact(**kwargs: Any) -> serializers.DecimalField:
    return serializers.DecimalField(max_digits=18, decimal_places=6, read_only=True, **kwargs)


class LineSerializer(serializers.Serializer):
    position = serializers.IntegerField(read_only=True)
    kind = serializers.ChoiceField(choices=LineKind.choices, read_only=True)
    person = serializers.CharField(read_only=True)
    workload = serializers.CharField(read_only=True)
    size = serializers.CharField(read_only=True)
    description = serializers.CharField(read_only=True)
    interval = serializers.IntegerField(source="interval_id", read_only=True, allow_null=True)
    hours = _exact()
    unit_price = _exact(allow_null=True, help_text="The average per hour: amount / hours.")
    amount = _money(help_text="To the cent (half to even).")
    amount_exact = _exact(source="amount")


class InvoiceSerializer(serializers.ModelSerializer[Invoice]):
    month = serializers.SerializerMethodField()
    total = _money(help_text="To the cent (half to even).")
    total_exact = _exact(
        source="total", help_text="The sum of the ledger entries assigned to the invoice."
    )
    lines = serializers.SerializerMethodField()

    class Meta:
        model = Invoice
        fields = [
            "id",
            "number",
            "account",
            "payer_name",
            "month",
            "period_start",
            "period_end",
            "state",
            "total",
            "total_exact",
            "closed_at",
            "lines",
        ]
        read_only_fields = fields

    def get_month(self, invoice: Invoice) -> str:
        return invoices.month_of(invoice.period_start).strftime("%Y-%m")

    @extend_schema_field(LineSerializer(many=True))
    def get_lines(self, invoice: Invoice) -> list[dict[str, Any]]:
        rows: list[InvoiceLine] = list(invoice.lines.all())
        rows.sort(key=lambda row: (row.position, row.pk))
        return _lines(invoices._stored_lines(rows))


class StatementSerializer(serializers.Serializer):
    title = serializers.CharField(read_only=True)
    number = serializers.CharField(read_only=True, help_text="Empty while the month is open.")
    account = serializers.IntegerField(read_only=True, allow_null=True)
    payer_name = serializers.CharField(read_only=True)
    period_start = serializers.DateTimeField(read_only=True)
    period_end = serializers.DateTimeField(read_only=True)
    state = serializers.ChoiceField(choices=InvoiceState.choices, read_only=True)
    total = _money()
    total_exact = _exact()
    lines = LineSerializer(many=True, read_only=True)


def _lines(lines: list[invoices.Line]) -> list[dict[str, Any]]:
    return list(LineSerializer(lines, many=True).data)


def _statement(item: invoices.Statement) -> dict[str, Any]:
    return dict(
        StatementSerializer(
            {
                "title": item.title,
                "number": item.number,
                "account": item.account.pk if item.account is not None else None,
                "payer_name": item.payer_name,
                "period_start": item.period_start,
                "period_end": item.period_end,
                "state": item.state,
                "total": item.total,
                "total_exact": item.total,
                "lines": [],
            }
        ).data
    ) | {"lines": _lines(item.lines)}


def csv_response(item: invoices.Statement, name: str) -> HttpResponse:
    out = io.StringIO()
    csv.writer(out).writerows(invoices.csv_rows(item))
    response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name) or "statement"
    response["Content-Disposition"] = f'attachment; filename="{safe}.csv"'
    return response


MONTH = OpenApiParameter("month", OpenApiTypes.STR, description="YYYY-MM, e.g. 2025-01")
ACCOUNT = OpenApiParameter("account", OpenApiTypes.INT, description="An account id")
DOWNLOAD = OpenApiParameter("download", OpenApiTypes.STR, enum=["csv"], description="csv: a file")
CSV = OpenApiResponse(OpenApiTypes.BINARY, description="text/csv attachment")


class InvoiceViewSet(viewsets.ReadOnlyModelViewSet[Invoice]):
    """Closed invoices with their lines, of the accounts you see; ``?month=YYYY-MM`` and
    ``?account=<id>`` narrow the list. ``csv`` downloads one."""

    queryset = Invoice.objects.none()
    serializer_class = InvoiceSerializer
    filter_backends: list[Any] = []  # month and account are checked here: 400, never a 500
    lookup_value_regex = r"[0-9]{1,18}"  # else not found (never an integer overflow)

    def get_queryset(self) -> QuerySet[Invoice]:
        rows = invoices.invoices_seen_by(self.request.user).prefetch_related("lines")
        return rows.order_by("-period_start", "account_id")

    @extend_schema(parameters=[MONTH, ACCOUNT])
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        rows = self.get_queryset()
        if request.query_params.get("month"):
            start, _end = invoices.month_bounds(invoices.parse_month(request.query_params["month"]))
            rows = rows.filter(period_start=start)
        if request.query_params.get("account"):
            account = invoices.account_seen_by(request.user, request.query_params["account"])
            rows = rows.filter(account=account)
        page = self.paginate_queryset(rows)
        assert page is not None
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    @extend_schema(responses={200: CSV})
    @action(detail=True, methods=["get"])
    def csv(self, request: Request, pk: str) -> HttpResponse:
        invoice = self.get_object()
        return csv_response(invoices.invoice_statement(invoice), invoice.number)


class StatementViewSet(viewsets.GenericViewSet):
    """Statements computed from the ledger: an account's month (its invoice once closed), a
    class's term (its managers), your own usage in a month (whoever paid). ``format=csv`` in
    the query downloads one as CSV."""

    serializer_class = StatementSerializer
    filter_backends: list[Any] = []
    pagination_class = None

    def _answer(self, request: Request, item: invoices.Statement, name: str) -> Any:
        if request.query_params.get("download") == "csv":
            return csv_response(item, name)
        return Response(_statement(item))

    @extend_schema(
        parameters=[ACCOUNT, MONTH, DOWNLOAD],
        responses={200: StatementSerializer},
    )
    @action(detail=False, methods=["get"])
    def account(self, request: Request) -> Any:
        account = invoices.account_seen_by(request.user, request.query_params.get("account", ""))
        month = invoices.parse_month(request.query_params.get("month", ""))
        item = invoices.statement(account, month)
        return self._answer(request, item, item.number or f"{month:%Y-%m}-{account.pk}")

    @extend_schema(
        parameters=[OpenApiParameter("tenant", OpenApiTypes.INT), DOWNLOAD],
        responses={200: StatementSerializer},
    )
    @action(detail=False, methods=["get"])
    def term(self, request: Request) -> Any:
        tenant = invoices.term_tenant_seen_by(request.user, request.query_params.get("tenant", ""))
        return self._answer(request, invoices.term_statement(tenant), f"term-{tenant.slug}")

    @extend_schema(parameters=[MONTH, DOWNLOAD], responses={200: StatementSerializer})
    @action(detail=False, methods=["get"])
    def mine(self, request: Request) -> Any:
        month = invoices.parse_month(request.query_params.get("month", ""))
        item = invoices.my_usage(request.user, month)
        return self._answer(request, item, f"usage-{month:%Y-%m}")
