"""Console pages that change queues, priority classes and images: the forms check the input,
the same service functions as the API make the change (one transaction, an audit row each).
For superusers only, like the API's writes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import Model
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from core.guards import console_context, superuser_required
from scheduling import services as scheduling_services
from scheduling.models import PriorityClass, Queue
from workloads import catalog
from workloads.models import Image


class QueueForm(forms.ModelForm):
    capability = forms.JSONField(
        required=False,
        initial=dict,
        label=gettext_lazy("Capability"),
        help_text=gettext_lazy('Hard caps, e.g. {"gpus": 8, "cpu_milli": 64000}; {} for none.'),
    )

    class Meta:
        model = Queue
        fields = ["cluster", "name", "parent", "tenants", "weight", "capability"]
        fields += ["reclaimable", "is_open"]
        labels = {
            "cluster": gettext_lazy("Cluster"),
            "name": gettext_lazy("Name"),
            "parent": gettext_lazy("Parent queue"),
            "tenants": gettext_lazy("Tenants"),
            "weight": gettext_lazy("Weight"),
            "reclaimable": gettext_lazy("Reclaimable"),
            "is_open": gettext_lazy("Open"),
        }
        help_texts = {
            "tenants": gettext_lazy("Workloads of these tenants (and below) go here."),
            "weight": gettext_lazy("Its share among the open queues beside it."),
            "reclaimable": gettext_lazy("Others may take back what it borrowed above its share."),
        }

    def clean_capability(self) -> dict[str, Any]:
        return self.cleaned_data["capability"] or {}


class PriorityClassForm(forms.ModelForm):
    class Meta:
        model = PriorityClass
        fields = ["name", "value", "preempting", "description"]
        labels = {
            "name": gettext_lazy("Name"),
            "value": gettext_lazy("Value"),
            "preempting": gettext_lazy("Preempts"),
            "description": gettext_lazy("Description"),
        }
        help_texts = {
            "value": gettext_lazy("Higher values are scheduled first."),
            "preempting": gettext_lazy("May evict lower-priority work in its queue."),
        }


class ToolsField(forms.Field):
    """A list of tool names, typed as "jupyterlab, tensorboard"."""

    widget = forms.TextInput

    def prepare_value(self, value: Any) -> Any:
        return ", ".join(value) if isinstance(value, list) else value

    def to_python(self, value: Any) -> list[str]:
        text = str(value or "")
        if len(text) > 2000:
            raise ValidationError(_("at most 2000 characters"))
        return [t.strip() for t in text.split(",") if t.strip()]


class ImageForm(forms.ModelForm):
    tools = ToolsField(
        required=False,
        label=gettext_lazy("Tools"),
        help_text=gettext_lazy("Separated by commas, e.g. jupyterlab, tensorboard, terminal."),
    )

    class Meta:
        model = Image
        fields = ["name", "slug", "framework", "framework_version", "tools", "registry_ref"]
        fields += ["description"]
        labels = {
            "name": gettext_lazy("Name"),
            "slug": gettext_lazy("Short name"),
            "framework": gettext_lazy("Framework"),
            "framework_version": gettext_lazy("Framework version"),
            "registry_ref": gettext_lazy("Image reference"),
            "description": gettext_lazy("Description"),
        }
        help_texts = {"registry_ref": gettext_lazy("The image reference used on Kubernetes.")}

    def clean_tools(self) -> list[str]:
        tools: list[str] = self.cleaned_data["tools"]
        if len(tools) > 64 or any(len(t) > 64 for t in tools):
            raise ValidationError(_("at most 64 tools of 64 characters each"))
        return tools


def _form_page(
    request: HttpRequest,
    form: forms.ModelForm,
    *,
    save: Callable[[dict[str, Any]], Model],
    title: str,
    section: str,
    back: str,
    saved: str,
    delete_url: str = "",
    delete_question: str = "",
) -> HttpResponse:
    """Show ``form``; on a valid POST hand the fields (all on create, the changed ones on
    edit) to ``save`` (a service call), its ValidationError becoming form errors. With
    ``delete_url`` the page has a Delete button that asks ``delete_question`` first."""
    if request.method == "POST" and form.is_valid():
        names = form.changed_data if form.instance.pk else list(form.cleaned_data)
        try:
            instance = save({name: form.cleaned_data[name] for name in names})
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            messages.success(request, saved % {"name": str(instance)})
            return redirect(back)
    return render(
        request,
        "console/edit_form.html",
        {
            **console_context(request, section),
            "form": form,
            "title": title,
            "back": back,
            "delete_url": delete_url,
            "delete_question": delete_question,
        },
    )


def _delete(
    request: HttpRequest, delete: Callable[[], None], *, edit: str, deleted: str
) -> HttpResponse:
    """Call ``delete`` (a service call); a refusal (still in use) goes back to the edit page
    with the service's sentence, a delete to the queues page."""
    try:
        delete()
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect(edit)
    messages.success(request, deleted)
    return redirect("console-queues")


# --- Queues and priority classes ---------------------------------------------------------------


