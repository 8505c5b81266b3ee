"""The request type of views that only a signed-in person reaches."""

from __future__ import annotations

from django.http import HttpRequest

from tenants.models import User


class AuthenticatedHttpRequest(HttpRequest):
    """An ``HttpRequest`` behind ``login_required`` (or a stricter guard): its user is a
    ``User``, never ``AnonymousUser``. For annotations only: Django still builds plain
    ``HttpRequest`` objects; this only tells the type checker what the guard guarantees."""

    user: User
