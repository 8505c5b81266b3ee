"""Account pages: sign in, home, password change, tokens."""

import pytest

pytestmark = pytest.mark.django_db


def test_signing_in_with_a_password_lands_on_home(world, client) -> None:
    response = client.post("/login/", {"username": "bob", "password": "pw-bob"}, follow=True)
    assert response.status_code == 200
    assert b"ML-101" in response.content and b"Student" in response.content


def test_a_wrong_password_is_refused(world, client) -> None:
    response = client.post("/login/", {"username": "bob", "password": "nope"})
    assert response.status_code == 200 and b"correct username and password" in response.content
    assert client.get("/").status_code == 302


def test_home_requires_sign_in(client) -> None:
    response = client.get("/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_a_teacher_sees_what_they_manage(world, client) -> None:
    client.force_login(world.alice)
    page = client.get("/").content.decode()
    assert "What you manage" in page and "Import a roster" in page
    client.force_login(world.bob)
    assert "What you manage" not in client.get("/").content.decode()


def test_changing_the_password_keeps_the_person_signed_in(world, client) -> None:
    client.force_login(world.bob)
    response = client.post(
        "/account/password/",
        {
            "old_password": "pw-bob",
            "new_password1": "a-much-longer-pass-42",
            "new_password2": "a-much-longer-pass-42",
        },
        follow=True,
    )
    assert b"Password changed" in response.content
    world.bob.refresh_from_db()
    assert world.bob.check_password("a-much-longer-pass-42")


def test_the_tokens_page_shows_a_new_secret_once(world, client) -> None:
    client.force_login(world.bob)
    created = client.post("/account/tokens/", {"name": "laptop"}).content.decode()
    assert "qnt_" in created and "shown only once" in created
    listing = client.get("/account/tokens/").content.decode()
    assert "laptop" in listing and "shown only once" not in listing


def test_one_cannot_revoke_another_persons_token(world, client) -> None:
    from tenants.services import create_api_token

    token, _ = create_api_token(actor=world.bob, name="laptop")
    client.force_login(world.charlie)
    assert client.post(f"/account/tokens/{token.pk}/revoke/").status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None


def test_django_admin_is_for_superusers_only(world, client) -> None:
    world.dean.is_staff = True
    world.dean.save()
    client.force_login(world.dean)
    assert client.get("/admin/").status_code == 302
    client.force_login(world.root)
    assert client.get("/admin/").status_code == 200
    assert client.get("/admin/tenants/tenant/").status_code == 200
