"""Reading roster files: every problem reported with its line, before anything is written."""

import pytest

from tenants.roster import RosterError, parse

GOOD = "student_number,name,email,class\ns001,Ann Lee,ann@uni.example,ml-101\n"


def test_a_good_file_gives_its_rows() -> None:
    rows, errors = parse(GOOD.encode())
    assert errors == []
    assert [(r.line, r.student_number, r.class_slug, r.role) for r in rows] == [
        (2, "s001", "ml-101", "student")
    ]


def test_excel_byte_order_mark_and_header_case_are_accepted() -> None:
    data = "\ufeffStudent_Number, Name ,EMAIL,Class,Role\nS002,Bo,bo@uni.example,ml-101,TA\n"
    rows, errors = parse(data.encode("utf-8"))
    assert errors == []
    assert rows[0].student_number == "s002" and rows[0].role == "ta"


def test_each_bad_row_is_named_by_line_and_column() -> None:
    data = (
        "student_number,name,email,class,role\n"
        "s001,Ann,ann@uni.example,ml-101,\n"
        ",Bo,bo@uni.example,ml-101,\n"
        "s003,Cy,not-an-email,ml-101,\n"
        "s004,Di,di@uni.example,ml-101,professor\n"
        "s005,Ed,ed@uni.example\n"
    )
    rows, errors = parse(data)
    assert [r.student_number for r in rows] == ["s001"]
    assert [(e.line, e.column) for e in errors] == [
        (3, "student_number"),
        (4, "email"),
        (5, "role"),
        (6, ""),
    ]
    assert "unknown role 'professor'" in errors[2].message


def test_the_same_student_twice_with_different_details_is_an_error() -> None:
    data = GOOD + "s001,Ann Other,other@uni.example,dl-201\n"
    _rows, errors = parse(data)
    assert errors[0].line == 3 and "line 2" in errors[0].message


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", "empty"),
        (b"name,email\nA,a@b.c\n", r"lacks the column\(s\) student_number, class"),
        (b"student_number,name,email,class\n", "no rows"),
        ("student_number,name,email,class\ns1,Zoë,z@u.example,c\n".encode("latin-1"), "UTF-8"),
        (b"student_number,name,email,class,shoe_size\n", "unknown column"),
    ],
)
def test_an_unusable_file_is_refused_whole(data: bytes, words: str) -> None:
    with pytest.raises(RosterError, match=words):
        parse(data)


# -- Excel workbooks (.xlsx) go through the same reader -----------------------------------


def workbook(*rows: tuple[object, ...], title: str = "Roster") -> bytes:
    import io

    from openpyxl import Workbook

    book = Workbook()
    sheet = book.active
    sheet.title = title
    for row in rows:
        sheet.append(list(row))
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def test_an_xlsx_roster_gives_the_same_rows_as_its_csv() -> None:
    data = workbook(
        ("Student_Number", "Name", "Email", "Class"),
        (2024001, "Ann Lee", "ann@uni.example", "ML-101"),  # Excel stores the number as such
        ("S002", "Bo Wu", "bo@uni.example", "ml-101"),
    )
    rows, errors = parse(data)
    assert errors == []
    assert [(r.line, r.student_number, r.name, r.class_slug) for r in rows] == [
        (2, "2024001", "Ann Lee", "ML-101"),
        (3, "s002", "Bo Wu", "ml-101"),
    ]


def test_bad_rows_of_an_xlsx_are_named_by_their_excel_row_number() -> None:
    data = workbook(
        ("student_number", "name", "email", "class"),
        ("s001", "Ann", "ann@uni.example", "ml-101"),
        (None, None, None, None),  # an empty row in the middle is skipped, still counted
        ("s003", None, "not-an-email", "ml-101"),
    )
    rows, errors = parse(data)
    assert [r.student_number for r in rows] == ["s001"]
    assert [(e.line, e.column, e.message) for e in errors] == [
        (4, "name", "is empty"),
        (4, "email", "'not-an-email' is not an email address"),
    ]


def test_an_xlsx_without_the_columns_is_refused_as_a_whole() -> None:
    with pytest.raises(RosterError, match="lacks the column"):
        parse(workbook(("number", "who"), ("s001", "Ann")))


def test_a_broken_or_old_excel_file_is_refused_with_a_message() -> None:
    with pytest.raises(RosterError, match="cannot be read as an Excel workbook"):
        parse(b"PK\x03\x04 not really a zip")
    with pytest.raises(RosterError, match=r"old Excel \.xls"):
        parse(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 64)


def test_a_workbook_that_unpacks_to_gigabytes_is_refused_before_it_is_read() -> None:
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("xl/sharedStrings.xml", b"<a>" + b" " * (80 * 1024 * 1024) + b"</a>")
    assert len(out.getvalue()) < 1024 * 1024  # small on the wire

    with pytest.raises(RosterError, match="unpacks to more than 64 MiB"):
        parse(out.getvalue())
