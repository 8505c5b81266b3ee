"""The model registry: named models, their immutable versions and movable aliases.

A version's files are copied under ``settings.MODELS_DIR/<uuid>/`` when it is registered and
never written again, so what an endpoint serves is what was registered, whatever the job's
folder holds later. Two ways in: the output folder of a finished job (``register_from_job``:
a folder inside the job owner's home, the job Succeeded and the actor its owner or its class's
staff; the job's ``metrics.json`` becomes the version's metrics), or an uploaded archive
(``register_upload``, unpacked safely by ``workloads.archives``). Every new version moves the
alias ``latest``; other aliases (``production``) move on request, each move audited.

Who sees a model (``visible_to``): as for datasets (``workloads.datasets.shared_with``).
Who adds versions and moves aliases: its owner (and superusers).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Max, QuerySet
from django.utils.text import slugify
from django.utils.translation import gettext as _

from core.audit import record
from tenants.permissions import Access
from workloads import datasets
from workloads.archives import unpack
from workloads.choices import Framework, State, Visibility, WorkloadKind
from workloads.models import MlModel, ModelAlias, ModelVersion, Workload
from workloads.permissions import can_control
from workloads.specs import home_dir

LATEST = "latest"
MAX_METRICS_BYTES = 64 * 1024


def root() -> Path:
    return Path(settings.MODELS_DIR)


def folder_of(version: ModelVersion) -> Path:
    return root() / version.path


def visible_to(user: Any) -> QuerySet[MlModel]:
    return datasets.visible_among(MlModel.objects.select_related("owner", "tenant"), user)


can_change = datasets.can_change  # the owner or a superuser, as for datasets


def create_model(
    *,
    actor: Any,
    name: Any,
    slug: Any = None,
    description: Any = "",
    visibility: Any = Visibility.PRIVATE,
    tenant: Any = None,
) -> MlModel:
    access = Access.of(actor)
    if not access.user_id:
        raise PermissionDenied(_("Sign in to register a model."))
    name = datasets.text_field("name", name, 200, required=True)
    visibility = visibility or Visibility.PRIVATE
    datasets.check_sharing(access, visibility, tenant)
    value = slugify(slug if isinstance(slug, str) and slug else name)[:64].strip("-")
    if not value:
        raise ValidationError({"slug": _("give a name with letters or digits")})
    with transaction.atomic():
        if MlModel.objects.filter(slug=value).exists():
            raise ValidationError({"slug": _("a model named %(s)s exists already") % {"s": value}})
        model = MlModel.objects.create(
            slug=value,
            name=name,
            description=datasets.text_field("description", description, 5000),
            owner=actor,
            visibility=visibility,
            tenant=tenant if visibility == Visibility.TENANT else None,
        )
        record("model.create", actor=actor, target=model, tenant=model.tenant, slug=value)
    return model


def _framework(value: Any) -> str:
    if value not in Framework.values:
        raise ValidationError(
            {"framework": _("must be one of %(v)s") % {"v": ", ".join(Framework.values)}}
        )
    return str(value)


def _limit() -> int:
    return int(settings.MODEL_UPLOAD_MAX_MB) * 1024 * 1024


def _metrics(folder: Path) -> dict[str, Any]:
    """The job's ``metrics.json`` (an object of names to numbers or text), or nothing."""
    path = folder / "metrics.json"
    if not path.is_file() or path.is_symlink() or path.stat().st_size > MAX_METRICS_BYTES:
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        str(k)[:100]: v
        for k, v in data.items()
        if isinstance(v, int | float | str) and not isinstance(v, bool)
    }


