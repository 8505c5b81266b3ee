"""Parse and validate a class roster CSV, with no database access.

The file has a header row with the columns ``student_number, name, email, class`` (any
order, any case) and optionally ``role`` (student, ta or teacher; student when empty).
Every row is checked before anything is written; a problem is reported with its line
number, so a teacher can fix the file and upload it again.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext as _

from core.text import unstorable

REQUIRED_COLUMNS = ("student_number", "name", "email", "class")
OPTIONAL_COLUMNS = ("role",)
ROSTER_ROLES = ("student", "ta", "teacher")
MAX_ROWS = 5000
MAX_CELL = 1024  # characters in one cell; the longest real one (a name) is 150

_STUDENT_NUMBER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$")
_EMAIL = re.compile(r"^[^@\s,;]+@[^@\s,;]+\.[^@\s,;]+$")
_SLUG = re.compile(r"^[-a-zA-Z0-9_]+$")


@dataclass(frozen=True)
class RosterRow:
    line: int
    student_number: str
    name: str
    email: str
    class_slug: str
    role: str


@dataclass(frozen=True)
class RowError:
    line: int
    column: str
    message: str

    def __str__(self) -> str:
        where = _("line %(n)s") % {"n": self.line} if self.line else _("file")
        return (
            f"{where}, {self.column}: {self.message}" if self.column else f"{where}: {self.message}"
        )


class RosterError(Exception):
    """The file as a whole cannot be read (no header, wrong encoding, too large)."""


def parse(data: bytes | str) -> tuple[list[RosterRow], list[RowError]]:
    """Return the valid rows and the errors; the caller imports only if there are no errors."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise RosterError(_("the file is not UTF-8 text (save it as CSV UTF-8)")) from None
    else:
        text = data.lstrip("\ufeff")
    if not text.strip():
        raise RosterError(_("the file is empty"))

    reader = csv.reader(io.StringIO(text))
    try:
        return _parse(reader)
    except csv.Error as exc:
        # A malformed file, or a field over csv's own limit (128 KiB): name the line.
        raise RosterError(
            _("line %(n)s cannot be read: %(error)s") % {"n": reader.line_num, "error": exc}
        ) from None


def _parse(reader: Any) -> tuple[list[RosterRow], list[RowError]]:
    header = next(reader)
    columns = [name.strip().lower() for name in header]
    missing = [name for name in REQUIRED_COLUMNS if name not in columns]
    if missing:
        raise RosterError(
            _(
                "the header lacks the column(s) %(missing)s; "
                "expected %(columns)s (and optionally role)"
            )
            % {"missing": ", ".join(missing), "columns": ", ".join(REQUIRED_COLUMNS)}
        )
    unknown = [name for name in columns if name not in REQUIRED_COLUMNS + OPTIONAL_COLUMNS]
    if unknown:
        raise RosterError(_("unknown column(s) %(columns)s") % {"columns": ", ".join(unknown)})
    index = {name: columns.index(name) for name in columns}

    rows: list[RosterRow] = []
    errors: list[RowError] = []
    seen: dict[str, RosterRow] = {}
    for cells in reader:
        line = reader.line_num
        if not any(cell.strip() for cell in cells):
            continue
        if len(rows) + len(errors) >= MAX_ROWS:
            raise RosterError(_("more than %(n)s rows; split the file") % {"n": MAX_ROWS})
        if len(cells) != len(columns):
            errors.append(
                RowError(
                    line,
                    "",
                    _("has %(n)s fields, the header has %(m)s")
                    % {"n": len(cells), "m": len(columns)},
                )
            )
            continue
        value = {name: cells[i].strip() for name, i in index.items()}
        row_errors = _check(line, value)
        if row_errors:
            errors.extend(row_errors)
            continue
        row = RosterRow(
            line=line,
            student_number=value["student_number"].lower(),
            name=value["name"],
            email=value["email"].lower(),
            class_slug=value["class"],
            role=value.get("role", "").lower() or "student",
        )
        earlier = seen.get(row.student_number)
        if earlier and (earlier.name, earlier.email) != (row.name, row.email):
            errors.append(
                RowError(
                    line,
                    "student_number",
                    _("%(number)s appears on line %(line)s with other details")
                    % {"number": row.student_number, "line": earlier.line},
                )
            )
            continue
        seen[row.student_number] = row
        rows.append(row)
    if not rows and not errors:
        raise RosterError(_("the file has a header but no rows"))
    return rows, errors


def _check(line: int, value: dict[str, str]) -> list[RowError]:
    errors = []
    for name, cell in value.items():
        what = unstorable(cell)
        if len(cell) > MAX_CELL:
            errors.append(
                RowError(line, name, _("is longer than %(n)s characters") % {"n": MAX_CELL})
            )
        elif what:
            errors.append(RowError(line, name, _("contains %(what)s") % {"what": what}))
        else:
            continue
        value[name] = ""  # reported once, not again by the checks below
    for name in REQUIRED_COLUMNS:
        if not value[name] and not any(e.column == name for e in errors):
            errors.append(RowError(line, name, _("is empty")))
    if value["student_number"] and not _STUDENT_NUMBER.match(value["student_number"]):
        errors.append(
            RowError(line, "student_number", _("use letters, digits, '.', '_' or '-' (at most 32)"))
        )
    if len(value["name"]) > 150:
        errors.append(RowError(line, "name", _("is longer than 150 characters")))
    if value["email"] and not _EMAIL.match(value["email"]):
        errors.append(
            RowError(
                line, "email", _("%(email)r is not an email address") % {"email": value["email"]}
            )
        )
    if value["class"] and not _SLUG.match(value["class"]):
        errors.append(
            RowError(line, "class", _("%(code)r is not a class code") % {"code": value["class"]})
        )
    role = value.get("role", "").lower()
    if role and role not in ROSTER_ROLES:
        errors.append(
            RowError(
                line,
                "role",
                _("unknown role %(role)r; use one of %(roles)s")
                % {"role": role, "roles": ", ".join(ROSTER_ROLES)},
            )
        )
    return errors
