"""Minimal pages: App Center, my workloads, a workload's page, a job form. Every change goes
through the same services as the API."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_POST

from scheduling.backends.registry import get_backend
from tenants.http import AuthenticatedHttpRequest
from tenants.models import MemberUsage
from tenants.permissions import Access
from workloads import datasets, services, utilisation
from workloads.admission_checks import Ask, refusal_for
from workloads.choices import ACTIVE, State, WorkloadKind
from workloads.costs import budget_of, cost_so_far, hourly_prices
from workloads.filtersets import WorkloadFilterSet
from workloads.forms import JobForm, LaunchForm
from workloads.launch import cannot_run
from workloads.models import AppTemplate, Flavor, Workload
from workloads.outlook import outlooks
from workloads.payer import payer_for
from workloads.permissions import can_control, visible_workloads
from workloads.specs import handle_for
from workloads.usage import usage


def _errors(request: HttpRequest, exc: ValidationError) -> None:
    for field_errors in exc.message_dict.values():
        for error in field_errors:
            messages.error(request, error)


@login_required
def app_center(request: AuthenticatedHttpRequest) -> HttpResponse:
    grants = list(services.environment_grants(request.user))
    seen = outlooks(request.user, grants) if grants else {}
    mountable = list(datasets.visible_to(request.user)[:200])
    cards = []
    memo: dict[str, object] = {}  # the admission checks' memo, shared by every card
    budgets: dict[int, object] = {}  # payer tenant id → its budget (workloads.costs.budget_of)
    for grant in grants:
        cluster = grant.cluster or services.default_cluster()
        if cannot_run(grant.template.kind, cluster) is not None:
            continue  # not offered where it cannot run (the admin catalog says why)
        flavors = list(grant.flavors.all())
        prices = hourly_prices(cluster, flavors, grant)
        default = grant.template.default_flavor
        payer = payer_for(grant, request.user)
        tenant = payer["payer_tenant"]
        if tenant is not None and tenant.pk not in budgets:
            budgets[tenant.pk] = budget_of(tenant)
        # (flavor, outlook, price per hour now or None, why a launch is refused or None)
        sizes = [
            (
                flavor,
                seen[(grant.pk, flavor.pk)],
                prices.get(flavor.pk),
                refusal_for(Ask.launch(payer, flavor, request.user), memo),
            )
            for flavor in flavors
        ]
        refused = [flavor.pk for flavor, _o, _p, why in sizes if why is not None]
        cards.append(
            {
                "grant": grant,
                "cluster": cluster,
                "form": LaunchForm(  # a size the budget refuses is not offered
                    flavors=grant.flavors.exclude(pk__in=refused),
                    datasets=datasets.visible_to(request.user),
                    initial={"flavor": default if default in flavors else None},
                ),
                "datasets": mountable,
                # What is left of the payer's budget (None: no budget, or a person pays).
                "budget": budgets.get(tenant.pk) if tenant is not None else None,
                "sizes": sizes,
            }
        )
    return render(request, "workloads/app_center.html", {"cards": cards})


@login_required
@require_POST
def launch(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    template = get_object_or_404(AppTemplate, slug=slug, is_active=True)
    form = LaunchForm(
        request.POST,
        flavors=Flavor.objects.filter(is_active=True),
        datasets=datasets.visible_to(request.user),
    )
    if not form.is_valid():
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, str(error))
        return redirect("app-center")
    try:
        workload = services.launch_environment(
            actor=request.user,
            template=template,
            flavor=form.cleaned_data["flavor"],
            datasets=list(form.cleaned_data["datasets"]),
        )
    except ValidationError as exc:
        _errors(request, exc)
        return redirect("app-center")
    return redirect("workload", pk=workload.pk)


PAGE_SIZE = 25
# The sortable columns of the list: ?ordering= value, and whether the first click sorts
# newest / longest first.
SORTABLE = {"name": False, "state": False, "start": True, "end": True, "duration": True}


@login_required
def workload_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Your workloads and, for teachers, their classes': filtered and sorted with the API's
    filterset, 25 a page; the active ones you may stop can be stopped together."""
    visible = Workload.objects.filter(visible_workloads(request.user)).select_related(
        "owner", "tenant", "template", "flavor"
    )
    filters = WorkloadFilterSet(request.GET, queryset=visible, request=request)
    # A filter that cannot be read (a state that does not exist, a class not yours) shows its
    # error on its field and lists nothing, rather than everything.
    found = filters.qs if filters.is_valid() else filters.queryset.none()
    page = Paginator(found, PAGE_SIZE).get_page(request.GET.get("page"))
    for workload in page:
        workload.can_stop = workload.is_active and can_control(request.user, workload)
    current = request.GET.get("ordering", "")
    sorts = {}
    for key, newest_first in SORTABLE.items():
        if current == key:
            sorts[key] = {"next": f"-{key}", "aria": "ascending"}
        elif current == f"-{key}":
            sorts[key] = {"next": key, "aria": "descending"}
        else:
            sorts[key] = {"next": f"-{key}" if newest_first else key, "aria": ""}
    return render(
        request,
        "workloads/list.html",
        {
            "filters": filters,
            "page": page,
            "workloads": page.object_list,
            "sorts": sorts,
            "manages": Access.of(request.user).manages_anything(),
            "stoppable": any(w.can_stop for w in page),
        },
    )


