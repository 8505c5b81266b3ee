"""Every change to the catalog (images, flavors, app templates) goes through here.

Each function runs in one transaction, takes the acting user as ``actor`` and writes an audit
row (``image.create``, ``flavor.update``, ``apptemplate.delete`` …) in it. Errors a person can
fix raise Django's ``ValidationError`` naming the field. Only superusers change the catalog;
the API checks that before it calls here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.utils.translation import gettext as _

from core.audit import record
from workloads.choices import AppKind
from workloads.models import AppTemplate, Flavor, Image

M = TypeVar("M", bound=models.Model)


def _create(model: type[M], *, actor: Any, m2m: tuple[str, ...] = (), **fields: Any) -> M:
    related = {name: fields.pop(name) for name in m2m if name in fields}
    instance = model._default_manager.create(**fields)
    for name, values in related.items():
        getattr(instance, name).set(values)
    record(f"{instance._meta.model_name}.create", actor=actor, target=instance)
    return instance


def _update(instance: M, *, actor: Any, m2m: tuple[str, ...] = (), **changes: Any) -> M:
    for name, value in changes.items():
        if name not in m2m:
            setattr(instance, name, value)
    instance.save()
    for name in m2m:
        if name in changes:
            getattr(instance, name).set(changes[name])
    record(f"{instance._meta.model_name}.update", actor=actor, target=instance)
    return instance


def _delete(instance: models.Model, *, actor: Any) -> None:
    record(f"{instance._meta.model_name}.delete", actor=actor, target=instance)
    instance.delete()


# --- Images ------------------------------------------------------------------------------------


@transaction.atomic
def create_image(*, actor: Any, **fields: Any) -> Image:
    return _create(Image, actor=actor, **fields)


@transaction.atomic
def update_image(*, actor: Any, image: Image, **changes: Any) -> Image:
    return _update(image, actor=actor, **changes)


@transaction.atomic
def delete_image(*, actor: Any, image: Image) -> None:
    _delete(image, actor=actor)


# --- Flavors -----------------------------------------------------------------------------------


def _check_flavor(flavor: Flavor | None, fields: dict[str, Any]) -> None:
    gpus = fields.get("gpus", getattr(flavor, "gpus", 0))
    milli = fields.get("gpu_milli", getattr(flavor, "gpu_milli", 0))
    if gpus and milli:
        raise ValidationError(
            {"gpu_milli": _("a flavor has whole GPUs or a share of one, not both")}
        )
    gpu_models = fields.get("gpu_models", [])
    if not isinstance(gpu_models, list) or not all(isinstance(m, str) and m for m in gpu_models):
        raise ValidationError({"gpu_models": _("a list of GPU model names")})


@transaction.atomic
def create_flavor(*, actor: Any, **fields: Any) -> Flavor:
    _check_flavor(None, fields)
    return _create(Flavor, actor=actor, **fields)


@transaction.atomic
def update_flavor(*, actor: Any, flavor: Flavor, **changes: Any) -> Flavor:
    _check_flavor(flavor, changes)
    return _update(flavor, actor=actor, **changes)


@transaction.atomic
def delete_flavor(*, actor: Any, flavor: Flavor) -> None:
    _delete(flavor, actor=actor)


# --- App templates -----------------------------------------------------------------------------


def _check_template(
    template: AppTemplate | None,
    default_flavor: Flavor | None,
    allowed_flavors: Iterable[Flavor] | None,
    fields: dict[str, Any] | None = None,
) -> None:
    fields = fields or {}
    kind = fields.get("kind", getattr(template, "kind", ""))
    program = fields.get("program", getattr(template, "program", ""))
    if kind == AppKind.DESKTOP and not program:
        raise ValidationError({"program": _("a desktop needs a program to start, e.g. xterm")})
    image = fields.get("image")
    if image is not None and not image.is_active and image != getattr(template, "image", None):
        # A retired image stays on the templates that have it; no template takes it up anew.
        raise ValidationError({"image": _("%(image)s is retired") % {"image": image.name}})
    default = default_flavor or getattr(template, "default_flavor", None)
    if allowed_flavors is not None and default is not None and default not in allowed_flavors:
        raise ValidationError({"default_flavor": _("must be one of the allowed flavors")})


@transaction.atomic
def create_template(*, actor: Any, **fields: Any) -> AppTemplate:
    _check_template(None, fields.get("default_flavor"), fields.get("allowed_flavors"), fields)
    return _create(AppTemplate, actor=actor, m2m=("allowed_flavors",), **fields)


@transaction.atomic
def update_template(*, actor: Any, template: AppTemplate, **changes: Any) -> AppTemplate:
    _check_template(
        template, changes.get("default_flavor"), changes.get("allowed_flavors"), changes
    )
    return _update(template, actor=actor, m2m=("allowed_flavors",), **changes)


@transaction.atomic
def delete_template(*, actor: Any, template: AppTemplate) -> None:
    _delete(template, actor=actor)
