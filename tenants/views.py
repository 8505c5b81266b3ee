"""Pages for accounts: home, sign-in, password, personal API tokens, SSH keys, roster
import."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from core import notices
from tenants import roster, services
from tenants.forms import ApiTokenForm, PreferencesForm, RosterForm, SshKeyForm
from tenants.http import AuthenticatedHttpRequest
from tenants.models import ApiToken, SshKey
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
    return render(
        request, "tenants/roster.html", {"form": form, "result": result, "row_errors": row_errors}
    )


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
