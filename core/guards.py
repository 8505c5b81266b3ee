"""Page guards and what every console page's sub-navigation needs. Role questions (who
administers what) are ``tenants.permissions.Access``'s; these need only the user."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.utils.translation import gettext as _

View = Callable[..., HttpResponse]


def superuser_required(view: View) -> View:
    """Signed in (else the sign-in page) and a superuser (else 403)."""

    @functools.wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_superuser:
            raise PermissionDenied(_("Only platform administrators see this page."))
        return view(request, *args, **kwargs)

    return login_required(guarded)


def console_context(request: HttpRequest, section: str) -> dict[str, Any]:
    """What every console page's sub-navigation needs."""
    return {"section": section, "is_operator": request.user.is_superuser}
