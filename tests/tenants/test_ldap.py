"""Campus sign-in through LDAP, against a real OpenLDAP slapd the tests start (directory.py).

The sign-in form's username and password go to Quanta's LDAP backend, which searches the
directory as a service account, binds as the entry it found with the password, and
provisions the account the same way OIDC does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tenants.models import Membership
from tests.tenants import directory
from tests.tenants.campus import signed_in_as

pytestmark = [
    pytest.mark.skipif(bool(directory.missing()), reason=directory.missing() or ""),
    pytest.mark.django_db,
]
User = get_user_model()


@pytest.fixture(scope="module")
def slapd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[directory.Directory]:
    server = directory.Directory(Path(tmp_path_factory.mktemp("slapd")))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def campus_ldap(slapd: directory.Directory, settings: Any, world: Any) -> Any:
    settings.LDAP_ENABLED = True
    settings.LDAP_URL = slapd.url
    settings.LDAP_BIND_DN = directory.SEARCH_DN
    settings.LDAP_BIND_PASSWORD = directory.SEARCH_PASSWORD
    settings.LDAP_USER_SEARCH_BASE = directory.PEOPLE
    settings.LDAP_USER_FILTER = "(uid={username})"
    settings.LDAP_USERNAME_ATTRIBUTE = "uid"
    settings.LDAP_NAME_ATTRIBUTE = "cn"
    settings.LDAP_EMAIL_ATTRIBUTE = "mail"
    settings.LDAP_STUDENT_NUMBER_ATTRIBUTE = "employeeNumber"
    settings.LDAP_ROLE_ATTRIBUTE = "employeeType"
    settings.LDAP_TIMEOUT = 3
    settings.CAMPUS_TEACHER_VALUES = ["faculty", "teacher"]
    settings.CAMPUS_ROLE_TENANT = world.dept.slug
    settings.AUTHENTICATION_BACKENDS = [
        *settings.AUTHENTICATION_BACKENDS,
        "tenants.auth.CampusLDAPBackend",
    ]
    return world


def sign_in(client: Client, username: str, password: str) -> Any:
    return client.post("/login/", {"username": username, "password": password})


def test_the_sign_in_page_offers_the_campus_account_only_when_ldap_is_on(
    client: Client, campus_ldap: Any, settings: Any
) -> None:
    assert "Campus account" in client.get("/login/").content.decode()
    settings.LDAP_ENABLED = False
    assert "Campus account" not in client.get("/login/").content.decode()


def test_a_student_signs_in_with_the_campus_password_and_fields_and_role_are_mapped(
    client: Client, campus_ldap: Any
) -> None:
    response = sign_in(client, "2024001", "ada-campus-pw")

    assert response.status_code == 302, response.content.decode()
    assert signed_in_as(client) == "2024001"
    ada = User.objects.get(username="2024001")
    assert (ada.display_name, ada.email, ada.student_number) == (
        "Ada Lovelace",
        "ada@campus.example",
        "2024001",
    )
    assert not ada.has_usable_password()
    assert Membership.objects.get(user=ada).role == "student"


def test_a_teacher_is_mapped_to_the_teacher_role_whatever_case_they_type(
    client: Client, campus_ldap: Any
) -> None:
    assert sign_in(client, "T.Turing", "turing-campus-pw").status_code == 302
    turing = User.objects.get(username="t.turing")
    assert turing.student_number == "T0042"
    membership = Membership.objects.get(user=turing)
    assert (membership.tenant, membership.role) == (campus_ldap.dept, "teacher")


def test_a_wrong_password_is_refused_with_a_message(client: Client, campus_ldap: Any) -> None:
    response = sign_in(client, "2024001", "not-the-password")

    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.content.decode()
    assert signed_in_as(client) is None
    assert not User.objects.filter(username="2024001").exists()


def test_an_unknown_person_is_refused(client: Client, campus_ldap: Any) -> None:
    response = sign_in(client, "nobody", "whatever-pw")

    assert "Please enter a correct username and password" in response.content.decode()
    assert signed_in_as(client) is None


def test_a_filter_injection_in_the_username_finds_nobody(client: Client, campus_ldap: Any) -> None:
    response = sign_in(client, "*", "ada-campus-pw")

    assert response.status_code == 200
    assert signed_in_as(client) is None


def test_a_directory_that_is_down_gives_a_message_not_a_server_error(
    client: Client, campus_ldap: Any, settings: Any
) -> None:
    settings.LDAP_URL = f"ldap://127.0.0.1:{directory._free_port()}"  # nothing listens

    response = sign_in(client, "2024001", "ada-campus-pw")

    assert response.status_code == 200
    assert "campus directory cannot be reached" in response.content.decode()
    assert signed_in_as(client) is None


def test_local_accounts_still_sign_in_while_the_directory_is_down(
    client: Client, campus_ldap: Any, settings: Any
) -> None:
    settings.LDAP_URL = f"ldap://127.0.0.1:{directory._free_port()}"

    assert sign_in(client, "bob", "pw-bob").status_code == 302
    assert signed_in_as(client) == "bob"


def test_a_directory_entry_does_not_take_over_a_local_account(
    client: Client, campus_ldap: Any
) -> None:
    response = sign_in(client, "alice", "impostor-pw")

    assert response.status_code == 200
    assert "local account" in response.content.decode()
    assert signed_in_as(client) is None
    alice = User.objects.get(username="alice")
    assert (alice.email, alice.display_name) == ("alice@uni.example", "")
    # …and alice's own password still works.
    assert sign_in(client, "alice", "pw-alice").status_code == 302
    assert signed_in_as(client) == "alice"


def test_a_roster_imported_student_lands_in_the_imported_account(
    client: Client, campus_ldap: Any, api: Any
) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    roster = "student_number,name,email,class\n2024001,Ada L.,ada@campus.example,ml-101\n"
    upload = api(campus_ldap.alice).post(
        "/api/v1/roster-import/",
        {"file": SimpleUploadedFile("roster.csv", roster.encode())},
        format="multipart",
    )
    assert upload.status_code == 200, upload.content

    assert sign_in(client, "2024001", "ada-campus-pw").status_code == 302

    ada = User.objects.get(username="2024001")
    assert ada.display_name == "Ada Lovelace"  # the directory's name wins at sign-in
    assert set(Membership.objects.filter(user=ada).values_list("tenant__slug", flat=True)) == {
        "ml-101",
        "cs",
    }


def test_the_role_rule_never_changes_a_membership_that_exists(
    client: Client, campus_ldap: Any
) -> None:
    from tenants import services

    turing = User.objects.create_user(username="t.turing")  # no password: a campus account
    services.set_membership(actor=campus_ldap.root, tenant=campus_ldap.dept, user=turing, role="ta")

    assert sign_in(client, "t.turing", "turing-campus-pw").status_code == 302

    assert Membership.objects.get(user=turing, tenant=campus_ldap.dept).role == "ta"


@pytest.fixture(scope="module")
def open_slapd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[directory.Directory]:
    server = directory.Directory(Path(tmp_path_factory.mktemp("slapd")), anonymous_search=True)
    server.start()
    yield server
    server.stop()


def test_without_a_search_account_the_directory_is_searched_anonymously(
    client: Client, campus_ldap: Any, open_slapd: directory.Directory, settings: Any
) -> None:
    settings.LDAP_URL = open_slapd.url
    settings.LDAP_BIND_DN = ""
    settings.LDAP_BIND_PASSWORD = ""

    assert sign_in(client, "2024001", "wrong").status_code == 200
    assert sign_in(client, "2024001", "ada-campus-pw").status_code == 302
    assert signed_in_as(client) == "2024001"


def test_a_directory_that_hides_people_from_anonymous_search_finds_nobody(
    client: Client, campus_ldap: Any, settings: Any
) -> None:
    settings.LDAP_BIND_DN = ""  # the closed directory lets only its search account read

    response = sign_in(client, "2024001", "ada-campus-pw")

    assert "Please enter a correct username and password" in response.content.decode()
    assert signed_in_as(client) is None


def test_the_directory_down_message_is_translated(
    client: Client, campus_ldap: Any, settings: Any
) -> None:
    settings.LDAP_URL = f"ldap://127.0.0.1:{directory._free_port()}"
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"

    page = sign_in(client, "2024001", "ada-campus-pw").content.decode()

    assert "校园账号" in page
    assert "暂时无法连接校园目录服务" in page
