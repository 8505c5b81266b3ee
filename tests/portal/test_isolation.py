"""Nothing of class A reaches anyone outside it, whatever path of the API they open.

Every path of the OpenAPI schema is opened (lists, and details with the ids of class A's
objects; list filters pointed at class A) by charlie (a student of class B), tara (a TA of
class B), tom (who teaches class B) and an anonymous visitor, as JSON and as the browsable
API's HTML (``Accept: text/html``, session cookie). No response may contain one of class A's
"secrets": its people's usernames, names and emails, its job, its token, its name and slug.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from core.models import AuditEvent

pytestmark = pytest.mark.django_db

OUTSIDERS = ["charlie", "tara", "tom", None]
_INPUT_VALUE = re.compile(r'(<input\b[^>]*?)\svalue="[^"]*"')
_API_URL = re.compile(r"(https?://testserver)?/api/v1/[^\s\"'<>]*")
FILTERS = "?within=ml-101&tenant=ml-101&tenant__slug=ml-101&user=bob&owner__username=bob"


def _ids(class_a: Any) -> dict[str, str]:
    """The id (or slug) to put in a detail URL, by the path's first segment."""
    w = class_a.world
    event = AuditEvent.objects.filter(tenant=w.class_a).first()
    assert event is not None
    return {
        "tenants": w.class_a.slug,
        "memberships": str(class_a.membership.pk),
        "users": str(w.bob.pk),
        "tokens": str(class_a.token.pk),
        "grants": str(class_a.catalog.grant.pk),
        "workloads": str(class_a.job.pk),
        "audit-events": str(event.pk),
        "images": class_a.catalog.image.slug,
        "flavors": class_a.catalog.small.slug,
        "templates": class_a.catalog.jupyter.slug,
        "clusters": class_a.catalog.cluster.slug,
        "nodes": str(class_a.catalog.node.pk),
        "gpus": str(class_a.catalog.gpus[0].pk),
    }


def _urls(class_a: Any) -> list[str]:
    schema = Client().get("/api/schema/", {"format": "json"}).json()
    ids = _ids(class_a)
    urls = []
    for path, operations in schema["paths"].items():
        if "get" not in operations and "post" not in operations:
            continue
        first = path.removeprefix("/api/v1/").split("/", 1)[0]
        url = re.sub(r"\{[^}]+\}", ids.get(first, "1"), path)
        urls.append(url)
        if "{" not in path:
            urls.append(url + FILTERS)
    return sorted(set(urls))


def _client(class_a: Any, name: str | None) -> Client:
    client = Client()
    if name is not None:
        user = getattr(class_a, name, None) or getattr(class_a.world, name)
        client.force_login(user)
    return client


@pytest.mark.parametrize("outsider", OUTSIDERS, ids=lambda n: n or "anonymous")
@pytest.mark.parametrize("accept", ["application/json", "text/html"])
def test_no_path_shows_an_outsider_anything_of_class_a(
    class_a: Any, outsider: str | None, accept: str
) -> None:
    client = _client(class_a, outsider)
    secrets = [*class_a.secrets(), "alice", "bob"]
    leaks = []
    urls = _urls(class_a)
    assert len(urls) > 40  # the walk really walks the API
    for url in urls:
        response = client.get(url, HTTP_ACCEPT=accept)
        assert response.status_code < 500, url
        # The page repeats the URL asked for (breadcrumbs, format links): our own words.
        # The filter form holds the values we typed (<input value="ml-101">); a dropdown
        # (<option value=...>) is not stripped: listing objects is what must not happen.
        body = _API_URL.sub("", response.content.decode())
        body = _INPUT_VALUE.sub(r"\1", body)
        # Words, not substrings: "bob" is not in "bobbin", but it is in '"bob"' or ">bob<".
        found = [s for s in secrets if re.search(rf"(?<![\w-]){re.escape(s)}(?![\w-])", body)]
        if found:
            leaks.append(f"{url} ({response.status_code}): {found}")
    assert not leaks, "\n".join(leaks)


def test_the_walk_finds_the_secrets_where_they_belong(class_a: Any) -> None:
    """The check itself: alice, inside class A, does see them."""
    client = _client(class_a, "alice")
    body = client.get("/api/v1/memberships/", HTTP_ACCEPT="application/json").content.decode()
    assert "bob" in body and "ml-101" in body
