"""What the campus sign-in tests (LDAP, CAS) share."""

from __future__ import annotations

from django.test import Client


def signed_in_as(client: Client) -> str | None:
    """The username the client's session belongs to, or None when signed out."""
    me = client.get("/api/v1/users/me/")
    return me.json()["username"] if me.status_code == 200 else None
