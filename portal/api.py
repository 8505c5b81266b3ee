"""API plumbing shared by every app: the error format and the audit log endpoint."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from rest_framework import serializers, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from core.models import AuditEvent
from tenants.models import Tenant, User
from tenants.permissions import Access


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Service functions raise Django's ValidationError; the API answers 400 naming the field."""
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"detail": exc.messages}
        exc = ValidationError(detail)
    return drf_exception_handler(exc, context)


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
