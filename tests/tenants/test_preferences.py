"""A person's language and time zone follow them from page to page."""

import pytest

pytestmark = pytest.mark.django_db


def test_the_language_switch_is_kept_with_the_account(world, client) -> None:
    client.force_login(world.bob)
    response = client.post("/account/language/", {"language": "zh-hans", "next": "/apps/"})
    assert response.status_code == 302 and response["Location"] == "/apps/"
    world.bob.refresh_from_db()
    assert world.bob.language == "zh-hans"
    other_browser = type(client)()
    other_browser.force_login(world.bob)
    assert '<html lang="zh-hans">' in other_browser.get("/").content.decode()


def test_an_anonymous_switch_sets_the_cookie_only(client) -> None:
    response = client.post("/account/language/", {"language": "zh-hans", "next": "/login/"})
    assert response.cookies["django_language"].value == "zh-hans"
    assert '<html lang="zh-hans">' in client.get("/login/").content.decode()


def test_the_switch_never_redirects_off_site(client) -> None:
    response = client.post(
        "/account/language/", {"language": "en", "next": "https://evil.example/"}
    )
    assert response["Location"] == "/"


def test_an_unknown_time_zone_is_a_form_error(world, client) -> None:
    client.force_login(world.bob)
    page = client.post("/account/", {"time_zone": "Mars/Olympus", "language": ""})
    assert "Unknown time zone Mars/Olympus" in page.content.decode()
    world.bob.refresh_from_db()
    assert world.bob.time_zone == ""


def test_times_are_shown_in_the_persons_time_zone(world, client) -> None:
    import zoneinfo

    from django.utils import formats, timezone

    from tenants.services import create_api_token

    client.force_login(world.bob)
    client.post("/account/", {"time_zone": "Asia/Shanghai", "language": "", "display_name": "Bob"})
    world.bob.refresh_from_db()
    assert world.bob.time_zone == "Asia/Shanghai"
    token, _ = create_api_token(actor=world.bob, name="laptop")

    def shown_in(zone: str) -> str:
        local = timezone.localtime(token.created_at, zoneinfo.ZoneInfo(zone))
        return formats.date_format(local, "SHORT_DATETIME_FORMAT")

    page = client.get("/account/tokens/").content.decode()
    assert shown_in("Asia/Shanghai") in page
    assert shown_in("UTC") not in page
