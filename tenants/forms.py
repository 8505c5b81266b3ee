from typing import Any, cast

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from tenants.auth import SIGN_IN_ERROR


class CampusAuthenticationForm(AuthenticationForm):
    """The sign-in form; when a campus backend says why it refused (the directory is down,
    a local account), that reason replaces "enter a correct username and password"."""

    def get_invalid_login_error(self) -> ValidationError:
        reason = getattr(self.request, SIGN_IN_ERROR, None)
        if reason:
            return ValidationError(reason, code="campus_sign_in")
        return super().get_invalid_login_error()


class ApiTokenForm(forms.Form):
    name = forms.CharField(
        label=_("Name"), max_length=100, help_text=_("Where you will use it, e.g. 'laptop'.")
    )
    expires_at = forms.DateTimeField(
        label=_("Expires"),
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        help_text=_("Leave empty for a token that lasts until you revoke it."),
    )


class SshKeyForm(forms.Form):
    name = forms.CharField(
        label=_("Name"),
        max_length=100,
        required=False,
        help_text=_("Where the key lives, e.g. 'laptop'. Default: the key's comment."),
    )
    key = forms.CharField(
        label=_("Public key"),
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "ssh-ed25519 AAAA… you@laptop"}),
        help_text=_("The contents of ~/.ssh/id_ed25519.pub (never the private key)."),
    )


class RosterForm(forms.Form):
    file = forms.FileField(
        label=_("Roster file (CSV or Excel .xlsx)"),
        help_text=_("Columns: student_number, name, email, class, and optionally role."),
        widget=forms.ClearableFileInput(
            attrs={
                "accept": ".csv,.xlsx,text/csv,"
                "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
            }
        ),
    )


class PreferencesForm(forms.Form):
    display_name = forms.CharField(label=_("Display name"), max_length=150, required=False)
    language = forms.ChoiceField(label=_("Language"), required=False)
    time_zone = forms.CharField(
        label=_("Time zone"),
        max_length=64,
        required=False,
        help_text=_("An IANA name such as Asia/Shanghai; empty: the portal's default."),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from django.conf import settings

        super().__init__(*args, **kwargs)
        language = cast(forms.ChoiceField, self.fields["language"])  # declared above
        language.choices = [("", _("Browser default")), *settings.LANGUAGES]

    def clean_time_zone(self) -> str:
        import zoneinfo

        value: str = self.cleaned_data["time_zone"].strip()
        if value:
            try:
                zoneinfo.ZoneInfo(value)
            except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                raise forms.ValidationError(_("Unknown time zone %(tz)s") % {"tz": value}) from None
        return value
