"""The forms of the model and endpoint pages (``workloads.serving_views``)."""

from __future__ import annotations

import json
from typing import Any, cast

from django import forms
from django.utils.translation import gettext_lazy as _

from tenants.models import Tenant
from workloads.choices import Framework, Visibility
from workloads.models import Flavor, Workload
from workloads.serving import MAX_REPLICAS


class ModelForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=200)
    description = forms.CharField(
        label=_("Description"), required=False, max_length=5000, widget=forms.Textarea({"rows": 2})
    )
    visibility = forms.ChoiceField(
        label=_("Who may use it"), choices=Visibility.choices, initial=Visibility.PRIVATE
    )
    tenant = forms.ModelChoiceField(
        queryset=Tenant.objects.none(), required=False, label=_("Class or project")
    )

    def __init__(self, *args: Any, tenants: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        tenant = cast("forms.ModelChoiceField[Tenant]", self.fields["tenant"])
        tenant.queryset = tenants if tenants is not None else Tenant.objects.none()


class VersionForm(forms.Form):
    """A new version: a finished job's output folder, or an archive."""

    framework = forms.ChoiceField(label=_("Framework"), choices=Framework.choices)
    job = forms.ModelChoiceField(
        queryset=Workload.objects.none(), required=False, label=_("From the job")
    )
    path = forms.CharField(
        label=_("Its output folder"),
        required=False,
        max_length=500,
        help_text=_("Inside the job's home, e.g. out"),
    )
    file = forms.FileField(
        label=_("Or an archive"), required=False, help_text=_(".zip, .tar, .tar.gz or .tgz")
    )

    def __init__(self, *args: Any, jobs: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        job = cast("forms.ModelChoiceField[Workload]", self.fields["job"])
        job.queryset = jobs if jobs is not None else Workload.objects.none()

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if bool(data.get("file")) == bool(data.get("job")):
            raise forms.ValidationError(_("Choose a finished job or an archive (one of them)."))
        if data.get("job") and not data.get("path"):
            self.add_error("path", _("Name the job's output folder."))
        return data


class AliasForm(forms.Form):
    name = forms.SlugField(label=_("Alias"), max_length=40, initial="production")
    version = forms.IntegerField(label=_("Version"), min_value=1)


class DeployForm(forms.Form):
    name = forms.SlugField(label=_("Endpoint name"), max_length=64, help_text=_("/serve/<name>/"))
    flavor = forms.ModelChoiceField(queryset=Flavor.objects.none(), label=_("Size"))
    min_replicas = forms.IntegerField(
        label=_("Min replicas"), min_value=0, max_value=MAX_REPLICAS, initial=1
    )
    max_replicas = forms.IntegerField(
        label=_("Max replicas"), min_value=1, max_value=MAX_REPLICAS, initial=1
    )
    target_concurrency = forms.IntegerField(
        label=_("Requests in flight per replica"), min_value=1, max_value=1000, initial=4
    )
    target_gpu_utilisation = forms.IntegerField(
        label=_("GPU utilisation per replica (percent; 0: requests only)"),
        required=False,
        min_value=0,
        max_value=100,
        initial=0,
        help_text=_("Used where the host knows its GPUs' utilisation (NVML)."),
    )
    scale_to_zero_after_s = forms.IntegerField(
        label=_("Scale to zero after (seconds idle, with min 0)"), min_value=10, initial=300
    )
    rate_limit = forms.IntegerField(
        label=_("Rate limit (requests per second)"), min_value=1, max_value=100000, initial=50
    )
    schedule = forms.CharField(
        label=_("Schedule"),
        required=False,
        widget=forms.Textarea({"rows": 2}),
        help_text=_(
            'JSON, e.g. [{"days": [0,1,2,3,4], "start": "08:00", "end": "22:00", '
            '"min_replicas": 2}]'
        ),
    )

    def __init__(self, *args: Any, flavors: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        flavor = cast("forms.ModelChoiceField[Flavor]", self.fields["flavor"])
        flavor.queryset = flavors if flavors is not None else Flavor.objects.none()

    def clean_schedule(self) -> Any:
        text = (self.cleaned_data.get("schedule") or "").strip()
        if not text:
            return []
        try:
            return json.loads(text)
        except ValueError:
            raise forms.ValidationError(_("not JSON: a list of windows")) from None
