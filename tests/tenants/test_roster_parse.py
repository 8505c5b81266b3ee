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
