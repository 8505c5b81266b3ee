"""Request limits at the edge, and per-person language and time zone."""

from __future__ import annotations

import zoneinfo
from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from django.http import HttpRequest, HttpResponse
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from core.limits import MAX_BODY_BYTES, MAX_QUERY_STRING_BYTES, MAX_UPLOAD_BYTES
from core.text import first_unstorable
from portal.errors import error, is_api, too_large

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


class RequestLimitsMiddleware:
    """First in the chain: refuse what no view should see, before sessions or queries.

    - a query string over ``MAX_QUERY_STRING_BYTES``: 414 (daphne itself drops a request
      line over 16 KiB; see portal/asgi.py);
    - a declared body over ``MAX_BODY_BYTES`` (``MAX_UPLOAD_BYTES`` for multipart): 413;
    - a NUL character or lone surrogate in the path, a query parameter or a page's form
      post: 400 naming where (the API's parsers check the bodies they parse, core.parsers).

    Under /api/ the answer is ``{"detail": ...}`` JSON, as the API's own errors.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        refusal = self.refusal(request)
        return refusal if refusal is not None else self.get_response(request)

    def refusal(self, request: HttpRequest) -> HttpResponse | None:
        if len(request.META.get("QUERY_STRING", "")) > MAX_QUERY_STRING_BYTES:
            return error(
                request,
                414,
                _("The query string is longer than %(n)s bytes.") % {"n": MAX_QUERY_STRING_BYTES},
            )
        content_type = request.content_type or ""
        limit = MAX_UPLOAD_BYTES if content_type == "multipart/form-data" else MAX_BODY_BYTES
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > limit:
            return too_large(request)
        found = first_unstorable(request.path_info)
        if found is not None:
            return error(request, 400, _("The path contains %(what)s.") % {"what": found[1]})
        found = first_unstorable({key: request.GET.getlist(key) for key in request.GET})
        if found is not None:
            where, what = found
            name = where.split(".", 1)[0]
            return error(
                request,
                400,
                _("The query parameter %(name)s contains %(what)s.") % {"name": name, "what": what},
                **{name: [what]},
            )
        if request.method == "POST" and content_type in FORM_TYPES and not is_api(request):
            try:
                found = first_unstorable({key: request.POST.getlist(key) for key in request.POST})
            except RequestDataTooBig:
                return too_large(request)
            except TooManyFieldsSent:
                return error(request, 400, _("The form has too many fields."))
            if found is not None:
                return error(
                    request,
                    400,
                    _("The field %(name)s contains %(what)s.")
                    % {"name": found[0].split(".", 1)[0], "what": found[1]},
                )
        return None


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
