"""The what-if page for admins: upload a trace, pick an inventory and policies, compare."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.files.uploadedfile import UploadedFile
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from core.guards import console_context
from scheduling import whatif
from scheduling.core.policies import POLICIES
from scheduling.models import Cluster, WhatIfRun

# A run's status as the pages show it ({% translate run.status context "what-if run" %}).
RUN_STATUSES = (
    pgettext_lazy("what-if run", "pending"),
    pgettext_lazy("what-if run", "running"),
    pgettext_lazy("what-if run", "done"),
    pgettext_lazy("what-if run", "failed"),
)


class WhatIfForm(forms.Form):
    cluster = forms.ModelChoiceField(
        queryset=Cluster.objects.all(), required=False, label=_("Inventory: a cluster's nodes")
    )
    nodes = forms.FileField(required=False, label=_("… or an openb node list (CSV)"))
    pods = forms.FileField(required=False, label=_("Workload trace (openb pod list, CSV)"))
    sample = forms.BooleanField(
        required=False,
        initial=True,
        label=_("Use the sample trace shipped with Quanta"),
        help_text=_(
            "60 nodes and 800 pods drawn from openb's default trace: its pods when no trace is "
            "uploaded, its nodes when no cluster or node list is chosen."
        ),
    )
    policies = forms.MultipleChoiceField(
        choices=[(p, p) for p in POLICIES],
        initial=["random", "bestfit", "fgd", "fgd-mix"],
        widget=forms.CheckboxSelectMultiple,
        label=_("Policies"),
    )
    seeds = forms.IntegerField(min_value=1, max_value=whatif.MAX_SEEDS, initial=3, label=_("Seeds"))

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not data.get("pods") and not data.get("sample"):
            self.add_error("pods", _("Upload a trace or use the sample."))
        return data


def _text(upload: UploadedFile | None) -> str:
    if upload is None:
        return ""
    try:
        return upload.read().decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ValidationError({"pods": _("the file is not UTF-8 text")}) from None


def page(request: HttpRequest) -> HttpResponse:
    if not (request.user.is_authenticated and request.user.is_superuser):
        raise PermissionDenied
    form = WhatIfForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            nodes_csv, pods_csv = _text(data["nodes"]), _text(data["pods"])
            trace_name = data["pods"].name if data["pods"] else whatif.SAMPLE_NAME
            if data["sample"]:
                sample_nodes, sample_pods = whatif.sample_trace()
                pods_csv = pods_csv or sample_pods
                if data["cluster"] is None and not nodes_csv:
                    nodes_csv = sample_nodes
            run = whatif.create(
                actor=request.user,
                cluster=data["cluster"],
                nodes_csv=nodes_csv,
                pods_csv=pods_csv,
                trace_name=trace_name,
                policies=data["policies"],
                seeds=data["seeds"],
            )
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                name = {"pods_csv": "pods", "nodes_csv": "nodes"}.get(field, field)
                form.add_error(name if name in form.fields else None, errors)
        else:
            return redirect("whatif-run", pk=run.pk)
    runs = WhatIfRun.objects.select_related("cluster").defer("pods_csv", "nodes_csv")[:20]
    return render(
        request,
        "scheduling/whatif.html",
        {**console_context(request, "whatif"), "form": form, "runs": runs},
    )


def detail(request: HttpRequest, pk: int) -> HttpResponse:
    if not (request.user.is_authenticated and request.user.is_superuser):
        raise PermissionDenied
    run = get_object_or_404(WhatIfRun.objects.defer("pods_csv", "nodes_csv"), pk=pk)
    return render(
        request,
        "scheduling/whatif_run.html",
        {
            **console_context(request, "whatif"),
            "run": run,
            "summary": (run.result or {}).get("summary", {}),
            "curve": (run.result or {}).get("curve", []),
        },
    )
