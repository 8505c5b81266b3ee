"""The notices API (``/api/v1/notices/``): one's own notices, newest first, each with its
reason code, parameters and English text (as workloads' reasons), and ``read`` to mark one
read (``POST /api/v1/notices/read/`` marks them all). Nobody sees another person's."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from core import notices
from core.models import Notice

READ = inline_serializer("NoticesRead", {"read": serializers.IntegerField()})


class NoticeSerializer(serializers.ModelSerializer[Notice]):
    class Meta:
        model = Notice
        fields = [
            "id",
            "level",
            "reason_code",
            "reason_params",
            "text",
            "link",
            "created_at",
            "read_at",
        ]
        read_only_fields = fields


class NoticeViewSet(viewsets.ReadOnlyModelViewSet[Notice]):
    """Your notices (``?unread=true``: those not read yet)."""

    queryset = Notice.objects.none()  # for the schema; requests use get_queryset
    serializer_class = NoticeSerializer

    def get_queryset(self) -> QuerySet[Notice]:
        found = Notice.objects.filter(Q(user_id=self.request.user.pk))
        if self.request.query_params.get("unread") in ("true", "1"):
            found = found.filter(read_at__isnull=True)
        return found.order_by("-created_at", "-id")

    @extend_schema(request=None, responses={200: READ}, operation_id="notices_read_one")
    @action(detail=True, methods=["post"], url_path="read")
    def read_one(self, request: Request, pk: Any = None) -> Response:
        notice = self.get_object()
        return Response({"read": notices.mark_read(actor=request.user, ids=[notice.pk])})

    @extend_schema(request=None, responses={200: READ}, operation_id="notices_read_all")
    @action(detail=False, methods=["post"], url_path="read")
    def read_all(self, request: Request) -> Response:
        return Response({"read": notices.mark_read(actor=request.user)})
