"""The roster page: Excel as well as CSV, sample files to start from, the class codes the
teacher can use, and what the teacher tells the students about signing in."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from openpyxl import Workbook, load_workbook

from tenants.models import Membership
from tenants.roster import parse

pytestmark = pytest.mark.django_db
User = get_user_model()


def xlsx(*rows: tuple[object, ...]) -> bytes:
    book = Workbook()
    for row in rows:
        book.active.append(list(row))
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def post(client: Client, name: str, data: bytes) -> Any:
    return client.post("/roster/import/", {"file": SimpleUploadedFile(name, data)})


def test_a_teacher_imports_an_xlsx_roster_on_the_page(world, client: Client) -> None:
    client.force_login(world.alice)
    data = xlsx(
        ("student_number", "name", "email", "class"),
        (2024010, "Ann Lee", "ann@uni.example", "ML-101"),
        (2024002, "Bo Wu", "bo@uni.example", "ML-101"),
    )

    page = post(client, "roster.xlsx", data).content.decode()

    assert "2 new accounts" in page
    assert page.index("2024002 → ml-101") < page.index("2024010 → ml-101")  # natural order
    assert set(
        Membership.objects.filter(
            tenant=world.class_a, user__username__startswith="2024"
        ).values_list("user__username", flat=True)
    ) == {"2024010", "2024002"}


def test_a_bad_xlsx_row_imports_nothing_and_names_its_row(world, client: Client) -> None:
    client.force_login(world.alice)
    data = xlsx(
        ("student_number", "name", "email", "class"),
        ("s1", "Ann", "ann@uni.example", "ml-101"),
        ("s2", "Bo", "bo@uni.example", "no-such-class"),
    )

    page = post(client, "roster.xlsx", data).content.decode()

    assert "1 problem found; nothing was imported" in page
    assert "<td>3</td><td>class</td>" in page
    assert not User.objects.filter(username__in=["s1", "s2"]).exists()


def test_the_page_lists_the_class_codes_the_teacher_can_use(world, client: Client) -> None:
    client.force_login(world.alice)
    page = client.get("/roster/import/").content.decode()

    assert "<code>ml-101</code>" in page
    assert "<code>dl-201</code>" not in page  # not alice's class


@pytest.mark.parametrize("kind", ["csv", "xlsx"])
def test_the_sample_files_hold_the_teachers_class_and_import_as_they_are(
    world, client: Client, kind: str
) -> None:
    client.force_login(world.alice)
    sample = client.get(f"/roster/sample.{kind}")

    assert sample.status_code == 200
    assert f'filename="roster-sample.{kind}"' in sample["Content-Disposition"]
    rows, errors = parse(sample.content)
    assert errors == []
    assert {r.class_slug for r in rows} == {"ml-101"}
    assert rows[0].name == "张三"
    # The sample imports as downloaded.
    page = post(client, f"sample.{kind}", sample.content).content.decode()
    assert "3 new accounts" in page


def test_the_xlsx_sample_is_a_real_workbook(world, client: Client) -> None:
    client.force_login(world.alice)
    book = load_workbook(io.BytesIO(client.get("/roster/sample.xlsx").content))
    assert next(book.active.iter_rows(values_only=True))[:4] == (
        "student_number",
        "name",
        "email",
        "class",
    )


def test_students_and_outsiders_get_no_sample(world, client: Client) -> None:
    client.force_login(world.bob)
    assert client.get("/roster/sample.csv").status_code == 403
    client.force_login(world.charlie)
    assert client.get("/roster/sample.xlsx").status_code == 403
    assert client.get("/roster/sample.exe").status_code == 404
    client.logout()
    assert client.get("/roster/sample.csv").status_code == 302  # to the sign-in page


def test_without_campus_sign_in_the_page_offers_one_time_sign_in_links(
    world, client: Client
) -> None:
    client.force_login(world.alice)
    data = b"student_number,name,email,class\ns1,Ann,ann@uni.example,ml-101\n"

    page = post(client, "roster.csv", data).content.decode()

    assert "How the imported students sign in" in page
    assert "Give each student their one-time sign-in link" in page
    assert "Download 1 sign-in link (CSV)" in page
    assert "A link works once and for 7 days" in page


def test_with_ldap_the_page_says_students_use_their_campus_account(
    world, client: Client, settings: Any
) -> None:
    settings.LDAP_ENABLED = True
    settings.CAS_ENABLED = True
    settings.CAS_PROVIDER_NAME = "统一身份认证"
    client.force_login(world.alice)
    data = b"student_number,name,email,class\ns1,Ann,ann@uni.example,ml-101\n"

    page = post(client, "roster.csv", data).content.decode()

    assert "student number and their campus password" in page
    assert "“统一身份认证” button" in page
    assert "Give each student their one-time sign-in link" not in page
    assert "Students without a campus account can get a one-time sign-in link" in page
