"""The forms of the teachers' pages: a member to add, a grant and its weekly windows.

They parse what was typed; the rules of a grant are ``workloads.grants``', the same as the
API's, and their errors come back onto these forms.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

from django import forms
from django.http import QueryDict
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from tenants.choices import Role
from workloads.models import AppTemplate, Flavor, Grant

DAYS = (
    gettext_lazy("Monday"),
    gettext_lazy("Tuesday"),
    gettext_lazy("Wednesday"),
    gettext_lazy("Thursday"),
    gettext_lazy("Friday"),
    gettext_lazy("Saturday"),
    gettext_lazy("Sunday"),
)


class MemberForm(forms.Form):
    username = forms.CharField(
        label=gettext_lazy("Username"),
        max_length=150,
        help_text=gettext_lazy("Imported students sign in with their student number."),
    )
    role = forms.ChoiceField(label=gettext_lazy("Role"), choices=Role.choices)


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
    """The grant's fields; ``workloads.grants`` checks them before anything is saved."""

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
    gpu_idle_percent = forms.IntegerField(
        label=gettext_lazy("Stop when the GPU is busy less than (%)"),
        min_value=0,
        max_value=100,
        required=False,
        help_text=gettext_lazy(
            "Sessions holding a GPU this little used are warned, then stopped. Empty: the "
            "template's rule (jobs: never); 0: never."
        ),
    )
    gpu_idle_minutes = forms.IntegerField(
        label=gettext_lazy("… for (minutes)"),
        min_value=1,
        required=False,
        help_text=gettext_lazy("Empty: the template's."),
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
        grantable = AppTemplate.objects.grantable(keeping=grant)
        templates = list(grantable.prefetch_related("allowed_flavors"))
        cast("forms.ModelChoiceField[AppTemplate]", self.fields["template"]).queryset = grantable
        self.fields["template"].widget.choices = [(t.slug, t.name) for t in templates]
        chosen_slug = self.data.get("template") if self.is_bound else self.initial.get("template")
        chosen = next(
            (t for t in templates if t.slug == chosen_slug), templates[0] if templates else None
        )
        self.chosen_template = chosen
        # Only the chosen template's sizes are offered; a size ticked outside them stays on
        # the page so the error about it can be seen and undone.
        allowed = list(chosen.allowed_flavors.all()) if chosen else []
        ticked = set(
            cast(QueryDict, self.data).getlist("flavors")  # bound: the request's POST
            if self.is_bound
            else self.initial.get("flavors", [])
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


def typed(data: Any) -> dict[str, Any]:
    """The grant form's fields as typed, to draw the form again without judging them."""
    return {
        name: data.getlist(name) if name == "flavors" else data.get(name)
        for name in GrantForm.base_fields
        if name in data
    }


def typed_rows(data: Any) -> list[dict[str, str]]:
    """The window rows as typed, the empty ones left out."""
    try:
        count = min(int(data.get("windows-TOTAL_FORMS", 0)), WindowFormSet.absolute_max)
    except ValueError:
        count = 0
    rows = [
        {k: data.get(f"windows-{i}-{k}", "") for k in ("day", "start", "end")} for i in range(count)
    ]
    return [row for row in rows if any(row.values())]
