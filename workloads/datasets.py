"""Datasets: register a folder or unpack an uploaded archive, decide who may see and mount
each, and choose the ones a workload mounts.

A dataset is a folder under ``settings.DATASETS_DIR``. An admin registers one that is
already there (``register_folder``: the path must resolve inside that folder, so no symlink
or ``..`` reaches the rest of the host); anyone uploads a ``.zip`` or ``.tar(.gz)``
(``upload_archive``: unpacked into ``uploads/<uuid>/``, entries that would land outside it,
links and devices refused, at most ``DATASET_UPLOAD_MAX_MB`` unpacked, and nothing kept on
a refusal).

Who sees and mounts one (``visible_to``): its owner; for ``tenant`` visibility everyone with
a role in that tenant's subtree (a department's dataset reaches its classes) and the admins
above it; everyone for ``public``; superusers all. Sharing with a tenant takes a managing
role on it (teacher, TA, admin); public takes an admin. A workload mounts the datasets
chosen at launch (``for_launch``: each must be visible to the person launching), read-only.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Model, Q, QuerySet
from django.utils.text import slugify
from django.utils.translation import gettext as _

from core.audit import record
from tenants.models import Tenant
from tenants.permissions import Access
from workloads.archives import unpack
from workloads.choices import ACTIVE, Visibility
from workloads.models import Dataset

MAX_DATASETS_PER_WORKLOAD = 16
EDITABLE = ("name", "description", "licence", "visibility", "tenant", "claim", "sub_path")


def root() -> Path:
    return Path(settings.DATASETS_DIR)


def visible_to(user: Any) -> QuerySet[Dataset]:
    """The datasets ``user`` may see and mount."""
    return visible_among(Dataset.objects.select_related("owner", "tenant"), user)


_Shared = TypeVar("_Shared", bound=Model)


def visible_among(things: QuerySet[_Shared], user: Any) -> QuerySet[_Shared]:
    """Of ``things`` shared like datasets (``owner``, ``visibility``, ``tenant``: models
    too), those ``user`` sees: all for a superuser, none signed out, else ``shared_with``."""
    access = Access.of(user)
    if access.is_superuser:
        return things
    if access.user_id is None:
        return things.none()
    return things.filter(shared_with(access))


def shared_with(access: Access) -> Q:
    """What a signed-in person (not a superuser) sees of things shared like datasets (models
    too): their own, public ones, and those of the tenants their roles reach."""
    shared = Q(visibility=Visibility.PUBLIC) | Q(owner_id=access.user_id)
    # A role on the tenant or above it (an admin of the department sees its classes'), or
    # on a tenant below it (a class's student sees the department's dataset).
    for path in access.roles:
        shared |= Q(visibility=Visibility.TENANT, tenant__path__startswith=path)
        ids = [int(part) for part in path.strip("/").split("/") if part]
        shared |= Q(visibility=Visibility.TENANT, tenant_id__in=ids)
    return shared


def can_change(user: Any, owned: Any) -> bool:
    """Its owner or a superuser changes a dataset (or a model: anything with an owner)."""
    access = Access.of(user)
    return access.is_superuser or owned.owner_id == access.user_id


def check_sharing(access: Access, visibility: Any, tenant: Tenant | None) -> None:
    if visibility not in Visibility.values:
        raise ValidationError(
            {"visibility": _("must be one of %(v)s") % {"v": ", ".join(Visibility.values)}}
        )
    if visibility == Visibility.TENANT:
        if tenant is None:
            raise ValidationError({"tenant": _("name the class or project to share it with")})
        if not access.can_manage(tenant):
            raise ValidationError(
                {"tenant": _("you do not teach or manage %(t)s") % {"t": tenant.name}}
            )
    elif visibility == Visibility.PUBLIC and not access.administers_anything():
        raise ValidationError({"visibility": _("only an admin shares a dataset with everyone")})


def _slug(name: str, slug: str | None) -> str:
    value = slugify(slug or name)[:64].strip("-")
    if not value:
        raise ValidationError({"slug": _("give a name with letters or digits")})
    if Dataset.objects.filter(slug=value).exists():
        raise ValidationError({"slug": _("a dataset named %(s)s exists already") % {"s": value}})
    return value


def text_field(name: str, value: Any, limit: int, *, required: bool = False) -> str:
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise ValidationError({name: _("must be text")})
    value = value.strip()
    if required and not value:
        raise ValidationError({name: _("This field is required.")})
    if len(value) > limit:
        raise ValidationError({name: _("must be at most %(n)s characters") % {"n": limit}})
    return value


def measure(folder: Path) -> tuple[int, int]:
    size = files = 0
    for base, _dirs, names in os.walk(folder):
        for name in names:
            try:
                size += (Path(base) / name).lstat().st_size
                files += 1
            except OSError:
                continue
    return size, files


def _create(
    *, actor: Any, path: str, name: Any, slug: Any, fields: dict[str, Any], how: str
) -> Dataset:
    access = Access.of(actor)
    name = text_field("name", name, 200, required=True)
    visibility = fields.get("visibility") or Visibility.PRIVATE
    tenant = fields.get("tenant")
    check_sharing(access, visibility, tenant)
    with transaction.atomic():
        dataset = Dataset.objects.create(
            slug=_slug(name, slug if isinstance(slug, str) else None),
            name=name,
            description=text_field("description", fields.get("description"), 5000),
            licence=text_field("licence", fields.get("licence"), 200),
            owner=actor,
            visibility=visibility,
            tenant=tenant if visibility == Visibility.TENANT else None,
            path=path,
            claim=text_field("claim", fields.get("claim"), 253),
            sub_path=text_field("sub_path", fields.get("sub_path"), 500),
            **dict(zip(("size_bytes", "files"), measure(root() / path), strict=True)),
        )
        record(
            "dataset.create",
            actor=actor,
            target=dataset,
            tenant=dataset.tenant,
            how=how,
            path=path,
            visibility=visibility,
        )
    return dataset


def register_folder(
    *, actor: Any, path: Any, name: Any, slug: Any = None, **fields: Any
) -> Dataset:
    """A folder already under ``DATASETS_DIR`` as a dataset. Admins only."""
    if not Access.of(actor).administers_anything():
        raise PermissionDenied(_("Only an admin registers a folder of the host."))
    relative = text_field("path", path, 500, required=True)
    base = root().resolve()
    folder = (base / relative).resolve()
    if folder != base and base not in folder.parents:
        raise ValidationError({"path": _("must be a folder inside %(root)s") % {"root": base}})
    if not folder.is_dir():
        raise ValidationError({"path": _("%(path)s is not a folder") % {"path": folder}})
    return _create(
        actor=actor,
        path=str(folder.relative_to(base)),
        name=name,
        slug=slug,
        fields=fields,
        how="folder",
    )


def upload_archive(
    *, actor: Any, archive: IO[bytes], filename: str, name: Any, slug: Any = None, **fields: Any
) -> Dataset:
    """An uploaded ``.zip``, ``.tar``, ``.tar.gz`` or ``.tgz``, unpacked as a new dataset."""
    if not Access.of(actor).user_id:
        raise PermissionDenied(_("Sign in to upload a dataset."))
    check_sharing(
        Access.of(actor), fields.get("visibility") or Visibility.PRIVATE, fields.get("tenant")
    )
    relative = f"uploads/{uuid.uuid4().hex}"
    target = root() / relative
    target.mkdir(parents=True)
    try:
        unpack(archive, filename, target, settings.DATASET_UPLOAD_MAX_MB * 1024 * 1024)
        return _create(
            actor=actor, path=relative, name=name, slug=slug, fields=fields, how="upload"
        )
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise


@transaction.atomic
def update(*, actor: Any, dataset: Dataset, **changes: Any) -> Dataset:
    """Name, description, licence, sharing, Kubernetes claim. The owner or a superuser."""
    if not can_change(actor, dataset):
        raise PermissionDenied(_("Only the owner changes a dataset."))
    unknown = set(changes) - set(EDITABLE)
    if unknown:
        raise ValidationError({k: _("cannot be changed") for k in sorted(unknown)})
    limits = {"name": 200, "description": 5000, "licence": 200, "claim": 253, "sub_path": 500}
    for key, limit in limits.items():
        if key in changes:
            setattr(dataset, key, text_field(key, changes[key], limit, required=key == "name"))
    if "visibility" in changes or "tenant" in changes:
        visibility = changes.get("visibility", dataset.visibility)
        tenant = changes.get("tenant", dataset.tenant)
        check_sharing(Access.of(actor), visibility, tenant)
        dataset.visibility = visibility
        dataset.tenant = tenant if visibility == Visibility.TENANT else None
    dataset.save()
    record(
        "dataset.update",
        actor=actor,
        target=dataset,
        tenant=dataset.tenant,
        changed=sorted(changes),
    )
    return dataset


@transaction.atomic
def delete(*, actor: Any, dataset: Dataset) -> None:
    """Forget a dataset no running workload mounts; an upload's files go with it."""
    if not can_change(actor, dataset):
        raise PermissionDenied(_("Only the owner deletes a dataset."))
    if dataset.workloads.filter(state__in=ACTIVE).exists():
        raise ValidationError({"dataset": _("workloads still mount it; stop them first")})
    record("dataset.delete", actor=actor, target=dataset, tenant=dataset.tenant, slug=dataset.slug)
    folder = root() / dataset.path
    uploaded = dataset.path.startswith("uploads/")
    dataset.delete()
    if uploaded:
        transaction.on_commit(lambda: shutil.rmtree(folder, ignore_errors=True))


