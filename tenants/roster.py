"""Parse and validate a class roster, CSV or Excel (.xlsx), with no database access.

Both kinds go through the same reader: an .xlsx workbook's first sheet is read as rows of
text (a student number Excel stored as a number reads as its digits), and its rows are
reported by their row numbers in Excel, as a CSV's are by their line numbers.

The file has a header row with the columns ``student_number, name, email, class`` (any
order, any case) and optionally ``role`` (student, ta or teacher; student when empty).
Every row is checked before anything is written; a problem is reported with its line
number, so a teacher can fix the file and upload it again.
"""

from __future__ import annotations

import csv
import datetime
import io
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext as _
from openpyxl import load_workbook

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


XLSX_MAGIC = b"PK\x03\x04"  # an .xlsx is a zip archive
XLS_MAGIC = b"\xd0\xcf\x11\xe0"  # the old binary .xls (OLE2)
# A workbook of MAX_ROWS rows unpacks to a few MiB; more is a zip bomb, not a roster. (zipfile
# never unpacks a member past the size its directory declares, so the sum below holds.)
MAX_XLSX_UNPACKED = 64 * 1024 * 1024


def parse(data: bytes | str) -> tuple[list[RosterRow], list[RowError]]:
    """Return the valid rows and the errors; the caller imports only if there are no errors.

    ``data`` is a CSV (UTF-8) or an .xlsx workbook, told apart by their first bytes."""
    if isinstance(data, bytes) and data.startswith(XLSX_MAGIC):
        return _parse(_SheetReader(data))
    if isinstance(data, bytes) and data.startswith(XLS_MAGIC):
        raise RosterError(
            _("this is an old Excel .xls file; save it as Excel Workbook (.xlsx) or CSV UTF-8")
        )
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


class _SheetReader:
    """The first worksheet of an .xlsx as csv.reader would give it: lists of strings, with
    ``line_num`` the Excel row number of the row last returned."""

    def __init__(self, data: bytes) -> None:
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                unpacked = sum(member.file_size for member in archive.infolist())
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            raise RosterError(
                _("the file cannot be read as an Excel workbook (.xlsx): %(error)s")
                % {"error": exc}
            ) from None
        if unpacked > MAX_XLSX_UNPACKED:
            raise RosterError(
                _("the workbook unpacks to more than %(n)s MiB; a roster is far smaller")
                % {"n": MAX_XLSX_UNPACKED // (1024 * 1024)}
            )
        try:
            book = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
        except Exception as exc:
            raise RosterError(
                _("the file cannot be read as an Excel workbook (.xlsx): %(error)s")
                % {"error": exc}
            ) from None
        sheet = book.worksheets[0] if book.worksheets else None
        if sheet is None:
            raise RosterError(_("the workbook has no worksheet"))
        self._rows = sheet.iter_rows(values_only=True)
        self._width: int | None = None
        self.line_num = 0

    def __iter__(self) -> Iterator[list[str]]:
        return self

    def __next__(self) -> list[str]:
        try:
            values = next(self._rows)
        except StopIteration:
            raise
        except Exception as exc:
            raise RosterError(
                _("row %(n)s cannot be read: %(error)s") % {"n": self.line_num + 1, "error": exc}
            ) from None
        cells = [_cell_text(value) for value in values]
        self.line_num += 1
        if self._width is None:  # the header: its trailing empty columns are not columns
            while cells and not cells[-1].strip():
                cells.pop()
            self._width = len(cells)
        elif len(cells) > self._width and not any(c.strip() for c in cells[self._width :]):
            cells = cells[: self._width]  # a sheet's used range is often wider than its data
        return cells


def _cell_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).upper()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # 2024001.0: Excel keeps every number as a float
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    return str(value)


def _parse(reader: Any) -> tuple[list[RosterRow], list[RowError]]:
    try:
        header = next(reader)
    except StopIteration:
        raise RosterError(_("the file is empty")) from None
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
