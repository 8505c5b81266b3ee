"""Dataset pages: the list of datasets one may use (with the upload form) and a dataset's
page (what it holds, where it is mounted now, its sharing for the owner)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from tenants.http import AuthenticatedHttpRequest
from tenants.models import Tenant
from tenants.permissions import Access
from workloads import datasets as service
from workloads.choices import ACTIVE
from workloads.forms import DatasetForm
from workloads.models import Dataset
from workloads.permissions import visible_workloads


def _form(request: AuthenticatedHttpRequest, data: object = None) -> DatasetForm:
    access = Access.of(request.user)
    return DatasetForm(
        data,
        request.FILES or None,
        tenants=Tenant.objects.filter(access.managed_tenants()),
        folders=access.administers_anything(),
    )


@login_required
def dataset_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = _form(request, request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data)
        upload, path = data.pop("file", None), data.pop("path", None)
        try:
            if upload is not None:
                dataset = service.upload_archive(
                    actor=request.user, archive=upload, filename=upload.name, **data
                )
            else:
                dataset = service.register_folder(actor=request.user, path=path, **data)
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        except PermissionDenied as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, _("Dataset %(name)s is ready.") % {"name": dataset.name})
            return redirect("dataset", slug=dataset.slug)
    rows = service.visible_to(request.user)
    return render(request, "workloads/datasets.html", {"datasets": rows, "form": form})


def _visible(request: AuthenticatedHttpRequest, slug: str) -> Dataset:
    dataset = service.visible_to(request.user).filter(slug=slug).first()
    if dataset is None:
        raise Http404
    return dataset


@login_required
def dataset_detail(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    dataset = _visible(request, slug)
    mounted = (
        dataset.workloads.filter(visible_workloads(request.user), state__in=ACTIVE)
        .select_related("owner")
        .order_by("-created_at")[:50]
    )
    return render(
        request,
        "workloads/dataset.html",
        {
            "dataset": dataset,
            "mounted": mounted,
            "can_change": service.can_change(request.user, dataset),
        },
    )


@login_required
@require_POST
def dataset_delete(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    dataset = _visible(request, slug)
    try:
        service.delete(actor=request.user, dataset=dataset)
    except PermissionDenied:
        raise Http404 from None
    except ValidationError as exc:
        for errors in exc.message_dict.values():
            for error in errors:
                messages.error(request, error)
        return redirect("dataset", slug=slug)
    messages.success(request, _("Dataset %(name)s deleted.") % {"name": dataset.name})
    return redirect("datasets")