def for_launch(actor: Any, chosen: Iterable[Any] | None) -> list[Dataset]:
    """The datasets named (slugs or ids) for a new workload, each visible to ``actor``; a
    400 naming the first that is not (the same words whether it exists or not)."""
    if not chosen:
        return []
    if isinstance(chosen, str | bytes) or not isinstance(chosen, Iterable):
        raise ValidationError({"datasets": _("must be a list of dataset names")})
    names = list(dict.fromkeys(chosen))
    if len(names) > MAX_DATASETS_PER_WORKLOAD:
        raise ValidationError(
            {"datasets": _("at most %(n)s datasets") % {"n": MAX_DATASETS_PER_WORKLOAD}}
        )
    visible = visible_to(actor)
    out = []
    for name in names:
        if isinstance(name, Dataset):
            found = visible.filter(pk=name.pk).first()
        elif isinstance(name, int) and not isinstance(name, bool):
            found = visible.filter(pk=name).first()
        elif isinstance(name, str):
            found = visible.filter(slug=name.strip()).first()
        else:
            found = None
        if found is None:
            raise ValidationError(
                {"datasets": _("no dataset %(name)s that you may use") % {"name": str(name)[:64]}}
            )
        out.append(found)
    return out


def mounts(datasets: Sequence[Dataset]) -> list[tuple[Dataset, Path]]:
    """Each dataset with its folder on this host."""
    return [(dataset, root() / dataset.path) for dataset in datasets]
