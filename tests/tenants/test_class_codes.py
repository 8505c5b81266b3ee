"""Class codes are typed by people, in the case pages show them ("ML-101"): every place a
teacher or admin types one finds the class whatever its letter case. Member lists sort
naturally (student2 before student10)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from core.text import natural_sort_key
from tenants import services
from tenants.models import Membership

pytestmark = pytest.mark.django_db
User = get_user_model()


def upload(client: Any, text: str) -> Any:
    return client.post(
        "/api/v1/roster-import/",
        {"file": SimpleUploadedFile("roster.csv", text.encode())},
        format="multipart",
    )


def test_a_roster_whose_class_column_says_ML_101_imports_into_ml_101(world, api) -> None:
    roster = "student_number,name,email,class\ns1001,Ann Lee,ann@uni.example,ML-101\n"

    response = upload(api(world.alice), roster)

    assert response.status_code == 200, response.content
    assert response.json()["created_memberships"] == ["s1001 → ml-101 (student)"]
    assert Membership.objects.get(user__username="s1001").tenant == world.class_a


def test_an_outsider_typing_the_code_in_capitals_still_manages_nothing(world, api) -> None:
    roster = "student_number,name,email,class\ns1001,Ann Lee,ann@uni.example,ML-101\n"

    response = upload(api(world.charlie), roster)

    assert response.status_code == 403
    response = upload(api(world.bob), roster)  # a student of the class
    assert response.status_code == 403
    assert not User.objects.filter(username="s1001").exists()


def test_the_api_finds_a_class_by_its_code_in_any_case(world, api) -> None:
    alice = api(world.alice)
    assert api(world.charlie).get("/api/v1/tenants/ML-101/").status_code == 404  # outsider

    assert alice.get("/api/v1/tenants/ML-101/").json()["slug"] == "ml-101"
    assert {
        m["user"] for m in alice.get("/api/v1/memberships/?tenant=ML-101").json()["results"]
    } >= {
        "alice",
        "bob",
    }
    added = alice.post(
        "/api/v1/memberships/",
        {"user": "charlie", "tenant": "ML-101", "role": "student"},
        format="json",
    )
    assert added.status_code == 201, added.content
    assert added.json()["tenant"] == "ml-101"


def test_a_code_that_differs_only_in_case_is_taken(world, api) -> None:
    response = api(world.dean).post(
        "/api/v1/tenants/",
        {"kind": "class", "name": "ML-101 again", "slug": "ML-101", "parent": "CS"},
        format="json",
    )

    assert response.status_code == 400
    assert "already used" in str(response.json()["slug"])


def test_the_teaching_page_opens_under_the_code_in_capitals(world, client: Client) -> None:
    client.force_login(world.alice)

    assert client.get("/teaching/ML-101/").status_code == 200
    client.force_login(world.charlie)
    assert client.get("/teaching/ML-101/").status_code in (403, 404)


# -- natural order -----------------------------------------------------------------------


def test_natural_sort_key_orders_numbers_by_value() -> None:
    names = ["student10", "student2", "Student1", "student11", "ta", "student1b"]

    assert sorted(names, key=natural_sort_key) == [
        "Student1",
        "student1b",
        "student2",
        "student10",
        "student11",
        "ta",
    ]


@pytest.fixture
def numbered_students(world) -> list[str]:
    names = ["student10", "student2", "student1", "student11"]
    for name in names:
        user = User.objects.create_user(username=name)
        services.set_membership(actor=world.root, tenant=world.class_a, user=user, role="student")
    return names


def test_members_are_listed_in_natural_order_in_the_api(world, api, numbered_students) -> None:
    listed = [
        m["user"]
        for m in api(world.alice).get("/api/v1/memberships/?tenant=ml-101").json()["results"]
    ]
    students = [name for name in listed if name.startswith("student")]
    assert students == ["student1", "student2", "student10", "student11"]

    users = [u["username"] for u in api(world.alice).get("/api/v1/users/").json()["results"]]
    assert [u for u in users if u.startswith("student")] == students


def test_members_are_listed_in_natural_order_on_the_class_page(
    world, client: Client, numbered_students
) -> None:
    client.force_login(world.alice)
    page = client.get("/teaching/ml-101/").content.decode()

    positions = [page.index(f"<td>{name}") for name in ("student1", "student2", "student10")]
    assert positions == sorted(positions)
    assert page.index("<td>student10") < page.index("<td>student11")


def test_renaming_a_user_keeps_the_sort_key_in_step(world) -> None:
    user = User.objects.create_user(username="student3")
    user.username = "student30"
    user.save(update_fields=["username"])

    user.refresh_from_db()
    assert user.sort_key == natural_sort_key("student30")
