"""Pages for teachers and TAs: the classes they manage, a class's dashboard (who runs what,
GPU-hours per student, the roster, the grants) and the grant form.

Thin views: what they show comes from ``queries``, what they change goes through the services
(``workloads.grants``, ``workloads.services.stop``, ``tenants.services``), the same functions
the API calls. A class the person cannot see is a 404; one they see but do not manage (a
student's own class) is a 403.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, cast

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from tenants import services as tenant_services
from tenants.choices import Role
from tenants.http import AuthenticatedHttpRequest
from tenants.models import Membership, Tenant
from tenants.permissions import Access, administers_anything
from workloads import grants, services
from workloads.costs import budget_of, spend_of
from workloads.models import Grant, Workload
from workloads.teaching import queries
from workloads.teaching.forms import GrantForm, MemberForm, WindowFormSet, typed, typed_rows

User = get_user_model()


# --- Who may see what ----------------------------------------------------------------------


def _managed_tenant(request: HttpRequest, slug: str) -> Tenant:
    tenant = (
        Tenant.objects.filter(slug__iexact=slug, kind__in=queries.TEACHING_KINDS)
        .select_related("parent", "quota")
        .first()
    )
    access = Access.of(request.user)
    if tenant is None or not access.can_view(tenant):
        raise Http404
    if not access.can_manage(tenant):
        raise PermissionDenied(_("You do not manage %(name)s.") % {"name": tenant.name})
    return tenant


def _managed_grant(request: HttpRequest, pk: int) -> Grant:
    grant = Grant.objects.select_related("tenant", "template").filter(pk=pk).first()
    access = Access.of(request.user)
    if grant is None or not access.can_view(grant.tenant):
        raise Http404
    if not access.can_manage(grant.tenant):
        raise PermissionDenied(_("You do not manage %(name)s.") % {"name": grant.tenant.name})
    return grant


# --- Classes -----------------------------------------------------------------------------------


@login_required
def classes(request: AuthenticatedHttpRequest) -> HttpResponse:
    access = Access.of(request.user)
    if not access.manages_anything():
        raise PermissionDenied(_("Only teachers, TAs and admins have classes to manage."))
    rows = queries.managed_classes(access, now=timezone.now())
    return render(
        request,
        "teaching/classes.html",
        {"rows": rows, "administers": administers_anything(access)},
    )


# --- A class's dashboard -----------------------------------------------------------------------


@login_required
def dashboard(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    tenant = _managed_tenant(request, slug)
    access = Access.of(request.user)
    sessions = queries.class_sessions(tenant, now=timezone.now())
    roster = queries.class_roster(tenant, sessions, viewer=request.user)
    roles = [
        (value, label) for value, label in Role.choices if access.can_assign_role(tenant, value)
    ]
    member_form = MemberForm(initial={"role": Role.STUDENT})
    cast(forms.ChoiceField, member_form.fields["role"]).choices = roles
    return render(
        request,
        "teaching/dashboard.html",
        {
            "tenant": tenant,
            "sessions": sessions.workloads,
            "low_gpu": sessions.low_gpu,
            "low_gpu_percent": queries.LOW_GPU_PERCENT,
            "low_gpu_minutes": queries.LOW_GPU_MINUTES,
            "roster": roster,
            "gpu_hours": queries.used_gpu_hours(tenant) + sum(sessions.held.values(), Decimal(0)),
            "spend": spend_of(tenant),
            "budget": budget_of(tenant),
            "grants": queries.class_grants(tenant),
            "member_form": member_form,
            "today": timezone.localdate(),
            # The members a sign-in link is for (the roster has them loaded already).
            "never_signed_in": sum(
                1
                for r in roster
                if r["membership"] and tenant_services.needs_sign_in_link(r["user"])
            ),
            "link_days": settings.SIGN_IN_LINK_DAYS,
        },
    )


@login_required
@require_POST
def stop_session(request: AuthenticatedHttpRequest, slug: str, pk: str) -> HttpResponse:
    tenant = _managed_tenant(request, slug)
    workload = (
        Workload.objects.filter(tenant=tenant, pk=pk).select_related("owner", "tenant").first()
    )
    if workload is None:
        raise Http404
    names = {"name": workload.name, "owner": workload.owner}
    if not workload.is_active:
        messages.info(request, _("%(name)s of %(owner)s has already ended.") % names)
    elif services.stop(actor=request.user, workload=workload):
        messages.success(request, _("Stopping %(name)s of %(owner)s.") % names)
    else:
        messages.info(request, _("%(name)s of %(owner)s is already stopping.") % names)
    return redirect("teaching-class", slug=tenant.slug)


@login_required
@require_POST
def add_member(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    tenant = _managed_tenant(request, slug)
    access = Access.of(request.user)
    form = MemberForm(request.POST)
    if not form.is_valid():
        messages.error(request, _("Give a username and a role."))
        return redirect("teaching-class", slug=tenant.slug)
    role, username = form.cleaned_data["role"], form.cleaned_data["username"].strip()
    if not access.can_assign_role(tenant, role):
        raise PermissionDenied(_("You cannot give this role."))
    user = User.objects.filter(username=username).first()
    if user is None:
        messages.error(
            request,
            _("There is no account “%(username)s”. Import a roster to create accounts.")
            % {"username": username},
        )
        return redirect("teaching-class", slug=tenant.slug)
    current = Membership.objects.filter(user=user, tenant=tenant).first()
    if current is not None and not access.can_assign_role(tenant, current.role):
        raise PermissionDenied(_("You cannot change this person's role."))
    tenant_services.set_membership(actor=request.user, tenant=tenant, user=user, role=role)
    messages.success(
        request,
        _("%(user)s is now %(role)s of %(tenant)s.")
        % {"user": user, "role": Role(role).label, "tenant": tenant.name},
    )
    return redirect("teaching-class", slug=tenant.slug)


@login_required
@require_POST
def remove_member(request: AuthenticatedHttpRequest, slug: str, pk: int) -> HttpResponse:
    tenant = _managed_tenant(request, slug)
    membership = get_object_or_404(
        Membership.objects.select_related("user", "tenant"), pk=pk, tenant=tenant
    )
    if membership.user_id == request.user.pk:
        messages.error(request, _("You cannot remove yourself; ask an administrator."))
        return redirect("teaching-class", slug=tenant.slug)
    if not Access.of(request.user).can_assign_role(tenant, membership.role):
        raise PermissionDenied(_("You cannot remove this person."))
    tenant_services.remove_membership(actor=request.user, membership=membership)
    messages.success(
        request,
        _("%(user)s was removed from %(tenant)s.")
        % {"user": membership.user, "tenant": tenant.name},
    )
    return redirect("teaching-class", slug=tenant.slug)


# --- Grants ------------------------------------------------------------------------------------


def _grant_page(request: HttpRequest, tenant: Tenant, grant: Grant | None) -> HttpResponse:
    if grant is not None:
        initial: dict[str, Any] = {
            "template": grant.template.slug,
            "flavors": [f.slug for f in grant.flavors.all()],
            "member_limit": grant.member_limit,
            "max_duration_minutes": grant.max_duration_minutes,
            "idle_timeout_minutes": grant.idle_timeout_minutes,
            "gpu_idle_percent": grant.gpu_idle_percent,
            "gpu_idle_minutes": grant.gpu_idle_minutes,
            "max_extensions": grant.max_extensions,
            "expires_on": grant.expires_on,
        }
        rows_initial = [dict(w) for w in grant.windows]
    else:
        initial = {"template": request.GET.get("template")}
        rows_initial = []
    data = request.POST if request.method == "POST" else None
    if data is not None and "choose" in data:
        # "Show its sizes": draw the form again for the chosen template, as typed, without
        # saving or judging it yet (no script needed).
        initial, rows_initial, data = typed(data), typed_rows(data), None
    form = GrantForm(data, initial=initial, grant=grant)
    rows = WindowFormSet(data, initial=rows_initial, prefix="windows")
    windows_errors: list[str] = []
    if data is not None:
        form_ok, rows_ok = form.is_valid(), rows.is_valid()
        if form_ok and rows_ok:
            saved = _save_grant(request, tenant, grant, form, rows, windows_errors)
            if saved is not None:
                messages.success(
                    request,
                    _("%(template)s is granted to %(tenant)s.")
                    % {"template": saved.template.name, "tenant": tenant.name},
                )
                return redirect("teaching-class", slug=tenant.slug)
    return render(
        request,
        "teaching/grant_form.html",
        {
            "tenant": tenant,
            "grant": grant,
            "form": form,
            "rows": rows,
            "windows_errors": windows_errors + list(rows.non_form_errors()),
        },
    )


def _save_grant(
    request: HttpRequest,
    tenant: Tenant,
    grant: Grant | None,
    form: GrantForm,
    rows: Any,
    windows_errors: list[str],
) -> Grant | None:
    """Create or change the grant through ``workloads.grants``; its errors go onto the form
    (the windows' above the rows) and None is returned."""
    cleaned = form.cleaned_data
    fields = {
        "template": cleaned["template"],
        "flavors": list(cleaned["flavors"]),
        "member_limit": cleaned["member_limit"],
        "max_duration_minutes": cleaned["max_duration_minutes"],
        "idle_timeout_minutes": cleaned["idle_timeout_minutes"],
        "gpu_idle_percent": cleaned["gpu_idle_percent"],
        "gpu_idle_minutes": cleaned["gpu_idle_minutes"],
        "max_extensions": cleaned["max_extensions"],
        "windows": [w for row in rows.forms if (w := row.window()) is not None],
        "expires_on": cleaned["expires_on"],
    }
    try:
        if grant is None:
            return grants.create_grant(actor=request.user, tenant=tenant, **fields)
        return grants.update_grant(actor=request.user, grant=grant, **fields)
    except ValidationError as exc:
        for name, errors in exc.message_dict.items():
            if name == "windows":
                windows_errors.extend(errors)
            else:
                form.add_error(name if name in form.fields else None, errors)
        return None


@login_required
def grant_new(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    return _grant_page(request, _managed_tenant(request, slug), None)


@login_required
def grant_edit(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    grant = _managed_grant(request, pk)
    return _grant_page(request, grant.tenant, grant)


@login_required
def grant_delete(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    grant = _managed_grant(request, pk)
    tenant = grant.tenant
    if request.method == "POST":
        grants.delete_grant(actor=request.user, grant=grant)
        messages.success(
            request,
            _("%(template)s is no longer granted to %(tenant)s.")
            % {"template": grant.template.name, "tenant": tenant.name},
        )
        return redirect("teaching-class", slug=tenant.slug)
    active = queries.active_sessions_of(grant)
    return render(
        request, "teaching/grant_delete.html", {"grant": grant, "tenant": tenant, "active": active}
    )
