"""Unpacking an uploaded ``.zip`` or ``.tar(.gz)`` safely (datasets and model versions):
entries that would land outside the target, links and devices are refused, and so is an
archive that unpacks to more than ``limit`` bytes. The caller removes the target on a refusal.
"""

from __future__ import annotations

import shutil
import tarfile
import zipfile
from pathlib import Path
from typing import IO

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _


def unpack(archive: IO[bytes], filename: str, target: Path, limit: int) -> None:
    lower = (filename or "").lower()
    too_big = ValidationError(
        {"file": _("the archive holds more than %(n)s MiB") % {"n": limit // (1024 * 1024)}}
    )
    if lower.endswith(".zip"):
        try:
            bundle = zipfile.ZipFile(archive)
        except zipfile.BadZipFile:
            raise ValidationError({"file": _("not a readable zip archive")}) from None
        with bundle:
            members = bundle.infolist()
            if sum(m.file_size for m in members) > limit:
                raise too_big
            for member in members:
                if (member.external_attr >> 16) & 0o170000 == 0o120000:
                    raise ValidationError(
                        {"file": _("the archive holds a link: %(n)s") % {"n": member.filename}}
                    )
                destination = inside(target, member.filename)
                if member.is_dir():
                    destination.mkdir(parents=True, exist_ok=True)
                    continue
                destination.parent.mkdir(parents=True, exist_ok=True)
                with bundle.open(member) as source, open(destination, "wb") as out:
                    shutil.copyfileobj(source, out)
        return
    if lower.endswith((".tar", ".tar.gz", ".tgz")):
        try:
            bundle_tar = tarfile.open(fileobj=archive, mode="r:*")  # noqa: SIM115 (with below)
        except tarfile.TarError:
            raise ValidationError({"file": _("not a readable tar archive")}) from None
        with bundle_tar:
            members_tar = bundle_tar.getmembers()
            if sum(m.size for m in members_tar) > limit:
                raise too_big
            for info in members_tar:
                if not (info.isfile() or info.isdir()):
                    raise ValidationError(
                        {"file": _("the archive holds a link or device: %(n)s") % {"n": info.name}}
                    )
                inside(target, info.name)
            bundle_tar.extractall(target, filter="data")
        return
    raise ValidationError({"file": _("upload a .zip, .tar, .tar.gz or .tgz archive")})


def inside(target: Path, name: str) -> Path:
    destination = (target / name).resolve()
    if destination != target.resolve() and target.resolve() not in destination.parents:
        raise ValidationError({"file": _("the archive writes outside itself: %(n)s") % {"n": name}})
    return destination
