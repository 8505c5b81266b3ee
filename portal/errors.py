"""Error answers outside the views: JSON in the API's format under /api/, the usual pages
elsewhere (``handler400`` … in portal/urls.py, and the request limits' middleware)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.translation import gettext as _
from django.views import defaults

from core.limits import MAX_BODY_BYTES


def is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith("/api/")


def error(request: HttpRequest, status: int, detail: str, **extra: Any) -> HttpResponse:
    """``{"detail": …}`` under /api/ (as the API's exception handler answers), else text."""
    if is_api(request):
        return JsonResponse({"detail": detail, **extra}, status=status)
    return HttpResponse(detail, status=status, content_type="text/plain; charset=utf-8")


def too_large(request: HttpRequest) -> HttpResponse:
    return error(
        request, 413, _("The request body is larger than %(n)s bytes.") % {"n": MAX_BODY_BYTES}
    )


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if isinstance(exception, RequestDataTooBig):
        return too_large(request)
    if is_api(request):
        return error(request, 400, _("Bad request."))
    return defaults.bad_request(request, exception)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if is_api(request):
        return error(request, 403, _("You do not have permission to perform this action."))
    return defaults.permission_denied(request, exception)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if is_api(request):
        return error(request, 404, _("Not found."))
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if is_api(request):
        return error(request, 500, _("Server error."))
    return defaults.server_error(request)