@login_required
@require_POST
def stop_selected(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Stop the ticked workloads: only those the reader may stop and that are still active;
    the rest are left alone and counted."""
    wanted = set(request.POST.getlist("workload"))
    if not wanted:
        messages.warning(request, _("Tick the workloads to stop first."))
        return redirect(_back_to_list(request))
    try:
        found = list(
            Workload.objects.filter(visible_workloads(request.user), pk__in=wanted)
            .select_related("owner", "tenant")
            .order_by("created_at")
        )
    except ValidationError:  # not a workload id at all
        return HttpResponseBadRequest(_("Not a workload: pick from the list."))
    stopped = 0
    for workload in found:
        if workload.is_active and can_control(request.user, workload):
            stopped += bool(services.stop(actor=request.user, workload=workload))
    skipped = len(wanted) - stopped
    if stopped:
        messages.success(
            request,
            ngettext("Stopping %(n)d workload.", "Stopping %(n)d workloads.", stopped)
            % {"n": stopped},
        )
    if skipped:
        messages.warning(
            request,
            ngettext(
                "%(n)d workload was left alone: it has ended or is not yours to stop.",
                "%(n)d workloads were left alone: they have ended or are not yours to stop.",
                skipped,
            )
            % {"n": skipped},
        )
    return redirect(_back_to_list(request))


def _back_to_list(request: HttpRequest) -> str:
    """The list as the reader had it (its filters, sort and page), never another site."""
    query = request.POST.get("query", "")
    return reverse("workloads") + (f"?{query}" if query and "//" not in query else "")


def _controlled(request: HttpRequest, pk: str) -> Workload:
    workload = (
        Workload.objects.filter(visible_workloads(request.user))
        .select_related("owner", "tenant", "cluster", "template", "flavor", "grant")
        .filter(pk=pk)
        .first()
    )
    if workload is None or not can_control(request.user, workload):
        raise Http404
    return workload


@login_required
def workload_detail(request: AuthenticatedHttpRequest, pk: str) -> HttpResponse:
    workload = _controlled(request, pk)
    try:
        task = max(0, min(int(request.GET.get("task", 0)), workload.workers - 1))
    except ValueError:
        task = 0
    logs = ""
    if workload.backend_state:
        logs = get_backend(workload.cluster).logs(handle_for(workload), task).text
    return render(
        request,
        "workloads/detail.html",
        {
            "workload": workload,
            "cost": cost_so_far(workload),
            "events": workload.events.select_related("actor"),
            "logs": logs[-20000:],
            "task": task,
            "tasks": range(workload.workers),
            "gpu": _gpu_context(workload),
        },
    )


def _gpu_context(workload: Workload) -> dict[str, Any] | None:
    """The workload's GPU utilisation over the history kept (a chart) and, while it is
    warned for low use, the warning's words; None when it has no readings and no warning."""
    samples = utilisation.history(workload)
    warned = workload.state == State.RUNNING and workload.gpu_warned_at is not None
    if not samples and not warned:
        return None
    values = [s.utilisation for s in samples]
    return {
        "warned": warned,
        "grace_ends": (
            workload.gpu_warned_at + dt.timedelta(minutes=settings.GPU_CULL_GRACE_MINUTES)
            if warned and workload.gpu_warned_at
            else None
        ),
        "now": values[-1] if values else None,
        "memory_mib": samples[-1].memory_used_mib if samples else None,
        "chart": {
            "label": str(_("GPU utilisation (%)")),
            "labels": [f"{timezone.localtime(s.time):%H:%M}" for s in samples],
            "values": values,
            "capacity": 100,
            "capacityLabel": "100 %",
            "peak": max(values, default=0),
        },
    }


@login_required
@require_POST
def keep_gpu(request: AuthenticatedHttpRequest, pk: str) -> HttpResponse:
    workload = _controlled(request, pk)
    try:
        services.keep_gpu(actor=request.user, workload=workload)
    except ValidationError as exc:
        _errors(request, exc)
    return redirect("workload", pk=workload.pk)


@login_required
@require_POST
def stop(request: AuthenticatedHttpRequest, pk: str) -> HttpResponse:
    workload = _controlled(request, pk)
    services.stop(actor=request.user, workload=workload)
    return redirect("workload", pk=workload.pk)


@login_required
@require_POST
def extend(request: AuthenticatedHttpRequest, pk: str) -> HttpResponse:
    workload = _controlled(request, pk)
    try:
        deadline = services.extend(actor=request.user, workload=workload)
    except ValidationError as exc:
        _errors(request, exc)
    else:
        messages.success(
            request,
            _("Extended: it now stops at %(time)s.")
            % {"time": date_format(timezone.localtime(deadline), "SHORT_DATETIME_FORMAT")},
        )
    return redirect("workload", pk=workload.pk)


@login_required
@require_POST
def run_again(request: AuthenticatedHttpRequest, pk: str) -> HttpResponse:
    """Resubmit an ended job / relaunch a stopped environment (its owner only: others who
    may see the page get 403)."""
    workload = _controlled(request, pk)
    if workload.owner_id != request.user.pk:
        raise PermissionDenied
    try:
        again = services.run_again(actor=request.user, workload=workload)
    except ValidationError as exc:
        _errors(request, exc)
        return redirect("workload", pk=workload.pk)
    return redirect("workload", pk=again.pk)


@login_required
def new_job(request: AuthenticatedHttpRequest) -> HttpResponse:
    tenants = services.member_tenants(request.user)
    flavors = Flavor.objects.filter(grants__in=services.grants_for(request.user)).distinct()
    form = JobForm(
        request.POST or None,
        tenants=tenants,
        flavors=flavors,
        datasets=datasets.visible_to(request.user),
        initial=_copied_job(request),
    )
    if request.method == "POST" and form.is_valid():
        try:
            workload = services.submit_job(actor=request.user, **form.cleaned_data)
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            return redirect("workload", pk=workload.pk)
    return render(request, "workloads/new_job.html", {"form": form})


def _copied_job(request: AuthenticatedHttpRequest) -> dict[str, object]:
    """The form's fields from one of the person's own jobs (``?from=<id>``: "Edit and
    resubmit"); nothing for anything else, whoever's it is."""
    pk = request.GET.get("from", "")
    try:
        job = Workload.objects.filter(pk=pk, owner=request.user, kind=WorkloadKind.JOB).first()
    except (ValueError, ValidationError):
        return {}
    if job is None:
        return {}
    return {
        "name": job.name,
        "tenant": job.tenant_id,
        "flavor": job.flavor_id,
        "command": job.command_text,
        "workers": job.workers,
        "max_retries": job.max_retries,
        "datasets": list(job.datasets.all()),
        "env": "\n".join(f"{k}={v}" for k, v in (job.env or {}).items()),
    }


@login_required
def usage_page(request: AuthenticatedHttpRequest) -> HttpResponse:
    by = "month" if request.GET.get("by") == "month" else "week"
    rows = usage(request.user, by, 6 if by == "month" else 8)
    terms = [
        {
            "tenant": row.tenant,
            "used_gpu_hours": row.used_gpu_hours,
            "limit": row.tenant.quota.member_gpu_hours_per_term,
        }
        for row in MemberUsage.objects.filter(
            user=request.user, tenant__kind__in=("class", "project")
        ).select_related("tenant", "tenant__quota")
    ]
    return render(
        request,
        "workloads/usage.html",
        {
            "rows": rows,
            "by": by,
            "terms": terms,
            "total_gpu": sum(r.gpu_hours for r in rows),
            "total_cpu": sum(r.cpu_hours for r in rows),
        },
    )


@login_required
def desktop(request: AuthenticatedHttpRequest) -> HttpResponse:
    """My Desktop: one card per environment that is waiting or running."""
    environments = list(
        Workload.objects.filter(owner=request.user, kind="notebook", state__in=ACTIVE)
        .select_related("flavor", "cluster", "grant", "template")
        .order_by("-created_at")
    )
    for workload in environments:
        kind = workload.template.kind if workload.template else "jupyter"
        workload.open_suffix = {"jupyter": "lab", "terminal": "lab"}.get(kind, "")
    return render(request, "workloads/desktop.html", {"environments": environments})
