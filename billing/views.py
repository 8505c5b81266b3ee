"""Invoice and statement pages under /billing/: the list, one invoice or statement with its
lines, as CSV (``?format=csv`` or ``/csv/``) and printable (``/print/``: no navigation, print
CSS; the browser's print makes the PDF). Who sees what is ``billing.invoices``'s rule; what
one may not see is not found."""

from __future__ import annotations

import csv
import datetime as dt
import io
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db.models import Sum
from django.http import Http404, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from billing import class_usage, invoices
from billing.api.invoices import csv_response
from billing.models import Account, LedgerEntry
from tenants.http import AuthenticatedHttpRequest
from tenants.models import Tenant
from tenants.permissions import Access

LIST_LIMIT = 200


def _id(pk: int) -> int:
    """A row id from the URL, or not found (never the database's integer overflow)."""
    if not 0 < pk < 2**63:
        raise Http404
    return pk


def _show(
    request: AuthenticatedHttpRequest, item: invoices.Statement, name: str, mode: str
) -> HttpResponse:
    if mode == "csv" or request.GET.get("format") == "csv":
        return csv_response(item, name)
    template = "billing/invoice_print.html" if mode == "print" else "billing/invoice_detail.html"
    return render(request, template, {"item": item, "name": name})


@login_required
def invoice_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    errors: list[str] = []
    rows = invoices.invoices_seen_by(request.user).order_by("-period_start", "account_id")
    month_text = request.GET.get("month", "").strip()
    account_text = request.GET.get("account", "").strip()
    try:
        if month_text:
            start, _end = invoices.month_bounds(invoices.parse_month(month_text))
            rows = rows.filter(period_start=start)
        if account_text:
            rows = rows.filter(account=invoices.account_seen_by(request.user, account_text))
    except ValidationError as exc:
        errors = [error for messages in exc.message_dict.values() for error in messages]
        rows = rows.none()
    now = timezone.now()
    current = invoices.month_of(now)
    start, end = invoices.month_bounds(current)
    seen = invoices.accounts_seen_by(request.user)
    open_totals = list(
        LedgerEntry.objects.filter(invoices._live_entries(start, end, now), account__in=seen)
        .values("account_id")
        .annotate(total=Sum("amount"))
        .order_by("account_id")[:LIST_LIMIT]
    )
    names = {
        account.pk: account.name
        for account in Account.objects.filter(
            pk__in=[row["account_id"] for row in open_totals]
        ).select_related("tenant", "user")
    }
    terms = [
        tenant
        for tenant in Tenant.objects.filter(
            Access.of(request.user).managed_tenants(),
            term_start__isnull=False,
            term_end__isnull=False,
        ).order_by("path")[:LIST_LIMIT]
    ]
    return render(
        request,
        "billing/invoice_list.html",
        {
            "invoices": list(rows[:LIST_LIMIT]),
            "errors": errors,
            "month": month_text,
            "account": account_text,
            "current": f"{current:%Y-%m}",
            "open": [
                {
                    "account_id": row["account_id"],
                    "name": names.get(row["account_id"], ""),
                    "total": invoices.cents(row["total"]),
                }
                for row in open_totals
            ],
            "terms": terms,
        },
        status=400 if errors else 200,
    )


@login_required
def invoice_detail(request: AuthenticatedHttpRequest, pk: int, mode: str = "") -> HttpResponse:
    invoice = get_object_or_404(invoices.invoices_seen_by(request.user), pk=_id(pk))
    return _show(request, invoices.invoice_statement(invoice), invoice.number, mode)


def _month(text: str) -> dt.date:
    try:
        return invoices.parse_month(text)
    except ValidationError:
        raise Http404 from None


@login_required
def account_statement(
    request: AuthenticatedHttpRequest, pk: int, month: str, mode: str = ""
) -> HttpResponse:
    account = get_object_or_404(
        invoices.accounts_seen_by(request.user).select_related("tenant", "user"), pk=_id(pk)
    )
    when = _month(month)
    item = invoices.statement(account, when)
    return _show(request, item, item.number or f"{when:%Y-%m}-{account.pk}", mode)


@login_required
def term_statement(request: AuthenticatedHttpRequest, pk: int, mode: str = "") -> HttpResponse:
    tenant = get_object_or_404(Tenant, pk=_id(pk), term_start__isnull=False, term_end__isnull=False)
    if not Access.of(request.user).can_manage(tenant):
        raise Http404
    return _show(request, invoices.term_statement(tenant), f"term-{tenant.slug}", mode)


@login_required
def my_usage(request: AuthenticatedHttpRequest, mode: str = "") -> HttpResponse:
    text = request.GET.get("month", "").strip()
    try:
        when = invoices.parse_month(text) if text else invoices.month_of(timezone.now())
    except ValidationError as exc:
        errors = [error for messages in exc.message_dict.values() for error in messages]
        context: dict[str, Any] = {"item": None, "errors": errors, "mine": True}
        return render(request, "billing/invoice_detail.html", context, status=400)
    item = invoices.my_usage(request.user, when)
    if mode == "csv" or request.GET.get("format") == "csv":
        return csv_response(item, f"usage-{when:%Y-%m}")
    template = "billing/invoice_print.html" if mode == "print" else "billing/invoice_detail.html"
    return render(request, template, {"item": item, "mine": True, "month": f"{when:%Y-%m}"})


@login_required
def class_usage_csv(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    """A class's usage per student for ``?from=&until=`` (days, inclusive), as CSV: for the
    class's teachers and admins; to anyone else the class is not found."""
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None or not Access.of(request.user).can_manage(tenant):
        raise Http404
    try:
        start, end = class_usage.parse_range(
            request.GET.get("from", "").strip(), request.GET.get("until", "").strip(), tenant
        )
    except ValidationError as exc:
        problems = [f"{name}: {m}" for name, found in exc.message_dict.items() for m in found]
        return HttpResponseBadRequest("; ".join(problems), content_type="text/plain")
    out = io.StringIO()
    csv.writer(out).writerows(class_usage.csv_rows(tenant, start, end))
    response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = (
        f'attachment; filename="usage-{tenant.slug}-{start:%Y%m%d}-{end:%Y%m%d}.csv"'
    )
    return response