@superuser_required
def queue_new(request: HttpRequest) -> HttpResponse:
    def save(fields: dict[str, Any]) -> Model:
        return scheduling_services.create_queue(actor=request.user, **fields)

    return _form_page(
        request,
        QueueForm(request.POST or None),
        save=save,
        title=_("New queue"),
        section="queues",
        back="console-queues",
        saved=_("Queue %(name)s created."),
    )


@superuser_required
def queue_edit(request: HttpRequest, pk: int) -> HttpResponse:
    queue = get_object_or_404(Queue, pk=pk)

    def save(fields: dict[str, Any]) -> Model:
        return scheduling_services.update_queue(actor=request.user, queue=queue, **fields)

    return _form_page(
        request,
        QueueForm(request.POST or None, instance=queue),
        save=save,
        title=_("Queue %(name)s") % {"name": queue.name},
        section="queues",
        back="console-queues",
        saved=_("Queue %(name)s saved."),
        delete_url=reverse("console-queue-delete", args=[queue.pk]),
        delete_question=_(
            "Delete the queue %(name)s? New work of its tenants then goes to the queue of "
            "a tenant above them, or to the default queue."
        )
        % {"name": queue.name},
    )


@superuser_required
@require_POST
def queue_delete(request: HttpRequest, pk: int) -> HttpResponse:
    queue = get_object_or_404(Queue, pk=pk)
    return _delete(
        request,
        lambda: scheduling_services.delete_queue(actor=request.user, queue=queue),
        edit=reverse("console-queue-edit", args=[queue.pk]),
        deleted=_("Queue %(name)s deleted.") % {"name": queue.name},
    )


@superuser_required
def priority_class_new(request: HttpRequest) -> HttpResponse:
    def save(fields: dict[str, Any]) -> Model:
        return scheduling_services.create_priority_class(actor=request.user, **fields)

    return _form_page(
        request,
        PriorityClassForm(request.POST or None),
        save=save,
        title=_("New priority class"),
        section="queues",
        back="console-queues",
        saved=_("Priority class %(name)s created."),
    )


@superuser_required
def priority_class_edit(request: HttpRequest, pk: int) -> HttpResponse:
    priority_class = get_object_or_404(PriorityClass, pk=pk)

    def save(fields: dict[str, Any]) -> Model:
        return scheduling_services.update_priority_class(
            actor=request.user, priority_class=priority_class, **fields
        )

    return _form_page(
        request,
        PriorityClassForm(request.POST or None, instance=priority_class),
        save=save,
        title=_("Priority class %(name)s") % {"name": priority_class.name},
        section="queues",
        back="console-queues",
        saved=_("Priority class %(name)s saved."),
        delete_url=reverse("console-priority-delete", args=[priority_class.pk]),
        delete_question=_("Delete the priority class %(name)s?") % {"name": priority_class.name},
    )


@superuser_required
@require_POST
def priority_class_delete(request: HttpRequest, pk: int) -> HttpResponse:
    priority_class = get_object_or_404(PriorityClass, pk=pk)
    return _delete(
        request,
        lambda: scheduling_services.delete_priority_class(
            actor=request.user, priority_class=priority_class
        ),
        edit=reverse("console-priority-edit", args=[priority_class.pk]),
        deleted=_("Priority class %(name)s deleted.") % {"name": priority_class.name},
    )


# --- Images ------------------------------------------------------------------------------------


@superuser_required
def image_new(request: HttpRequest) -> HttpResponse:
    def save(fields: dict[str, Any]) -> Model:
        return catalog.create_image(actor=request.user, **fields)

    return _form_page(
        request,
        ImageForm(request.POST or None),
        save=save,
        title=_("New image"),
        section="catalog",
        back="console-catalog",
        saved=_("Image %(name)s added."),
    )


@superuser_required
def image_edit(request: HttpRequest, slug: str) -> HttpResponse:
    image = get_object_or_404(Image, slug=slug)

    def save(fields: dict[str, Any]) -> Model:
        return catalog.update_image(actor=request.user, image=image, **fields)

    return _form_page(
        request,
        ImageForm(request.POST or None, instance=image),
        save=save,
        title=_("Image %(name)s") % {"name": image.name},
        section="catalog",
        back="console-catalog",
        saved=_("Image %(name)s saved."),
    )


@superuser_required
@require_POST
def image_retire(request: HttpRequest, slug: str) -> HttpResponse:
    """Retire an image (templates that have it keep it, no other template may take it up;
    ``workloads.catalog``) or, with ``restore``, bring it back."""
    image = get_object_or_404(Image, slug=slug)
    restore = request.POST.get("restore") == "1"
    catalog.update_image(actor=request.user, image=image, is_active=restore)
    if restore:
        messages.success(request, _("Image %(name)s is in use again.") % {"name": image.name})
    else:
        messages.success(
            request,
            _(
                "Image %(name)s is retired: the templates that have it keep it, no other "
                "may take it up."
            )
            % {"name": image.name},
        )
    return redirect("console-catalog")
