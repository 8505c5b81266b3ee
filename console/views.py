"""Admin console pages that are not about clusters: the tenant tree with its quotas, the audit
log and the catalog. The cluster pages (overview, hosts, queues) are in ``console.cluster_views``;
both use the guards of ``core.guards``.

Superusers see everything. Tenant admins see the tenant tree and the audit log of the
subtrees they administer; everybody else gets 403.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import Count, Field, Model
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from core.guards import console_context, superuser_required
from core.models import AuditEvent
from scheduling.models import Cluster
from tenants import services as tenant_services
from tenants.http import AuthenticatedHttpRequest
from tenants.models import Quota, Tenant
from tenants.permissions import Access, administers_anything
from workloads.launch import cannot_run
from workloads.models import AppTemplate, Flavor, Image

AUDIT_PAGE_SIZE = 50


# --- Tenant tree and quotas --------------------------------------------------------------------

# The limits shown in the tree: (limit field, use field, column heading).
TREE_COLUMNS = (
    ("gpus", "used_gpus", gettext_lazy("GPUs")),
    ("environments", "used_environments", gettext_lazy("Environments")),
    ("jobs", "used_jobs", gettext_lazy("Jobs")),
    ("gpu_hours_per_term", "used_gpu_hours", gettext_lazy("GPU-hours / term")),
)


@login_required
def tenant_tree(request: AuthenticatedHttpRequest) -> HttpResponse:
    access = Access.of(request.user)
    if not administers_anything(access):
        raise PermissionDenied(_("Only administrators see the tenant tree."))
    tenants = list(
        Tenant.objects.filter(access.administered_tenants())
        .select_related("quota")
        .annotate(member_count=Count("memberships"))
        .order_by("path")
    )
    top = min((t.depth for t in tenants), default=0)
    rows = []
    for tenant in tenants:
        quota = _quota_of(tenant)
        over = tenant_services.quota_over_use(quota)
        rows.append(
            {
                "tenant": tenant,
                "indent": tenant.depth - top,
                "can_set_quota": access.can_set_quota(tenant),
                "quota": quota,
                "cells": [
                    {
                        "limit": getattr(quota, limit),
                        "used": getattr(quota, used),
                        "over": limit in over,
                    }
                    for limit, used, _heading in TREE_COLUMNS
                ],
                "member_limits": [
                    (_quota_field(name).verbose_name, getattr(quota, name))
                    for name in (
                        "member_gpus",
                        "member_environments",
                        "member_jobs",
                        "member_gpu_hours_per_term",
                    )
                    if getattr(quota, name) is not None
                ],
                "over_use": [_limit_label(name) for name in over],
            }
        )
    return render(
        request,
        "console/tenants.html",
        {
            **console_context(request, "tenants"),
            "rows": rows,
            "columns": [heading for _limit, _used, heading in TREE_COLUMNS],
        },
    )


def _quota_of(tenant: Tenant) -> Quota:
    try:
        return tenant.quota
    except Quota.DoesNotExist:  # tenants made outside the services have none yet
        return Quota(tenant=tenant)


def _quota_field(name: str) -> Field[Any, Any]:
    """A column of Quota: its limits are plain fields, never relations."""
    field = Quota._meta.get_field(name)
    assert isinstance(field, Field)
    return field


def _limit_label(name: str) -> str:
    return str(_quota_field(name).verbose_name)


class QuotaForm(forms.ModelForm):
    """The limits of one tenant; empty means no limit at this level."""

    class Meta:
        model = Quota
        fields = tenant_services.QUOTA_LIMIT_FIELDS


@login_required
def quota_edit(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    tenant = get_object_or_404(Tenant, slug=slug)
    access = Access.of(request.user)
    if not access.can_view(tenant):
        raise Http404
    if not access.can_set_quota(tenant):
        # The same rule as tenants.services.set_quota, checked before the form is shown.
        raise PermissionDenied(
            _("The limits of %(name)s are set by the admins of the tenants above it.")
            % {"name": tenant.name}
        )
    quota, _created = Quota.objects.get_or_create(tenant=tenant)
    used = {
        name: getattr(quota, f"used_{name}", None) for name in tenant_services.QUOTA_LIMIT_FIELDS
    }
    used["gpu_hours_per_term"] = quota.used_gpu_hours
    form = QuotaForm(request.POST or None, instance=quota)
    if request.method == "POST" and form.is_valid():
        limits = {name: form.cleaned_data[name] for name in tenant_services.QUOTA_LIMIT_FIELDS}
        try:
            update = tenant_services.set_quota(actor=request.user, tenant=tenant, **limits)
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            messages.success(request, _("Quota of %(name)s saved.") % {"name": tenant.name})
            if update.over_use:
                messages.warning(
                    request,
                    _(
                        "%(name)s now uses more than its limit of %(limits)s: running work "
                        "goes on, new work waits until use drops."
                    )
                    % {
                        "name": tenant.name,
                        "limits": ", ".join(_limit_label(n) for n in update.over_use),
                    },
                )
            return redirect("console-tenants")
    fields = [(form[name], used.get(name)) for name in tenant_services.QUOTA_LIMIT_FIELDS]
    return render(
        request,
        "console/quota_form.html",
        {**console_context(request, "tenants"), "tenant": tenant, "form": form, "fields": fields},
    )


# --- Audit log ---------------------------------------------------------------------------------


@login_required
def audit_log(request: AuthenticatedHttpRequest) -> HttpResponse:
    access = Access.of(request.user)
    if not administers_anything(access):
        raise PermissionDenied(_("Only administrators read the audit log."))
    events = AuditEvent.objects.visible_to(access)  # as the audit API shows them
    actions = sorted(set(events.order_by().values_list("action", flat=True).distinct()))
    action = request.GET.get("action", "")
    if action:
        events = events.filter(action=action)
    page = Paginator(events, AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
    return render(
        request,
        "console/audit.html",
        {**console_context(request, "audit"), "page": page, "actions": actions, "action": action},
    )


# --- Catalog -----------------------------------------------------------------------------------


def _edit_links(model: type[Model], api_name: str) -> dict[str, str | None]:
    """Where a superuser edits these: the Django admin if the model is registered there,
    else the API's browsable list."""
    meta = model._meta
    registered = admin.site.is_registered(model)
    return {
        "admin": reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
        if registered
        else None,
        "api": reverse(f"workloads-api:{api_name}-list"),
    }


@superuser_required
def catalog(request: HttpRequest) -> HttpResponse:
    images = Image.objects.annotate(template_count=Count("templates"))
    templates = (
        AppTemplate.objects.select_related("image", "default_flavor")
        .prefetch_related("allowed_flavors")
        .annotate(grant_count=Count("grants"))
    )
    flavors = Flavor.objects.annotate(
        template_count=Count("templates", distinct=True),
        grant_count=Count("grants", distinct=True),
    )
    clusters = list(Cluster.objects.order_by("name"))
    # Per template, where it is not offered and why ("PyCharm is not installed on this host").
    rows = [
        (
            template,
            [
                (cluster, reason)
                for cluster in clusters
                if (reason := cannot_run(template.kind, cluster)) is not None
            ],
        )
        for template in templates
    ]
    return render(
        request,
        "console/catalog.html",
        {
            **console_context(request, "catalog"),
            "images": images,
            "templates": rows,
            "flavors": flavors,
            "template_links": _edit_links(AppTemplate, "template"),
            "flavor_links": _edit_links(Flavor, "flavor"),
        },
    )
