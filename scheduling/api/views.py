"""Admin API for clusters, nodes, GPUs, queues and priority classes.

Reading is open to people who manage a tenant (teachers and admins plan with it); changing is
for superusers, the platform's operators. Every change is audited.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, permissions, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from core.parsers import StrictFormParser, StrictJSONParser, StrictMultiPartParser
from scheduling import services, whatif
from scheduling.api import serializers as s
from scheduling.models import Cluster, GpuDevice, Node, PriorityClass, Queue, WhatIfRun
from tenants.permissions import Access


class OperatorsChange(permissions.BasePermission):
    """Managers read, superusers change."""

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        if request.method in permissions.SAFE_METHODS:
            return Access.of(user).manages_anything()
        return bool(user.is_superuser)


class _Audited(viewsets.GenericViewSet):
    """Changes go through ``scheduling.services``: one transaction, an audit row each."""

    permission_classes = [OperatorsChange]


class ClusterViewSet(_Audited, viewsets.ModelViewSet[Cluster]):
    queryset = Cluster.objects.all()
    serializer_class = s.ClusterSerializer
    lookup_field = "slug"

    def perform_create(self, serializer: BaseSerializer[Cluster]) -> None:
        serializer.instance = services.create_cluster(
            actor=self.request.user, **serializer.validated_data
        )

    def perform_update(self, serializer: BaseSerializer[Cluster]) -> None:
        cluster = serializer.instance
        assert cluster is not None  # an update's serializer is built with get_object()
        serializer.instance = services.update_cluster(
            actor=self.request.user, cluster=cluster, **serializer.validated_data
        )

    def perform_destroy(self, instance: Cluster) -> None:
        services.delete_cluster(actor=self.request.user, cluster=instance)


def _devices() -> QuerySet[GpuDevice]:
    return GpuDevice.objects.with_allocated()


class NodeViewSet(
    _Audited, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.UpdateModelMixin
):
    """Nodes with what is allocated on them and their GPUs; labels and taints editable,
    cordon / uncordon as actions."""

    serializer_class = s.NodeSerializer
    filterset_fields = ["cluster__slug", "cordoned"]
    queryset = Node.objects.none()

    def get_queryset(self) -> QuerySet[Node]:
        return Node.objects.with_allocations()

    def perform_update(self, serializer: BaseSerializer[Node]) -> None:
        node = serializer.instance
        assert node is not None  # an update's serializer is built with get_object()
        serializer.instance = services.update_node(
            actor=self.request.user, node=node, **serializer.validated_data
        )

    def _fresh(self, node: Node) -> Response:
        return Response(self.get_serializer(self.get_queryset().get(pk=node.pk)).data)

    @extend_schema(request=None, responses=s.NodeSerializer)
    @action(detail=True, methods=["post"])
    def cordon(self, request: Request, pk: str) -> Response:
        """Nothing new lands on the node; what runs there keeps running."""
        return self._fresh(services.cordon(actor=request.user, node=self.get_object()))

    @extend_schema(request=None, responses=s.NodeSerializer)
    @action(detail=True, methods=["post"])
    def uncordon(self, request: Request, pk: str) -> Response:
        return self._fresh(services.uncordon(actor=request.user, node=self.get_object()))


class GpuDeviceViewSet(
    _Audited, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.UpdateModelMixin
):
    serializer_class = s.GpuDeviceSerializer
    filterset_fields = ["node__cluster__slug", "model", "sharing"]
    queryset = GpuDevice.objects.none()

    def get_queryset(self) -> QuerySet[GpuDevice]:
        return (
            _devices()
            .filter(node__gone_at__isnull=True)
            .select_related("node")
            .order_by("node", "index")
        )

    def perform_update(self, serializer: BaseSerializer[GpuDevice]) -> None:
        device = serializer.instance
        assert device is not None  # an update's serializer is built with get_object()
        serializer.instance = services.update_gpu_device(
            actor=self.request.user, device=device, **serializer.validated_data
        )


class QueueViewSet(_Audited, viewsets.ModelViewSet[Queue]):
    queryset = Queue.objects.select_related("cluster").prefetch_related("tenants")
    serializer_class = s.QueueSerializer
    filterset_fields = ["cluster__slug", "is_open"]

    def perform_create(self, serializer: BaseSerializer[Queue]) -> None:
        serializer.instance = services.create_queue(
            actor=self.request.user, **serializer.validated_data
        )

    def perform_update(self, serializer: BaseSerializer[Queue]) -> None:
        queue = serializer.instance
        assert queue is not None  # an update's serializer is built with get_object()
        serializer.instance = services.update_queue(
            actor=self.request.user, queue=queue, **serializer.validated_data
        )

    def perform_destroy(self, instance: Queue) -> None:
        services.delete_queue(actor=self.request.user, queue=instance)


class SuperusersOnly(permissions.BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return bool(request.user and request.user.is_authenticated and request.user.is_superuser)


class WhatIfViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    """Capacity what-if: replay a trace on an inventory under several policies."""

    permission_classes = [SuperusersOnly]
    serializer_class = s.WhatIfSerializer
    queryset = WhatIfRun.objects.select_related("created_by", "cluster")
    parser_classes = [StrictMultiPartParser, StrictFormParser, StrictJSONParser]

    @extend_schema(request=s.NewWhatIfSerializer, responses={201: s.WhatIfSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        body = s.NewWhatIfSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        run = whatif.create(
            actor=request.user,
            cluster=data.get("cluster"),
            nodes_csv=_text(data.get("nodes"), "nodes"),
            pods_csv=_text(data["pods"], "pods"),
            trace_name=data["pods"].name,
            policies=data["policies"],
            seeds=data["seeds"],
        )
        run.refresh_from_db()
        return Response(s.WhatIfSerializer(run).data, status=status.HTTP_201_CREATED)


def _text(upload: Any, field: str) -> str:
    if upload is None:
        return ""
    try:
        return str(upload.read().decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise ValidationError({field: _("the file is not UTF-8 text")}) from None


class PriorityClassViewSet(_Audited, viewsets.ModelViewSet[PriorityClass]):
    queryset = PriorityClass.objects.all()
    serializer_class = s.PriorityClassSerializer

    def perform_create(self, serializer: BaseSerializer[PriorityClass]) -> None:
        serializer.instance = services.create_priority_class(
            actor=self.request.user, **serializer.validated_data
        )

    def perform_update(self, serializer: BaseSerializer[PriorityClass]) -> None:
        priority_class = serializer.instance
        assert priority_class is not None  # an update's serializer is built with get_object()
        serializer.instance = services.update_priority_class(
            actor=self.request.user, priority_class=priority_class, **serializer.validated_data
        )

    def perform_destroy(self, instance: PriorityClass) -> None:
        services.delete_priority_class(actor=self.request.user, priority_class=instance)
