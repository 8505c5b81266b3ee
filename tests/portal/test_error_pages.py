"""With DEBUG off (the default), errors answer with the portal's own pages in the reader's
language: never Django's debug page with its list of every URL, never a bare line of text."""

from __future__ import annotations

from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.urls import path

from portal import urls as portal_urls

pytestmark = pytest.mark.django_db

DEBUG_PAGE = ("Using the URLconf", "Django tried these URL patterns", "Traceback")


@pytest.fixture(autouse=True)
def _debug_off(settings: Any) -> None:
    settings.DEBUG = False


def assert_styled(response: Any, status: int, *words: str) -> str:
    body = response.content.decode()
    assert response.status_code == status
    assert response["Content-Type"].startswith("text/html")
    assert 'data-role="error-page"' in body
    assert not any(marker in body for marker in DEBUG_PAGE)
    for word in words:
        assert word in body, word
    return body


def test_a_page_that_does_not_exist_is_the_styled_404_in_english(client) -> None:
    body = assert_styled(client.get("/no-such-page/"), 404, "Page not found", "Go to the home page")
    assert '<html lang="en">' in body and "quanta" in body.lower()
    assert "admin/" not in body  # no URL patterns listed


def test_a_page_that_does_not_exist_is_the_styled_404_in_chinese(client) -> None:
    response = client.get("/no-such-page/", HTTP_ACCEPT_LANGUAGE="zh-hans")
    body = assert_styled(response, 404, "找不到这个页面", "回到首页")
    assert '<html lang="zh-hans">' in body and "Page not found" not in body


def test_a_student_on_an_admin_page_gets_the_styled_403_with_why(client, world) -> None:
    client.force_login(world.bob)
    assert_styled(client.get("/console/"), 403, "Not allowed", "Only platform administrators")
    body = assert_styled(client.get("/console/", HTTP_ACCEPT_LANGUAGE="zh-hans"), 403, "无权访问")
    assert "Not allowed" not in body


def test_the_api_still_answers_errors_in_json(client) -> None:
    response = client.get("/api/v1/no-such-thing/")
    assert response.status_code == 404 and response.json() == {"detail": "Not found."}


# -- 500: this module is the URLconf of the test below (the portal's, plus a view that fails) --


def broken(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a bug")


urlpatterns = [path("broken/", broken), *portal_urls.urlpatterns]
handler404 = portal_urls.handler404
handler500 = portal_urls.handler500


@pytest.mark.urls(__name__)
@pytest.mark.parametrize(
    ("language", "words"),
    [("en", "Something went wrong"), ("zh-hans", "出错了")],
)
def test_a_failing_page_is_the_standalone_500_in_the_readers_language(
    client, language, words
) -> None:
    client.raise_request_exception = False
    response = client.get("/broken/", HTTP_ACCEPT_LANGUAGE=language)
    body = assert_styled(response, 500, words)
    assert f'<html lang="{language}">' in body
    assert "a bug" not in body and "RuntimeError" not in body
