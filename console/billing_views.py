"""Console: budgets and credits of the tenants an admin administers (superusers: all). One
page lists them with where each stands; forms create or change a budget and grant credit,
each through ``billing.budgets`` (the same services and checks as the API), errors shown on
the form's fields."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from billing import budgets
from billing.choices import BudgetPeriod, BudgetPolicy
from billing.models import Budget, CreditLot
from core.guards import console_context
from tenants.http import AuthenticatedHttpRequest
from tenants.models import Tenant
from tenants.permissions import Access, administers_anything


class TenantChoice(forms.ModelChoiceField):
    def label_from_instance(self, obj: Any) -> str:
        return f"{obj.name} ({obj.get_kind_display()})"


class BudgetForm(forms.Form):
    tenant = TenantChoice(queryset=Tenant.objects.none(), label=gettext_lazy("Tenant"))
    period = forms.ChoiceField(choices=BudgetPeriod.choices, label=gettext_lazy("Period"))
    allowance = forms.CharField(
        label=gettext_lazy("Allowance per period"), help_text=gettext_lazy("e.g. 500.00")
    )
    thresholds = forms.CharField(
        label=gettext_lazy("Warn at (per cent)"),
        initial="80, 100",
        help_text=gettext_lazy("Whole per cents from 1 to 100, separated by commas."),
    )
    policy = forms.ChoiceField(choices=BudgetPolicy.choices, label=gettext_lazy("When used up"))
    stop_grace_minutes = forms.CharField(
        label=gettext_lazy("Minutes from the warning to the stop"), initial="15"
    )

    def __init__(self, *args: Any, tenants: Any, budget: Budget | None = None, **kw: Any):
        super().__init__(*args, **kw)
        field = self.fields["tenant"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = tenants
        if budget is not None:  # a budget stays with its tenant
            del self.fields["tenant"]


class CreditForm(forms.Form):
    tenant = TenantChoice(queryset=Tenant.objects.none(), label=gettext_lazy("Tenant"))
    amount = forms.CharField(label=gettext_lazy("Amount"), help_text=gettext_lazy("e.g. 50.00"))
    expires_at = forms.CharField(
        label=gettext_lazy("Expires"),
        required=False,
        help_text=gettext_lazy("A date, e.g. 2026-01-31; empty: no end."),
    )
    note = forms.CharField(label=gettext_lazy("Note"), required=False, max_length=200)

    def __init__(self, *args: Any, tenants: Any, **kw: Any):
        super().__init__(*args, **kw)
        field = self.fields["tenant"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = tenants


def _errors(form: forms.Form, exc: ValidationError) -> None:
    for name, errors in exc.message_dict.items():
        form.add_error(name if name in form.fields else None, errors)


def _administered(request: AuthenticatedHttpRequest) -> tuple[Access, Any]:
    access = Access.of(request.user)
    if not administers_anything(access):
        raise PermissionDenied(_("Only administrators manage budgets."))
    return access, Tenant.objects.filter(access.administered_tenants()).order_by("path")


@login_required
def budget_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Every budget of the tenants the admin administers, a form for a new one, and credit."""
    _access, tenants = _administered(request)
    budget_form = BudgetForm(
        request.POST if request.POST.get("form") == "budget" else None,
        tenants=tenants,
        initial={"period": BudgetPeriod.MONTH, "policy": BudgetPolicy.BLOCK},
    )
    credit_form = CreditForm(
        request.POST if request.POST.get("form") == "credit" else None, tenants=tenants
    )
    if request.method == "POST":
        form: forms.Form = budget_form if request.POST.get("form") == "budget" else credit_form
        if form.is_valid():
            data = dict(form.cleaned_data)
            tenant = data.pop("tenant")
            try:
                if form is budget_form:
                    budgets.create_budget(actor=request.user, tenant=tenant, **data)
                    messages.success(
                        request, _("Budget of %(name)s saved.") % {"name": tenant.name}
                    )
                else:
                    budgets.grant_credit(actor=request.user, tenant=tenant, **data)
                    messages.success(
                        request,
                        _("Credit of %(amount)s granted to %(name)s.")
                        % {"amount": data["amount"], "name": tenant.name},
                    )
            except ValidationError as exc:
                _errors(form, exc)
            else:
                return redirect("console-budgets")
    now = timezone.now()
    rows = []
    for budget in Budget.objects.filter(tenant__in=tenants, is_active=True).select_related(
        "tenant"
    ):
        try:
            found = budgets.status(budget, now)
        except ValidationError:
            found = None
        rows.append({"budget": budget, "status": found})
    lots = (
        CreditLot.objects.filter(account__tenant__in=tenants)
        .select_related("account__tenant", "created_by")
        .order_by("-granted_at", "-pk")[:50]
    )
    states = budgets.lots_of({lot.account.tenant for lot in lots if lot.account.tenant}, now)
    return render(
        request,
        "console/budgets.html",
        {
            **console_context(request, "budgets"),
            "rows": rows,
            "lots": [(lot, states.get(lot.pk)) for lot in lots],
            "budget_form": budget_form,
            "credit_form": credit_form,
        },
    )


@login_required
def budget_edit(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    access, tenants = _administered(request)
    budget = get_object_or_404(Budget.objects.select_related("tenant"), pk=pk, is_active=True)
    if not access.can_administer(budget.tenant):
        raise Http404
    initial = {
        "period": budget.period,
        "allowance": f"{budget.allowance.normalize():f}",
        "thresholds": ", ".join(str(t) for t in budget.thresholds),
        "policy": budget.policy,
        "stop_grace_minutes": budget.stop_grace_minutes,
    }
    form = BudgetForm(request.POST or None, tenants=tenants, budget=budget, initial=initial)
    if request.method == "POST":
        if request.POST.get("deactivate"):
            budgets.deactivate_budget(actor=request.user, budget=budget)
            messages.success(
                request, _("Budget of %(name)s deactivated.") % {"name": budget.tenant.name}
            )
            return redirect("console-budgets")
        if form.is_valid():
            try:
                budgets.update_budget(actor=request.user, budget=budget, **form.cleaned_data)
            except ValidationError as exc:
                _errors(form, exc)
            else:
                messages.success(
                    request, _("Budget of %(name)s saved.") % {"name": budget.tenant.name}
                )
                return redirect("console-budgets")
    return render(
        request,
        "console/budget_form.html",
        {**console_context(request, "budgets"), "budget": budget, "form": form},
    )
