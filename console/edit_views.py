"""Console pages that change queues, priority classes and images: the forms check the input,
the same service functions as the API make the change (one transaction, an audit row each).
For superusers only, like the API's writes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from django.utils.functional import _StrOrPromise


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


@dataclass(frozen=True)
class FormPages:
    """The "new" and "edit" pages of one kind of thing, stated as what differs between
    kinds: the form, the two service functions and the words. ``create(actor=, **fields)``
    makes one; ``update(actor=, <target>=instance, **fields)`` changes one. Titles and
    messages take the thing's name as ``%(name)s``."""

    form: type[forms.ModelForm]
    create: Callable[..., Model]
    update: Callable[..., Model]
    target: str
    section: str
    back: str
    new_title: _StrOrPromise
    edit_title: _StrOrPromise
    created: _StrOrPromise
    saved: _StrOrPromise
    # Kinds that can be deleted: ``delete(actor=, <target>=instance)``, the URL names of the
    # delete and edit pages, the question asked first and the message after.
    delete: Callable[..., None] | None = None
    delete_route: str = ""
    edit_route: str = ""
    delete_question: _StrOrPromise = ""
    deleted: _StrOrPromise = ""

    def new(self, request: HttpRequest) -> HttpResponse:
        def create(fields: dict[str, Any]) -> Model:
            return self.create(actor=request.user, **fields)

        form = self.form(request.POST or None)
        return self._page(request, form, create, title=str(self.new_title), saved=self.created)

    def edit(self, request: HttpRequest, instance: Queue | PriorityClass | Image) -> HttpResponse:
        def update(fields: dict[str, Any]) -> Model:
            return self.update(actor=request.user, **{self.target: instance}, **fields)

        form = self.form(request.POST or None, instance=instance)
        title = self.edit_title % {"name": instance.name}
        extra = {}
        if self.delete is not None:
            extra = {
                "delete_url": reverse(self.delete_route, args=[instance.pk]),
                "delete_question": self.delete_question % {"name": instance.name},
            }
        return self._page(request, form, update, title=title, saved=self.saved, extra=extra)

    def remove(self, request: HttpRequest, instance: Queue | PriorityClass) -> HttpResponse:
        """Delete through the service; a refusal (still in use) goes back to the edit page
        with the service's sentence, a delete to the list."""
        assert self.delete is not None
        try:
            self.delete(actor=request.user, **{self.target: instance})
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
            return redirect(self.edit_route, instance.pk)
        messages.success(request, self.deleted % {"name": instance.name})
        return redirect(self.back)

    def _page(
        self,
        request: HttpRequest,
        form: forms.ModelForm,
        save: Callable[[dict[str, Any]], Model],
        *,
        title: str,
        saved: _StrOrPromise,
        extra: dict[str, str] | None = None,
    ) -> HttpResponse:
        """Show ``form``; on a valid POST hand the fields (all on create, the changed ones on
        edit) to ``save`` (the service call), its ValidationError becoming form errors."""
        if request.method == "POST" and form.is_valid():
            names = form.changed_data if form.instance.pk else list(form.cleaned_data)
            try:
                instance = save({name: form.cleaned_data[name] for name in names})
            except ValidationError as exc:
                for field, errors in exc.message_dict.items():
                    form.add_error(field if field in form.fields else None, errors)
            else:
                messages.success(request, saved % {"name": str(instance)})
                return redirect(self.back)
        context = {"form": form, "title": title, "back": self.back, **(extra or {})}
        return render(
            request, "console/edit_form.html", {**console_context(request, self.section), **context}
        )


# --- Queues and priority classes ---------------------------------------------------------------

QUEUES = FormPages(
    form=QueueForm,
    create=scheduling_services.create_queue,
    update=scheduling_services.update_queue,
    target="queue",
    section="queues",
    back="console-queues",
    new_title=gettext_lazy("New queue"),
    edit_title=gettext_lazy("Queue %(name)s"),
    created=gettext_lazy("Queue %(name)s created."),
    saved=gettext_lazy("Queue %(name)s saved."),
    delete=scheduling_services.delete_queue,
    delete_route="console-queue-delete",
    edit_route="console-queue-edit",
    delete_question=gettext_lazy(
        "Delete the queue %(name)s? New work of its tenants then goes to the queue of "
        "a tenant above them, or to the default queue."
    ),
    deleted=gettext_lazy("Queue %(name)s deleted."),
)
PRIORITY_CLASSES = FormPages(
    form=PriorityClassForm,
    create=scheduling_services.create_priority_class,
    update=scheduling_services.update_priority_class,
    target="priority_class",
    section="queues",
    back="console-queues",
    new_title=gettext_lazy("New priority class"),
    edit_title=gettext_lazy("Priority class %(name)s"),
    created=gettext_lazy("Priority class %(name)s created."),
    saved=gettext_lazy("Priority class %(name)s saved."),
    delete=scheduling_services.delete_priority_class,
    delete_route="console-priority-delete",
    edit_route="console-priority-edit",
    delete_question=gettext_lazy("Delete the priority class %(name)s?"),
    deleted=gettext_lazy("Priority class %(name)s deleted."),
)


@superuser_required
def queue_new(request: HttpRequest) -> HttpResponse:
    return QUEUES.new(request)


@superuser_required
def queue_edit(request: HttpRequest, pk: int) -> HttpResponse:
    return QUEUES.edit(request, get_object_or_404(Queue, pk=pk))


@superuser_required
@require_POST
def queue_delete(request: HttpRequest, pk: int) -> HttpResponse:
    return QUEUES.remove(request, get_object_or_404(Queue, pk=pk))


@superuser_required
def priority_class_new(request: HttpRequest) -> HttpResponse:
    return PRIORITY_CLASSES.new(request)


@superuser_required
def priority_class_edit(request: HttpRequest, pk: int) -> HttpResponse:
    return PRIORITY_CLASSES.edit(request, get_object_or_404(PriorityClass, pk=pk))


@superuser_required
@require_POST
def priority_class_delete(request: HttpRequest, pk: int) -> HttpResponse:
    return PRIORITY_CLASSES.remove(request, get_object_or_404(PriorityClass, pk=pk))


# --- Images ------------------------------------------------------------------------------------

IMAGES = FormPages(
    form=ImageForm,
    create=catalog.create_image,
    update=catalog.update_image,
    target="image",
    section="catalog",
    back="console-catalog",
    new_title=gettext_lazy("New image"),
    edit_title=gettext_lazy("Image %(name)s"),
    created=gettext_lazy("Image %(name)s added."),
    saved=gettext_lazy("Image %(name)s saved."),
)


@superuser_required
def image_new(request: HttpRequest) -> HttpResponse:
    return IMAGES.new(request)


@superuser_required
def image_edit(request: HttpRequest, slug: str) -> HttpResponse:
    return IMAGES.edit(request, get_object_or_404(Image, slug=slug))


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
