"""Model and endpoint pages: the models one may use (create one), a model's page (versions,
aliases, new version from a job or an archive, deploy), the endpoints one may see and an
endpoint's page (live replicas, rate, latency and errors; a "try it" form; keys; stop).
What one may not see is a 404."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.forms import Form
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from tenants.http import AuthenticatedHttpRequest
from tenants.models import Tenant
from tenants.permissions import Access
from workloads import gateway, model_registry
from workloads import serving as service
from workloads.choices import State, WorkloadKind
from workloads.models import Flavor, MlModel, ServingEndpoint, Workload
from workloads.permissions import visible_workloads
from workloads.services import stop
from workloads.serving_forms import AliasForm, DeployForm, ModelForm, VersionForm


def _errors(form: Form, error: ValidationError | PermissionDenied) -> None:
    if isinstance(error, PermissionDenied):
        form.add_error(None, str(error))
        return
    for field, messages_ in error.message_dict.items():
        form.add_error(field if field in form.fields else None, messages_)


@login_required
def model_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    tenants = Tenant.objects.filter(Access.of(request.user).managed_tenants())
    form = ModelForm(request.POST or None, tenants=tenants)
    if request.method == "POST" and form.is_valid():
        try:
            model = model_registry.create_model(actor=request.user, **form.cleaned_data)
        except (ValidationError, PermissionDenied) as error:
            _errors(form, error)
        else:
            return redirect("model", slug=model.slug)
    models = model_registry.visible_to(request.user).prefetch_related("versions", "aliases")
    return render(request, "workloads/models.html", {"models": models, "form": form})


def _model(request: AuthenticatedHttpRequest, slug: str) -> MlModel:
    model = model_registry.visible_to(request.user).filter(slug=slug).first()
    if model is None:
        raise Http404
    return model


def _deploy_flavors(user: Any) -> Any:
    return Flavor.objects.filter(grants__in=service.serving_grants(user), is_active=True).distinct()


@login_required
def model_detail(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    model = _model(request, slug)
    can_change = model_registry.can_change(request.user, model)
    jobs = Workload.objects.filter(
        visible_workloads(request.user), kind=WorkloadKind.JOB, state=State.SUCCEEDED
    ).order_by("-created_at")[:50]
    post = request.POST if request.method == "POST" else None
    which = request.POST.get("form") if post else None
    version_form = VersionForm(
        post if which == "version" else None,
        request.FILES if which == "version" else None,
        jobs=Workload.objects.filter(pk__in=[j.pk for j in jobs]),
    )
    alias_form = AliasForm(post if which == "alias" else None)
    deploy_form = DeployForm(
        post if which == "deploy" else None,
        flavors=_deploy_flavors(request.user),
        initial={"name": model.slug},
    )
    status = 200
    if which == "version" and can_change and version_form.is_valid():
        data = version_form.cleaned_data
        try:
            if data.get("file"):
                version = model_registry.register_upload(
                    actor=request.user, model=model, archive=data["file"],
                    filename=data["file"].name, framework=data["framework"],
                )  # fmt: skip
            else:
                version = model_registry.register_from_job(
                    actor=request.user, model=model, job=data["job"], path=data["path"],
                    framework=data["framework"],
                )  # fmt: skip
        except (ValidationError, PermissionDenied) as error:
            _errors(version_form, error)
        else:
            messages.success(request, _("Version %(n)s registered.") % {"n": version.number})
            return redirect("model", slug=model.slug)
    elif which == "alias" and can_change and alias_form.is_valid():
        moved = model.versions.filter(number=alias_form.cleaned_data["version"]).first()
        if moved is None:
            alias_form.add_error("version", _("no such version of this model"))
        else:
            model_registry.set_alias(
                actor=request.user, model=model, name=alias_form.cleaned_data["name"],
                version=moved,
            )  # fmt: skip
            return redirect("model", slug=model.slug)
    elif which == "deploy" and deploy_form.is_valid():
        data = dict(deploy_form.cleaned_data)
        try:
            version = model_registry.resolve(model, request.POST.get("version"))
            name = data.pop("name")
            endpoint = service.deploy(
                actor=request.user, version=version, name=name, slug=name, **data
            )
        except (ValidationError, PermissionDenied) as error:
            _errors(deploy_form, error)
        else:
            return redirect("endpoint", slug=endpoint.slug)
    if post and any(f.errors for f in (version_form, alias_form, deploy_form)):
        status = 400
    return render(
        request,
        "workloads/model.html",
        {
            "model": model,
            "versions": model.versions.select_related("source_job", "dataset", "created_by"),
            "aliases": model.aliases.select_related("version"),
            "can_change": can_change,
            "version_form": version_form,
            "alias_form": alias_form,
            "deploy_form": deploy_form,
        },
        status=status,
    )


@login_required
def endpoint_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    endpoints = service.visible_to(request.user).order_by("-created_at")
    return render(request, "workloads/endpoints.html", {"endpoints": endpoints})


def _endpoint(request: AuthenticatedHttpRequest, slug: str) -> ServingEndpoint:
    endpoint = service.visible_to(request.user).filter(slug=slug).first()
    if endpoint is None:
        raise Http404
    return endpoint


@login_required
def endpoint_detail(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    endpoint = _endpoint(request, slug)
    new_key = None
    if request.method == "POST":
        if not service.can_change(request.user, endpoint):
            raise Http404
        if request.POST.get("action") == "key":
            _key, new_key = service.create_key(
                actor=request.user, endpoint=endpoint, name=request.POST.get("name", "")
            )
        elif request.POST.get("action") == "revoke":
            key_id = request.POST.get("key", "")
            key = endpoint.keys.filter(pk=int(key_id)).first() if key_id.isdigit() else None
            if key is not None:
                service.revoke_key(actor=request.user, key=key)
    return render(
        request,
        "workloads/endpoint.html",
        {
            "endpoint": endpoint,
            "stats": gateway.live_stats(endpoint),
            "keys": endpoint.keys.all(),
            "new_key": new_key,
            "can_change": service.can_change(request.user, endpoint),
            "example": '{"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP64", '
            '"data": [1.0]}]}',
        },
    )


@login_required
def endpoint_stats(request: AuthenticatedHttpRequest, slug: str) -> JsonResponse:
    return JsonResponse(gateway.live_stats(_endpoint(request, slug)))


@login_required
@require_POST
def endpoint_stop(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    endpoint = _endpoint(request, slug)
    if not service.can_change(request.user, endpoint):
        raise Http404
    if endpoint.workload is not None and endpoint.workload.is_active:
        stop(actor=request.user, workload=endpoint.workload)
    return redirect("endpoint", slug=slug)
