"""Pages for accounts: home, sign-in, password, personal API tokens, SSH keys, roster
import."""

from __future__ import annotations

import csv
import io
import logging
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login as auth_login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import SetPasswordForm
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseForbidden,
    HttpResponseRedirect,
)
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse, reverse_lazy
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_POST
from django_cas_ng import views as cas_views
from kombu.exceptions import OperationalError as KombuOperationalError
from openpyxl import Workbook

from core import notices
from tenants import roster, services, tasks
from tenants.auth import SIGN_IN_ERROR
from tenants.choices import TenantKind
from tenants.forms import ApiTokenForm, PreferencesForm, RosterForm, SshKeyForm
from tenants.http import AuthenticatedHttpRequest
from tenants.models import ApiToken, SshKey, Tenant
from tenants.permissions import Access
from tenants.services.sign_in_links import DELIVERIES

logger = logging.getLogger(__name__)


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
    linkable = (
        [
            user.username
            for user in services.link_candidates(actor=request.user, usernames=result.usernames)
        ]
        if result
        else []
    )
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
            "linkable": linkable,
            "link_days": settings.SIGN_IN_LINK_DAYS,
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


LINKS_HEADER = ["student_number", "name", "email", "link"]


@login_required
@require_POST
def sign_in_links(request: AuthenticatedHttpRequest) -> HttpResponse:
    """One-time sign-in links for the members without a password of the classes the teacher
    manages (of ``class`` when given, of the accounts named ``user`` when given): a CSV to
    download (``delivery=csv``) or one mail each (``delivery=email``), sent by the task
    ``quanta.tenants.send_sign_in_links`` (in-process without a worker)."""
    access = Access.of(request.user)
    if not access.manages_anything():
        return HttpResponseForbidden(_("Only teachers and admins issue sign-in links."))
    delivery = request.POST.get("delivery", "")
    if delivery not in DELIVERIES:
        return HttpResponseBadRequest(_("Choose to download the links or to email them."))
    tenant = None
    if slug := request.POST.get("class", ""):
        tenant = Tenant.objects.filter(slug__iexact=slug, kind__in=ROSTER_KINDS).first()
        if tenant is None or not access.can_view(tenant):
            raise Http404
        if not access.can_manage(tenant):
            return HttpResponseForbidden(_("You do not manage %(name)s.") % {"name": tenant.name})
    usernames = request.POST.getlist("user") or None
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        target, {request.get_host()}, require_https=request.is_secure()
    ):
        target = reverse("roster-import")
    base_url = settings.PORTAL_URL or request.build_absolute_uri("/")
    links = services.issue_sign_in_links(
        actor=request.user,
        base_url=base_url,
        delivery=delivery,
        tenant=tenant,
        usernames=usernames,
    )
    if not links:
        messages.info(request, _("Everyone here has a password or has signed in already."))
        return redirect(target)
    if delivery == "email":
        mailed = services.link_recipients(links)
        try:
            if mailed:  # ids only: the task makes each link as it mails it
                tasks.send_sign_in_links.delay([list(pair) for pair in mailed], base_url)
        except (OSError, KombuOperationalError):  # in-process the mail server, else the queue
            logger.exception("could not send sign-in links")
            failed = _(
                "The mail could not be sent. Download the links as a CSV file and hand them out."
            )
            messages.error(request, failed)
            return redirect(target)
        messages.success(
            request,
            ngettext(
                "%(n)s sign-in link is being emailed.",
                "%(n)s sign-in links are being emailed.",
                len(mailed),
            )
            % {"n": len(mailed)},
        )
        if missing := len(links) - len(mailed):
            messages.warning(
                request,
                ngettext(
                    "%(n)s person has no email address: download the links for them.",
                    "%(n)s people have no email address: download the links for them.",
                    missing,
                )
                % {"n": missing},
            )
        return redirect(target)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(LINKS_HEADER)
    for link in links:
        user = link.user
        writer.writerow(
            [user.student_number or user.username, user.display_name, user.email, link.url]
        )
    response = HttpResponse(
        ("\ufeff" + out.getvalue()).encode(), content_type="text/csv; charset=utf-8"
    )
    name = f"sign-in-links-{tenant.slug}.csv" if tenant else "sign-in-links.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    response["Cache-Control"] = "no-store"  # the links sign people in
    return response


class SignInLinkView(auth_views.PasswordResetConfirmView):
    """The page a one-time sign-in link opens: choose a password (Django's validators), then
    signed in on the home page. An expired or used link says to ask the teacher for a new
    one."""

    template_name = "registration/sign_in_link.html"
    success_url = reverse_lazy("home")
    post_reset_login = True
    post_reset_login_backend = "django.contrib.auth.backends.ModelBackend"

    def form_valid(self, form: SetPasswordForm[Any]) -> HttpResponse:
        user = form.user
        services.set_password_from_link(user=user, password=form.cleaned_data["new_password1"])
        self.request.session.pop(auth_views.INTERNAL_RESET_SESSION_TOKEN, None)
        auth_login(self.request, user, self.post_reset_login_backend)
        messages.success(self.request, _("Your password is set. Welcome!"))
        return HttpResponseRedirect(self.get_success_url())


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
