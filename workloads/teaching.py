"""Pages for teachers and TAs: the classes they manage, a class's dashboard (who runs what,
GPU-hours per student, the roster, the grants) and the grant form.

Every change goes through the services (``workloads.services.stop``, ``tenants.services``) or
the API's ``GrantSerializer`` with the API's audit rows. A class the person cannot see is a
404; one they see but do not manage (a student's own class) is a 403.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Count, Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from core.audit import record
from tenants import services as tenant_services
from tenants.choices import MANAGING_ROLES, Role, TenantKind
from tenants.models import Membership, MemberUsage, Quota, Tenant
from tenants.permissions import ROLE_RANK, Access, administers_anything
from workloads import services, windows
from workloads.api.serializers import GrantSerializer
from workloads.choices import ACTIVE, HOLDING, State, WorkloadKind
from workloads.models import AppTemplate, Flavor, Grant, Workload

User = get_user_model()

# Grants go to classes and projects; those are what a teacher's pages are about.
TEACHING_KINDS = (TenantKind.CLASS, TenantKind.PROJECT)
DAYS = (
    gettext_lazy("Monday"),
    gettext_lazy("Tuesday"),
    gettext_lazy("Wednesday"),
    gettext_lazy("Thursday"),
    gettext_lazy("Friday"),
    gettext_lazy("Saturday"),
    gettext_lazy("Sunday"),
)


# --- Who may see what ----------------------------------------------------------------------


def _managed_tenant(request: HttpRequest, slug: str) -> Tenant:
    tenant = (
        Tenant.objects.filter(slug=slug, kind__in=TEACHING_KINDS)
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


# --- GPU-hours ---------------------------------------------------------------------------------


def held_gpu_hours(
    *,
    started_at: dt.datetime | None,
    charged: bool,
    quota_request: dict[str, Any],
    now: dt.datetime,
) -> Decimal:
    """GPU-hours a workload has used so far in its current run: what ending it will add to
    the member's and the class's ``used_gpu_hours`` (computed as ``lifecycle`` does)."""
    gpus = Decimal((quota_request or {}).get("gpus", "0"))
    if not charged or started_at is None or not gpus:
        return Decimal(0)
    return gpus * Decimal((now - started_at).total_seconds()) / 3600


def _used_gpu_hours(tenant: Tenant) -> Decimal:
    try:
        return tenant.quota.used_gpu_hours
    except Quota.DoesNotExist:
        return Decimal(0)


# --- Classes -----------------------------------------------------------------------------------


@login_required
def classes(request: HttpRequest) -> HttpResponse:
    access = Access.of(request.user)
    if not access.manages_anything():
        raise PermissionDenied(_("Only teachers, TAs and admins have classes to manage."))
    tenants = list(
        Tenant.objects.filter(access.managed_tenants(), kind__in=TEACHING_KINDS)
        .select_related("parent", "quota")
        .annotate(member_count=Count("memberships"))
        .order_by("-is_active", "name")
    )
    now = timezone.now()
    running: dict[int, int] = defaultdict(int)
    held: dict[int, Decimal] = defaultdict(Decimal)
    holding = Workload.objects.filter(
        access.tenant_filter(MANAGING_ROLES, prefix="tenant__"),
        tenant__kind__in=TEACHING_KINDS,
        state__in=HOLDING,
    ).values("tenant_id", "kind", "state", "started_at", "charged", "quota_request")
    for row in holding:
        if row["kind"] == WorkloadKind.NOTEBOOK and row["state"] == State.RUNNING:
            running[row["tenant_id"]] += 1
        held[row["tenant_id"]] += held_gpu_hours(
            started_at=row["started_at"],
            charged=row["charged"],
            quota_request=row["quota_request"],
            now=now,
        )
    rows = [
        {
            "tenant": t,
            "running": running[t.pk],
            "gpu_hours": _used_gpu_hours(t) + held[t.pk],
        }
        for t in tenants
    ]
    return render(
        request,
        "teaching/classes.html",
        {"rows": rows, "administers": administers_anything(access)},
    )


# --- A class's dashboard -----------------------------------------------------------------------


class MemberForm(forms.Form):
    username = forms.CharField(
        label=gettext_lazy("Username"),
        max_length=150,
        help_text=gettext_lazy("Imported students sign in with their student number."),
    )
    role = forms.ChoiceField(label=gettext_lazy("Role"), choices=Role.choices)


def _minutes(delta: dt.timedelta) -> int:
    return max(0, int(delta.total_seconds() // 60))


@login_required
def dashboard(request: HttpRequest, slug: str) -> HttpResponse:
    tenant = _managed_tenant(request, slug)
    access = Access.of(request.user)
    now = timezone.now()

    sessions = list(
        Workload.objects.filter(tenant=tenant, state__in=ACTIVE)
        .select_related("owner", "template", "flavor")
        .order_by("owner__username", "created_at")
    )
    held: dict[int, Decimal] = defaultdict(Decimal)
    running: dict[int, int] = defaultdict(int)
    for w in sessions:
        w.gpu_hours_now = held_gpu_hours(
            started_at=w.started_at, charged=w.charged, quota_request=w.quota_request, now=now
        )
        held[w.owner_id] += w.gpu_hours_now
        running[w.owner_id] += 1
        w.idle_minutes = w.minutes_left = None
        if w.state == State.RUNNING and w.kind == WorkloadKind.NOTEBOOK:
            w.idle_minutes = _minutes(now - (w.last_activity_at or w.started_at or w.created_at))
        if w.deadline_at and w.state == State.RUNNING:
            w.minutes_left = _minutes(w.deadline_at - now)

    memberships = sorted(
        Membership.objects.filter(tenant=tenant).select_related("user"),
        key=lambda m: (-ROLE_RANK[Role(m.role)], m.user.username),
    )
    usage = {u.user_id: u for u in MemberUsage.objects.filter(tenant=tenant).select_related("user")}
    roster = []
    for m in memberships:
        used = usage.pop(m.user_id, None)
        roster.append(
            {
                "membership": m,
                "user": m.user,
                "gpu_hours": (used.used_gpu_hours if used else Decimal(0)) + held[m.user_id],
                "running": running[m.user_id],
                "can_remove": m.user_id != request.user.pk
                and access.can_assign_role(tenant, m.role),
            }
        )
    # People who used GPUs here and were removed since: their hours still count this term.
    for u in usage.values():
        if u.used_gpu_hours or held[u.user_id]:
            roster.append(
                {
                    "membership": None,
                    "user": u.user,
                    "gpu_hours": u.used_gpu_hours + held[u.user_id],
                    "running": running[u.user_id],
                    "can_remove": False,
                }
            )
    most = max((r["gpu_hours"] for r in roster), default=Decimal(0))
    for r in roster:
        r["bar"] = round(r["gpu_hours"] * 100 / most) if most else 0

    grants = list(
        Grant.objects.filter(tenant=tenant)
        .select_related("template")
        .prefetch_related("flavors")
        .order_by("template__name")
    )
    for g in grants:
        g.windows_text = windows.describe_local(g.windows)
    roles = [
        (value, label) for value, label in Role.choices if access.can_assign_role(tenant, value)
    ]
    member_form = MemberForm(initial={"role": Role.STUDENT})
    member_form.fields["role"].choices = roles
    return render(
        request,
        "teaching/dashboard.html",
        {
            "tenant": tenant,
            "sessions": sessions,
            "roster": roster,
            "gpu_hours": _used_gpu_hours(tenant) + sum(held.values(), Decimal(0)),
            "grants": grants,
            "member_form": member_form,
            "today": timezone.localdate(),
        },
    )


@login_required
@require_POST
def stop_session(request: HttpRequest, slug: str, pk: str) -> HttpResponse:
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
def add_member(request: HttpRequest, slug: str) -> HttpResponse:
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
def remove_member(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
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


def describe_flavor(flavor: Flavor) -> str:
    """ "1 GPU · 4 CPU · 16 GiB": what a teacher needs to pick a size."""
    parts = []
    if flavor.gpus:
        parts.append(_("%(n)s GPU") % {"n": flavor.gpus})
    elif flavor.gpu_milli:
        parts.append(
            _("%(share)s%% of a GPU, %(memory)s GiB")
            % {"share": flavor.gpu_milli // 10, "memory": _gib(flavor.gpu_memory_mib)}
        )
    parts.append(_("%(n)s CPU") % {"n": _number(flavor.cpu_milli / 1000)})
    parts.append(_("%(n)s GiB") % {"n": _gib(flavor.memory_mib)})
    return f"{flavor.name} ({' · '.join(parts)})"


def _number(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _gib(mib: int) -> str:
    return _number(mib / 1024)


class GrantForm(forms.Form):
    """The grant's fields; the API's GrantSerializer validates them before anything is saved."""

    template = forms.ModelChoiceField(
        queryset=AppTemplate.objects.none(),
        to_field_name="slug",
        empty_label=None,
        label=gettext_lazy("Template"),
    )
    flavors = forms.ModelMultipleChoiceField(
        queryset=Flavor.objects.all(),
        to_field_name="slug",
        widget=forms.CheckboxSelectMultiple,
        label=gettext_lazy("Sizes"),
        help_text=gettext_lazy("The sizes the template allows."),
    )
    member_limit = forms.IntegerField(
        label=gettext_lazy("Environments per student at once"), min_value=1, initial=1
    )
    max_duration_minutes = forms.IntegerField(
        label=gettext_lazy("Longest session (minutes)"), min_value=1, initial=240
    )
    idle_timeout_minutes = forms.IntegerField(
        label=gettext_lazy("Stop after idle for (minutes)"),
        min_value=0,
        initial=60,
        help_text=gettext_lazy("0: idle sessions are not stopped."),
    )
    max_extensions = forms.IntegerField(
        label=gettext_lazy("Extensions allowed"), min_value=0, initial=2
    )
    expires_on = forms.DateField(
        label=gettext_lazy("Expires after"),
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d"),
        help_text=gettext_lazy("The last day students may launch it. Empty: no expiry."),
    )

    def __init__(self, *args: Any, grant: Grant | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        active = Q(is_active=True) | Q(pk=grant.template_id) if grant else Q(is_active=True)
        templates = list(
            AppTemplate.objects.filter(active).prefetch_related("allowed_flavors").order_by("name")
        )
        self.fields["template"].queryset = AppTemplate.objects.filter(active).order_by("name")
        self.fields["template"].widget.choices = [(t.slug, t.name) for t in templates]
        chosen_slug = self.data.get("template") if self.is_bound else self.initial.get("template")
        chosen = next(
            (t for t in templates if t.slug == chosen_slug), templates[0] if templates else None
        )
        self.chosen_template = chosen
        # Only the chosen template's sizes are offered; a size ticked outside them stays on
        # the page so the serializer's error about it can be seen and undone.
        allowed = list(chosen.allowed_flavors.all()) if chosen else []
        ticked = set(
            self.data.getlist("flavors") if self.is_bound else self.initial.get("flavors", [])
        )
        outside = ticked - {f.slug for f in allowed}
        shown = allowed + list(Flavor.objects.filter(slug__in=outside)) if outside else allowed
        self.fields["flavors"].widget.choices = [(f.slug, describe_flavor(f)) for f in shown]

    def clean_expires_on(self) -> dt.date | None:
        value = self.cleaned_data["expires_on"]
        if value and "expires_on" in self.changed_data and value < timezone.localdate():
            raise forms.ValidationError(_("Choose today or a later day."))
        return value


class WindowForm(forms.Form):
    """One weekly time window; a row left empty is no window."""

    day = forms.TypedChoiceField(
        label=gettext_lazy("Day"),
        choices=[("", "—"), *((str(i), name) for i, name in enumerate(DAYS))],
        coerce=int,
        empty_value=None,
        required=False,
    )
    start = forms.TimeField(
        label=gettext_lazy("From"),
        required=False,
        widget=forms.TimeInput(attrs={"type": "time"}, format="%H:%M"),
    )
    end = forms.TimeField(
        label=gettext_lazy("Until"),
        required=False,
        widget=forms.TimeInput(attrs={"type": "time"}, format="%H:%M"),
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        values = [data.get("day"), data.get("start"), data.get("end")]
        if any(v is None for v in values) and any(v is not None for v in values):
            raise forms.ValidationError(
                _("Give a day, a start and an end, or leave the row empty.")
            )
        return data

    def window(self) -> dict[str, Any] | None:
        data = self.cleaned_data
        if data.get("day") is None:
            return None
        return {
            "day": data["day"],
            "start": f"{data['start']:%H:%M}",
            "end": f"{data['end']:%H:%M}",
        }


WindowFormSet = forms.formset_factory(
    WindowForm, extra=3, max_num=21, validate_max=True, absolute_max=50
)


def _grant_page(request: HttpRequest, tenant: Tenant, grant: Grant | None) -> HttpResponse:
    if grant is not None:
        initial: dict[str, Any] = {
            "template": grant.template.slug,
            "flavors": [f.slug for f in grant.flavors.all()],
            "member_limit": grant.member_limit,
            "max_duration_minutes": grant.max_duration_minutes,
            "idle_timeout_minutes": grant.idle_timeout_minutes,
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
        initial, rows_initial, data = _typed(data), _typed_rows(data), None
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


def _typed(data: Any) -> dict[str, Any]:
    return {
        name: data.getlist(name) if name == "flavors" else data.get(name)
        for name in GrantForm.base_fields
        if name in data
    }


def _typed_rows(data: Any) -> list[dict[str, str]]:
    try:
        count = min(int(data.get("windows-TOTAL_FORMS", 0)), WindowFormSet.absolute_max)
    except ValueError:
        count = 0
    rows = [
        {k: data.get(f"windows-{i}-{k}", "") for k in ("day", "start", "end")} for i in range(count)
    ]
    return [row for row in rows if any(row.values())]


def _save_grant(
    request: HttpRequest,
    tenant: Tenant,
    grant: Grant | None,
    form: GrantForm,
    rows: Any,
    windows_errors: list[str],
) -> Grant | None:
    cleaned = form.cleaned_data
    data = {
        "template": cleaned["template"].slug,
        "tenant": tenant.slug,
        "flavors": [f.slug for f in cleaned["flavors"]],
        "member_limit": cleaned["member_limit"],
        "max_duration_minutes": cleaned["max_duration_minutes"],
        "idle_timeout_minutes": cleaned["idle_timeout_minutes"],
        "max_extensions": cleaned["max_extensions"],
        "windows": [w for row in rows.forms if (w := row.window()) is not None],
        "expires_on": cleaned["expires_on"],
    }
    serializer = GrantSerializer(instance=grant, data=data)
    if not serializer.is_valid():
        for name, errors in serializer.errors.items():
            if name == "windows":
                windows_errors.extend(str(e) for e in errors)
            else:
                form.add_error(name if name in form.fields else None, [str(e) for e in errors])
        return None
    with transaction.atomic():
        if grant is None:
            saved = serializer.save(created_by=request.user)
            record(
                "grant.create",
                actor=request.user,
                target=saved,
                tenant=saved.tenant,
                flavors=[f.slug for f in saved.flavors.all()],
            )
        else:
            saved = serializer.save()
            record("grant.update", actor=request.user, target=saved, tenant=saved.tenant)
    return saved


@login_required
def grant_new(request: HttpRequest, slug: str) -> HttpResponse:
    return _grant_page(request, _managed_tenant(request, slug), None)


@login_required
def grant_edit(request: HttpRequest, pk: int) -> HttpResponse:
    grant = _managed_grant(request, pk)
    return _grant_page(request, grant.tenant, grant)


@login_required
def grant_delete(request: HttpRequest, pk: int) -> HttpResponse:
    grant = _managed_grant(request, pk)
    tenant = grant.tenant
    if request.method == "POST":
        with transaction.atomic():
            record("grant.delete", actor=request.user, target=grant, tenant=tenant)
            grant.delete()
        messages.success(
            request,
            _("%(template)s is no longer granted to %(tenant)s.")
            % {"template": grant.template.name, "tenant": tenant.name},
        )
        return redirect("teaching-class", slug=tenant.slug)
    active = Workload.objects.filter(grant=grant, state__in=ACTIVE).count()
    return render(
        request, "teaching/grant_delete.html", {"grant": grant, "tenant": tenant, "active": active}
    )
