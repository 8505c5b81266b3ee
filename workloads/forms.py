from __future__ import annotations

from typing import Any, cast

from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from tenants.models import Tenant
from workloads.constants import check_env_limits
from workloads.models import Flavor


class LaunchForm(forms.Form):
    flavor = forms.ModelChoiceField(queryset=Flavor.objects.none(), label=_("Size"))

    def __init__(self, *args: Any, flavors: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        flavor = cast("forms.ModelChoiceField[Flavor]", self.fields["flavor"])  # declared above
        flavor.queryset = flavors if flavors is not None else Flavor.objects.none()


class JobForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=100, required=False)
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), label=_("Class or project"))
    flavor = forms.ModelChoiceField(queryset=Flavor.objects.none(), label=_("Size per worker"))
    command = forms.CharField(
        label=_("Command"),
        widget=forms.TextInput(attrs={"placeholder": "python train.py"}),
        help_text=_("Run in your home directory on every worker."),
    )
    workers = forms.IntegerField(
        label=_("Workers"),
        min_value=1,
        initial=1,
        help_text=_(
            "More than 1: a distributed job; all start together, with RANK and WORLD_SIZE set."
        ),
    )
    max_retries = forms.IntegerField(label=_("Retries"), min_value=0, max_value=10, initial=0)
    env = forms.CharField(
        label=pgettext_lazy("job form: variables", "Environment"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "EPOCHS=10"}),
        help_text=_("One NAME=value a line."),
    )

    def __init__(self, *args: Any, tenants: Any = None, flavors: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        tenant = cast("forms.ModelChoiceField[Tenant]", self.fields["tenant"])  # declared above
        flavor = cast("forms.ModelChoiceField[Flavor]", self.fields["flavor"])
        tenant.queryset = tenants if tenants is not None else Tenant.objects.none()
        flavor.queryset = flavors if flavors is not None else Flavor.objects.none()

    def clean_env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for number, line in enumerate(self.cleaned_data["env"].splitlines(), start=1):
            if not line.strip():
                continue
            name, sep, value = line.partition("=")
            if not sep:
                raise forms.ValidationError(_("line %(n)s: write NAME=value") % {"n": number})
            env[name.strip()] = value.strip()
        try:
            check_env_limits(env)
        except ValidationError as exc:
            raise forms.ValidationError(exc.message_dict["env"]) from None
        return env
