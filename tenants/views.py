"""Pages for accounts: home, sign-in, password, personal API tokens, SSH keys, roster
import."""

from __future__ import annotations

import csv
import io

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST
from django_cas_ng import views as cas_views
from openpyxl import Workbook

from core import notices
from tenants import roster, services
from tenants.auth import SIGN_IN_ERROR
from tenants.choices import TenantKind
from tenants.forms import ApiTokenForm, PreferencesForm, RosterForm, SshKeyForm
from tenants.http import AuthenticatedHttpRequest
from tenants.models import ApiToken, SshKey, Tenant
from tenants.permissions import Access


@login_required
@require_POST
def read_notices(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Mark one notice (``notice``) or all of one's notices read; another person's changes
    nothing."""
    raw = request.POST.get("notice", "")
    ids = [int(raw)] if raw.isdigit() and len(raw) < 19 else None
    notices.mark_read(actor=request.user, ids=ids)
    return redirect("home")


@login_required
def tokens(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = ApiTokenForm(request.POST or None)
    new_secret = None
    if request.method == "POST" and form.is_valid():
        try:
            _token, new_secret = services.create_api_token(actor=request.user, **form.cleaned_data)
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            form = ApiTokenForm()
    return render(
        request,
        "tenants/tokens.html",
        {
            "form": form,
            "new_secret": new_secret,
            "tokens": ApiToken.objects.filter(user=request.user),
        },
    )


@login_required
@require_POST
def revoke_token(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=pk, user=request.user)
    services.revoke_api_token(actor=request.user, token=token)
    messages.success(request, _("Token “%(name)s” revoked.") % {"name": token.name})
    return redirect("tokens")


@login_required
def ssh_keys(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = SshKeyForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            added = services.add_ssh_key(actor=request.user, **form.cleaned_data)
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            messages.success(
                request,
                _("Key “%(name)s” added: %(fingerprint)s")
                % {"name": added.name, "fingerprint": added.fingerprint},
            )
            return redirect("ssh-keys")
    host = settings.SSH_PUBLIC_HOST or request.get_host().rsplit(":", 1)[0]
    return render(
        request,
        "tenants/ssh_keys.html",
        {
            "form": form,
            "keys": SshKey.objects.filter(user=request.user),
            "ssh_host": host,
            "ssh_port": settings.SSH_GATEWAY_PORT,
        },
    )


@login_required
@require_POST
def remove_ssh_key(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    ssh_key = get_object_or_404(SshKey, pk=pk, user=request.user)
    services.remove_ssh_key(actor=request.user, ssh_key=ssh_key)
    messages.success(request, _("Key “%(name)s” removed.") % {"name": ssh_key.name})
    return redirect("ssh-keys")


@login_required
def roster_import(request: AuthenticatedHttpRequest) -> HttpResponse:
    if not Access.of(request.user).manages_anything():
        return HttpResponseForbidden(_("Only teachers and admins import rosters."))
    form = RosterForm(request.POST or None, request.FILES or None)
    result = row_errors = None
    if request.method == "POST" and form.is_valid():
        try:
            result = services.import_roster(
                actor=request.user, data=form.cleaned_data["file"].read()
            )
        except roster.RosterError as exc:
            form.add_error("file", str(exc))
        except services.RosterRejected as exc:
            row_errors = exc.errors
    access = Access.of(request.user)
    classes = [
        t
        for t in Tenant.objects.filter(access.managed_tenants(), kind__in=ROSTER_KINDS).order_by(
            "slug"
        )
        if access.can_manage(t)
    ]
    return render(
        request,
        "tenants/roster.html",
        {
            "form": form,
            "result": result,
            "row_errors": row_errors,
            "classes": classes,
            "campus_sign_in": campus_sign_in(),
        },
    )


ROSTER_KINDS = (TenantKind.CLASS, TenantKind.PROJECT)
SAMPLE_HEADER = ["student_number", "name", "email", "class", "role"]


def campus_sign_in() -> list[str]:
    """How people without a password sign in here, one sentence per configured way."""
    ways = []
    if settings.LDAP_ENABLED:
        ways.append(
            _(
                "With their campus account: on the sign-in page they type their student "
                "number and their campus password."
            )
        )
    if settings.CAS_ENABLED:
        ways.append(
            _("With the “%(button)s” button on the sign-in page.")
            % {"button": settings.CAS_PROVIDER_NAME}
        )
    if settings.OIDC_ENABLED:
        ways.append(
            _("With the “%(button)s” button on the sign-in page.")
            % {"button": settings.OIDC_PROVIDER_NAME}
        )
    return ways


def _sample_rows(request: AuthenticatedHttpRequest) -> list[list[str]]:
    access = Access.of(request.user)
    mine = Tenant.objects.filter(access.managed_tenants(), kind__in=ROSTER_KINDS).first()
    code = mine.slug if mine else "ml-101"
    return [
        SAMPLE_HEADER,
        ["2024001", "张三", "zhangsan@campus.example", code, "student"],
        ["2024002", "Li Si", "lisi@campus.example", code, "student"],
        ["2024003", "Wang Wu", "wangwu@campus.example", code, "ta"],
    ]


@login_required
def roster_sample(request: AuthenticatedHttpRequest, kind: str) -> HttpResponse:
    """A sample roster to fill in: CSV (UTF-8 with a byte order mark, so Excel shows the
    Chinese name) or an Excel workbook, with the teacher's own class code in it."""
    if kind not in ("csv", "xlsx"):
        raise Http404
    if not Access.of(request.user).manages_anything():
        return HttpResponseForbidden(_("Only teachers and admins import rosters."))
    rows = _sample_rows(request)
    if kind == "csv":
        out = io.StringIO()
        csv.writer(out, lineterminator="\r\n").writerows(rows)
        response = HttpResponse(
            ("\ufeff" + out.getvalue()).encode(), content_type="text/csv; charset=utf-8"
        )
    else:
        book = Workbook()
        sheet = book.active
        assert sheet is not None  # a new workbook has one sheet
        sheet.title = "roster"
        for row in rows:
            sheet.append(row)
        data = io.BytesIO()
        book.save(data)
        response = HttpResponse(
            data.getvalue(),
            content_type="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        )
    response["Content-Disposition"] = f'attachment; filename="roster-sample.{kind}"'
    return response


@login_required
def preferences(request: AuthenticatedHttpRequest) -> HttpResponse:
    user = request.user
    form = PreferencesForm(
        request.POST or None,
        initial={
            "display_name": user.display_name,
            "language": user.language,
            "time_zone": user.time_zone,
        },
    )
    if request.method == "POST" and form.is_valid():
        services.update_preferences(actor=user, **form.cleaned_data)
        messages.success(request, _("Preferences saved."))
        response = redirect("preferences")
        response.set_cookie(settings.LANGUAGE_COOKIE_NAME, form.cleaned_data["language"] or "")
        return response
    return render(request, "tenants/preferences.html", {"form": form})


@require_POST
def choose_language(request: HttpRequest) -> HttpResponse:
    """The language switcher: a signed-in person's choice is kept with their account."""
    language = request.POST.get("language", "")
    if language not in dict(settings.LANGUAGES):
        language = settings.LANGUAGE_CODE
    if request.user.is_authenticated:
        services.update_preferences(actor=request.user, language=language)
    target = request.POST.get("next", "/")
    if not url_has_allowed_host_and_scheme(
        target, {request.get_host()}, require_https=request.is_secure()
    ):
        target = "/"
    response = redirect(target)
    response.set_cookie(settings.LANGUAGE_COOKIE_NAME, language, samesite="Lax")
    return response


class CampusCASLoginView(cas_views.LoginView):
    """django-cas-ng's login (to the CAS server and back with a ticket); a refused or
    unverifiable ticket returns to the sign-in page with the reason instead of a 403."""

    def get(self, request: HttpRequest) -> HttpResponse:
        if not settings.CAS_ENABLED:
            return redirect("login")
        # django-cas-ng 5.1.1 follows ?next= unchecked after sign-in: keep it on this site.
        target = request.GET.get("next")
        if target and not url_has_allowed_host_and_scheme(
            target, {request.get_host()}, require_https=request.is_secure()
        ):
            query = request.GET.copy()
            query["next"] = settings.CAS_REDIRECT_URL
            query._mutable = False
            request.GET = query  # type: ignore[assignment]  # an immutable QueryDict again
        try:
            return super().get(request)
        except PermissionDenied:
            reason = getattr(request, SIGN_IN_ERROR, None) or _("Campus sign-in failed.")
            messages.error(request, reason)
            return redirect("login")

    def post(self, request: HttpRequest) -> HttpResponse:
        if not settings.CAS_ENABLED:
            return redirect("login")
        return super().post(request)  # the CAS server's single logout (logoutRequest)


class CampusCASLogoutView(cas_views.LogoutView):
    """Sign out of Quanta and, with ``CAS_LOGOUT_COMPLETELY``, of the CAS server too."""

    http_method_names = ["post"]

    def post(self, request: HttpRequest) -> HttpResponse:
        if not settings.CAS_ENABLED:
            return redirect("logout")
        return super().post(request)
