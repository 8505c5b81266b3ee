"""Roster import through the API and the page: all rows or none, idempotent."""

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile

from tenants.models import Membership

pytestmark = pytest.mark.django_db
User = get_user_model()

ROSTER = (
    "student_number,name,email,class\n"
    "S1001,Ann Lee,ann@uni.example,ml-101\n"
    "s1002,Bo Wu,bo@uni.example,ml-101\n"
)


def upload(client, text: str):
    return client.post(
        "/api/v1/roster-import/",
        {"file": SimpleUploadedFile("roster.csv", text.encode())},
        format="multipart",
    )


def test_a_teacher_imports_a_roster_into_their_class(world, api) -> None:
    response = upload(api(world.alice), ROSTER)
    assert response.status_code == 200, response.content
    assert response.json()["created_users"] == ["s1001", "s1002"]
    ann = User.objects.get(username="s1001")
    assert (ann.display_name, ann.email, ann.has_usable_password()) == (
        "Ann Lee",
        "ann@uni.example",
        False,
    )
    assert Membership.objects.get(user=ann).tenant == world.class_a


def test_importing_the_same_roster_again_changes_nothing(world, api) -> None:
    upload(api(world.alice), ROSTER)
    again = upload(api(world.alice), ROSTER).json()
    assert again == {
        "created_users": [],
        "created_memberships": [],
        "changed_memberships": [],
        "unchanged": 2,
    }
    assert User.objects.filter(username__startswith="s100").count() == 2


def test_one_bad_row_imports_nothing_and_names_the_line(world, api) -> None:
    bad = ROSTER + "s1003,,cy@uni.example,ml-101\n"
    response = upload(api(world.alice), bad)
    assert response.status_code == 400
    assert response.json()["errors"] == [{"line": 4, "column": "name", "message": "is empty"}]
    assert not User.objects.filter(username__startswith="s100").exists()


def test_a_teacher_cannot_import_into_another_class(world, api) -> None:
    response = upload(api(world.alice), ROSTER.replace("ml-101", "dl-201"))
    assert response.status_code == 400
    assert {e["message"] for e in response.json()["errors"]} == {
        "no class 'dl-201' that you manage"
    }
    assert not Membership.objects.filter(tenant=world.class_b, user__username="s1001").exists()


def test_an_existing_account_with_another_email_is_not_taken_over(world, api, make_user) -> None:
    make_user("s1001", email="someone.else@uni.example")
    response = upload(api(world.alice), ROSTER)
    assert response.status_code == 400
    assert response.json()["errors"][0]["line"] == 2


def test_students_and_outsiders_cannot_import(world, api) -> None:
    assert upload(api(world.bob), ROSTER).status_code == 403
    assert upload(api(world.charlie), ROSTER).status_code == 403


def test_a_file_without_the_header_gets_a_400(world, api) -> None:
    response = upload(api(world.alice), "a,b\n1,2\n")
    assert response.status_code == 400 and "file" in response.json()


def test_the_roster_page_shows_row_errors_and_imports_nothing(world, client) -> None:
    client.force_login(world.alice)
    bad = ROSTER + "s1003,Cy,not-an-email,ml-101\n"
    page = client.post("/roster/import/", {"file": SimpleUploadedFile("roster.csv", bad.encode())})
    assert page.status_code == 200
    assert b"not-an-email" in page.content and b"nothing was imported" in page.content
    assert not User.objects.filter(username="s1001").exists()


def test_the_roster_page_is_closed_to_students(world, client) -> None:
    client.force_login(world.bob)
    assert client.get("/roster/import/").status_code == 403


def test_the_api_takes_an_xlsx_roster_too(world, api) -> None:
    import io

    from openpyxl import Workbook

    book = Workbook()
    for row in (
        ("student_number", "name", "email", "class"),
        (2024001, "Ann", "a@uni.example", "ML-101"),
    ):
        book.active.append(list(row))
    data = io.BytesIO()
    book.save(data)
    response = api(world.alice).post(
        "/api/v1/roster-import/",
        {"file": SimpleUploadedFile("roster.xlsx", data.getvalue())},
        format="multipart",
    )
    assert response.status_code == 200, response.content
    assert response.json()["created_memberships"] == ["2024001 → ml-101 (student)"]
