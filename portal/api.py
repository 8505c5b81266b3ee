"""API plumbing shared by every app: the error format and the audit log endpoint."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import ProtectedError, QuerySet, RestrictedError
from django.utils.text import capfirst
from django.utils.translation import gettext as _
from rest_framework import serializers, viewsets
from rest_framework.exceptions import APIException, ParseError, ValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from core.models import AuditEvent
from tenants.models import Tenant, User
from tenants.permissions import Access


class InUse(APIException):
    status_code = 409
    default_code = "in_use"


class TooLarge(APIException):
    status_code = 413
    default_code = "request_too_large"


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """The API's error format, ``{"field": [...]}`` or ``{"detail": ...}``, for every refusal:

    - service functions raise Django's ValidationError: 400 naming the field;
    - a delete of something still in use (a PROTECT or RESTRICT foreign key): 409 naming
      what uses it, ``{"detail": ..., "used_by": {"workloads": 3}}``; the service's
      transaction is rolled back, so nothing (not the audit row) is written;
    - a body Django refuses while reading it: 413 when too large, else 400.
    """
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"detail": exc.messages}
        exc = ValidationError(detail)
    elif isinstance(exc, ProtectedError | RestrictedError):
        response = drf_exception_handler(InUse(in_use_detail(exc, _subject(context))), context)
        if response is not None:
            response.data["used_by"] = used_by(exc)
        return response
    elif isinstance(exc, RequestDataTooBig):
        exc = TooLarge(_("The request body is too large."))
    elif isinstance(exc, SuspiciousOperation):
        exc = ParseError(_("Bad request."))
    return drf_exception_handler(exc, context)


def _blocking(exc: ProtectedError | RestrictedError) -> set[Any]:
    return exc.protected_objects if isinstance(exc, ProtectedError) else exc.restricted_objects


def used_by(exc: ProtectedError | RestrictedError) -> dict[str, int]:
    """How many of each kind of thing hold on to what was to be deleted (counts only: the
    objects themselves may be other people's)."""
    counts: dict[str, int] = {}
    for obj in _blocking(exc):
        name = str(obj._meta.verbose_name_plural)
        counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items()))


def _subject(context: dict[str, Any]) -> str:
    """What the request was deleting, as its URL names it (``ml-101``)."""
    view = context.get("view")
    kwargs = getattr(view, "kwargs", None) or {}
    key = getattr(view, "lookup_url_kwarg", None) or getattr(view, "lookup_field", "pk")
    return str(kwargs.get(key, "")) or _("it")


def in_use_detail(exc: ProtectedError | RestrictedError, subject: str) -> str:
    uses = ", ".join(
        # The word is chosen here (the model's name for one, the relation's for more): one
        # message for every language, whatever its plural forms.
        _("%(n)s %(what)s") % {"n": n, "what": _model_name(exc, name, 1) if n == 1 else name}
        for name, n in used_by(exc).items()
    )
    return capfirst(
        _("%(subject)s is still used by %(uses)s; it cannot be deleted")
        % {"subject": subject, "uses": uses}
    )


def _model_name(exc: ProtectedError | RestrictedError, plural: str, n: int) -> str:
    for obj in _blocking(exc):
        if str(obj._meta.verbose_name_plural) == plural:
            return str(obj._meta.verbose_name)
    return plural


class AuditEventSerializer(serializers.ModelSerializer[AuditEvent]):
    actor: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    tenant: serializers.SlugRelatedField[Tenant] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )

    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "time",
            "actor",
            "action",
            "target_type",
            "target_id",
            "target_repr",
            "tenant",
            "data",
        ]
        read_only_fields = fields


class AuditEventViewSet(viewsets.ReadOnlyModelViewSet[AuditEvent]):
    """The audit log: admins see their subtree's events, everyone their own actions."""

    queryset = AuditEvent.objects.none()  # for the schema; requests use get_queryset
    serializer_class = AuditEventSerializer
    filterset_fields = ["action", "target_type", "target_id"]
    ordering_fields = ["time"]

    def get_queryset(self) -> QuerySet[AuditEvent]:
        return AuditEvent.objects.visible_to(Access.of(self.request.user))
