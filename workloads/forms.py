from __future__ import annotations

from typing import Any, cast

from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from tenants.models import Tenant
from workloads.choices import Visibility
from workloads.constants import check_env_limits
from workloads.models import Dataset, Flavor


def datasets_field() -> forms.ModelMultipleChoiceField[Dataset]:
    return forms.ModelMultipleChoiceField(
        queryset=Dataset.objects.none(),
        to_field_name="slug",
        required=False,
        label=_("Datasets"),
        help_text=_("Mounted read-only at /datasets/<name>."),
    )


def _offer_datasets(form: forms.Form, datasets: Any) -> None:
    field = cast("forms.ModelMultipleChoiceField[Dataset]", form.fields["datasets"])
    field.queryset = datasets if datasets is not None else Dataset.objects.none()


class LaunchForm(forms.Form):
    flavor = forms.ModelChoiceField(queryset=Flavor.objects.none(), label=_("Size"))
    datasets = datasets_field()

    def __init__(self, *args: Any, flavors: Any = None, datasets: Any = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        flavor = cast("forms.ModelChoiceField[Flavor]", self.fields["flavor"])  # declared above
        flavor.queryset = flavors if flavors is not None else Flavor.objects.none()
        _offer_datasets(self, datasets)


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
    datasets = datasets_field()
    env = forms.CharField(
        label=pgettext_lazy("job form: variables", "Environment"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "EPOCHS=10"}),
        help_text=_("One NAME=value a line."),
    )

    def __init__(
        self,
        *args: Any,
        tenants: Any = None,
        flavors: Any = None,
        datasets: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        tenant = cast("forms.ModelChoiceField[Tenant]", self.fields["tenant"])  # declared above
        flavor = cast("forms.ModelChoiceField[Flavor]", self.fields["flavor"])
        tenant.queryset = tenants if tenants is not None else Tenant.objects.none()
        flavor.queryset = flavors if flavors is not None else Flavor.objects.none()
        _offer_datasets(self, datasets)

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


class DatasetForm(forms.Form):
    """Upload an archive, or (admins) register a folder under DATASETS_DIR."""

    name = forms.CharField(label=_("Name"), max_length=200)
    description = forms.CharField(
        label=_("Description"), required=False, max_length=5000, widget=forms.Textarea({"rows": 3})
    )
    licence = forms.CharField(label=_("Licence or notes"), required=False, max_length=200)
    visibility = forms.ChoiceField(
        label=_("Who may use it"), choices=Visibility.choices, initial=Visibility.PRIVATE
    )
    tenant = forms.ModelChoiceField(
        queryset=Tenant.objects.none(),
        required=False,
        label=_("Class or project"),
        help_text=_("For “A class, project or department”: the one you teach or manage."),
    )
    file = forms.FileField(
        label=_("Archive"), required=False, help_text=_(".zip, .tar, .tar.gz or .tgz")
    )
    path = forms.CharField(
        label=_("Folder on the host"),
        required=False,
        max_length=500,
        help_text=_("Admins: a folder inside DATASETS_DIR, instead of an archive."),
    )

    def __init__(self, *args: Any, tenants: Any = None, folders: bool = False, **kwargs: Any):
        super().__init__(*args, **kwargs)
        tenant = cast("forms.ModelChoiceField[Tenant]", self.fields["tenant"])
        tenant.queryset = tenants if tenants is not None else Tenant.objects.none()
        if not folders:
            del self.fields["path"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not data.get("file") and not data.get("path"):
            self.add_error("file", _("Choose an archive to upload."))
        return data
