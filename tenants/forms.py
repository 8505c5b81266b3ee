from django import forms
from django.utils.translation import gettext_lazy as _


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


class RosterForm(forms.Form):
    file = forms.FileField(
        label=_("Roster CSV"),
        help_text=_("Columns: student_number, name, email, class, and optionally role."),
    )