def _copy_folder(source: Path, target: Path) -> None:
    """Copy ``source`` (links refused: one could point anywhere on the host), at most the
    upload limit."""
    total = 0
    for base, dirs, names in os.walk(source):
        for name in [*dirs, *names]:
            path = Path(base) / name
            if path.is_symlink():
                raise ValidationError(
                    {"path": _("the folder holds a link: %(n)s") % {"n": path.relative_to(source)}}
                )
            if path.is_file():
                total += path.stat().st_size
    if total > _limit():
        raise ValidationError(
            {"path": _("the folder holds more than %(n)s MiB") % {"n": _limit() // 2**20}}
        )
    shutil.copytree(source, target, dirs_exist_ok=True)


def _add_version(
    *,
    actor: Any,
    model: MlModel,
    relative: str,
    framework: str,
    how: str,
    job: Workload | None = None,
    metrics: dict[str, Any] | None = None,
) -> ModelVersion:
    folder = root() / relative
    size, files = datasets.measure(folder)
    with transaction.atomic():
        locked = MlModel.objects.select_for_update().get(pk=model.pk)
        number = (locked.versions.aggregate(n=Max("number"))["n"] or 0) + 1
        version = ModelVersion.objects.create(
            model=locked,
            number=number,
            framework=framework,
            path=relative,
            source_job=job,
            dataset=job.datasets.order_by("slug").first() if job else None,
            metrics=metrics or {},
            size_bytes=size,
            files=files,
            created_by=actor,
        )
        ModelAlias.objects.update_or_create(
            model=locked, name=LATEST, defaults={"version": version}
        )
        record(
            "model.version",
            actor=actor,
            target=version,
            tenant=model.tenant,
            model=model.slug,
            number=number,
            how=how,
            job=str(job.pk) if job else "",
        )
    return version


def register_from_job(
    *, actor: Any, model: MlModel, job: Workload, path: Any, framework: Any
) -> ModelVersion:
    """A new version from ``path`` (relative to the job owner's home) of a Succeeded job."""
    if not can_change(actor, model):
        raise PermissionDenied(_("Only the model's owner adds versions."))
    if job.kind != WorkloadKind.JOB or not can_control(actor, job):
        raise ValidationError({"job": _("no such job of yours")})
    if job.state != State.SUCCEEDED:
        raise ValidationError(
            {"job": _("the job has not succeeded (it is %(s)s)") % {"s": job.state}}
        )
    framework = _framework(framework)
    relative = datasets.text_field("path", path, 500, required=True)
    home = Path(home_dir(job.owner)).resolve()
    folder = (home / relative).resolve()
    if home not in folder.parents and folder != home:
        raise ValidationError({"path": _("must be a folder inside the job owner's home")})
    if not folder.is_dir():
        raise ValidationError({"path": _("%(path)s is not a folder") % {"path": relative}})
    target_name = uuid.uuid4().hex
    target = root() / target_name
    root().mkdir(parents=True, exist_ok=True)
    try:
        _copy_folder(folder, target)
        return _add_version(
            actor=actor,
            model=model,
            relative=target_name,
            framework=framework,
            how="job",
            job=job,
            metrics=_metrics(target),
        )
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise


def register_upload(
    *, actor: Any, model: MlModel, archive: IO[bytes], filename: str, framework: Any
) -> ModelVersion:
    """A new version from an uploaded ``.zip`` / ``.tar(.gz)`` of the model's files."""
    if not can_change(actor, model):
        raise PermissionDenied(_("Only the model's owner adds versions."))
    framework = _framework(framework)
    target_name = uuid.uuid4().hex
    target = root() / target_name
    target.mkdir(parents=True)
    try:
        unpack(archive, filename, target, _limit())
        return _add_version(
            actor=actor,
            model=model,
            relative=target_name,
            framework=framework,
            how="upload",
            metrics=_metrics(target),
        )
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise


@transaction.atomic
def set_alias(*, actor: Any, model: MlModel, name: Any, version: ModelVersion) -> ModelAlias:
    """Point ``name`` (e.g. production) at ``version``; the move is audited."""
    if not can_change(actor, model):
        raise PermissionDenied(_("Only the model's owner moves its aliases."))
    if version.model_id != model.pk:
        raise ValidationError({"version": _("that version belongs to another model")})
    value = slugify(name if isinstance(name, str) else "")[:40]
    if not value:
        raise ValidationError({"name": _("give the alias a name, e.g. production")})
    before = ModelAlias.objects.filter(model=model, name=value).select_related("version").first()
    alias, _created = ModelAlias.objects.update_or_create(
        model=model, name=value, defaults={"version": version}
    )
    record(
        "model.alias",
        actor=actor,
        target=model,
        tenant=model.tenant,
        alias=value,
        version=version.number,
        previous=before.version.number if before else None,
    )
    return alias


def resolve(model: MlModel, ref: Any) -> ModelVersion:
    """A version by number ("3") or alias ("production"); a 400 otherwise."""
    text = str(ref or LATEST).strip()
    found = (
        model.versions.filter(number=int(text)).first()
        if text.isdigit()
        else ModelVersion.objects.filter(aliases__model=model, aliases__name=text).first()
    )
    if found is None:
        raise ValidationError(
            {"version": _("no version %(v)s of %(m)s") % {"v": text[:40], "m": model.slug}}
        )
    return found
