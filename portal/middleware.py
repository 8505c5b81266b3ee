"""Per-person language and time zone: what a signed-in person chose applies on every page."""

from __future__ import annotations

import zoneinfo
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone, translation


class UserPreferencesMiddleware:
    """After authentication: activate the person's language and time zone, if they set them.

    Without a choice, the language comes from the language cookie or the browser
    (LocaleMiddleware) and the time zone is TIME_ZONE.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            if user.language and user.language in dict(settings.LANGUAGES):
                translation.activate(user.language)
                request.LANGUAGE_CODE = user.language
            if user.time_zone:
                try:
                    timezone.activate(zoneinfo.ZoneInfo(user.time_zone))
                except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                    timezone.deactivate()
        response = self.get_response(request)
        timezone.deactivate()
        return response
