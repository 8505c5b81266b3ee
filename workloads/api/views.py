"""REST API: the catalog, grants, the App Center and workloads (launch, jobs, stop, logs)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Model, QuerySet
from django.utils.translation import gettext as _
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, permissions, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from core import idempotency
from scheduling.backends.registry import get_backend
from workloads import catalog, grants, services, utilisation
from workloads.api import serializers as s
from workloads.choices import WorkloadKind
from workloads.filtersets import WorkloadFilterSet
from workloads.models import AppTemplate, Flavor, Grant, Image, Workload
from workloads.permissions import can_control, visible_workloads
from workloads.specs import handle_for

IDEMPOTENCY_KEY = OpenApiParameter(
    idempotency.HEADER,
    str,
    OpenApiParameter.HEADER,
    description="Any unique string (a UUID): a retry with the same key gets the first answer "
    "and creates nothing more (kept 24 hours).",
)


class CatalogPermission(permissions.BasePermission):
    """Everyone signed in reads the catalog; superusers (platform admins) change it."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        return request.method in permissions.SAFE_METHODS or request.user.is_superuser


_M = TypeVar("_M", bound=Model)


class _Catalog(viewsets.ModelViewSet[_M]):
    """Changes go through ``workloads.catalog``: one transaction, an audit row each."""

    permission_classes = [CatalogPermission]
    lookup_field = "slug"


class ImageViewSet(_Catalog[Image]):
    queryset = Image.objects.all()
    serializer_class = s.ImageSerializer
    filterset_fields = ["is_active", "framework"]

    def perform_create(self, serializer: BaseSerializer[Image]) -> None:
        serializer.instance = catalog.create_image(
            actor=self.request.user, **serializer.validated_data
        )

    def perform_update(self, serializer: BaseSerializer[Image]) -> None:
        image = serializer.instance
        assert image is not None  # an update's serializer is built with get_object()
        serializer.instance = catalog.update_image(
            actor=self.request.user, image=image, **serializer.validated_data
        )

    def perform_destroy(self, instance: Image) -> None:
        catalog.delete_image(actor=self.request.user, image=instance)


class FlavorViewSet(_Catalog[Flavor]):
    queryset = Flavor.objects.all()
    serializer_class = s.FlavorSerializer
    filterset_fields = ["is_active", "gpus"]

    def perform_create(self, serializer: BaseSerializer[Flavor]) -> None:
        serializer.instance = catalog.create_flavor(
            actor=self.request.user, **serializer.validated_data
        )

    def perform_update(self, serializer: BaseSerializer[Flavor]) -> None:
        flavor = serializer.instance
        assert flavor is not None  # an update's serializer is built with get_object()
        serializer.instance = catalog.update_flavor(
            actor=self.request.user, flavor=flavor, **serializer.validated_data
        )

    def perform_destroy(self, instance: Flavor) -> None:
        catalog.delete_flavor(actor=self.request.user, flavor=instance)


class AppTemplateViewSet(_Catalog[AppTemplate]):
    queryset = AppTemplate.objects.select_related("image", "default_flavor").prefetch_related(
        "allowed_flavors"
    )
    serializer_class = s.AppTemplateSerializer
    filterset_fields = ["is_active", "kind"]

    def perform_create(self, serializer: BaseSerializer[AppTemplate]) -> None:
        serializer.instance = catalog.create_template(
            actor=self.request.user, **serializer.validated_data
        )

    def perform_update(self, serializer: BaseSerializer[AppTemplate]) -> None:
        template = serializer.instance
        assert template is not None  # an update's serializer is built with get_object()
        serializer.instance = catalog.update_template(
            actor=self.request.user, template=template, **serializer.validated_data
        )

    def perform_destroy(self, instance: AppTemplate) -> None:
        catalog.delete_template(actor=self.request.user, template=instance)


class GrantViewSet(viewsets.ModelViewSet[Grant]):
    """Templates granted to classes. Teachers grant to the classes they manage; the checks
    are ``workloads.grants``', the same as the teachers' pages."""

    queryset = Grant.objects.none()
    serializer_class = s.GrantSerializer
    filterset_fields = ["tenant__slug", "template__slug"]

    def get_queryset(self) -> QuerySet[Grant]:
        return (
            Grant.objects.visible_to(self.request.user)
            .select_related("template", "tenant")
            .prefetch_related("flavors")
        )

    def perform_create(self, serializer: BaseSerializer[Grant]) -> None:
        serializer.instance = grants.create_grant(
            actor=self.request.user, **serializer.validated_data
        )

    def perform_update(self, serializer: BaseSerializer[Grant]) -> None:
        grant = serializer.instance
        assert grant is not None  # an update's serializer is built with get_object()
        serializer.instance = grants.update_grant(
            actor=self.request.user, grant=grant, **serializer.validated_data
        )

    def perform_destroy(self, instance: Grant) -> None:
        grants.delete_grant(actor=self.request.user, grant=instance)


class AppCenterViewSet(viewsets.GenericViewSet):
    """What you may launch now: the grants of your classes."""

    queryset = Grant.objects.none()  # for the schema; requests use get_queryset
    serializer_class = s.GrantSerializer
    pagination_class = None

    def get_queryset(self) -> QuerySet[Grant]:
        return services.environment_grants(self.request.user)

    def list(self, request: Request) -> Response:
        return Response(self.get_serializer(self.get_queryset(), many=True).data)


class WorkloadViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Your environments and jobs (and, for teachers, their classes'). Filters and sorting
    are the workload page's (``workloads.filtersets``): ``?state=active``, ``?kind=job``,
    ``?tenant=<slug>``, ``?owner=<username>``, ``?ordering=-duration``."""

    queryset = Workload.objects.none()
    serializer_class = s.WorkloadSerializer
    filter_backends = [DjangoFilterBackend]
    filterset_class = WorkloadFilterSet

    def get_queryset(self) -> QuerySet[Workload]:
        return (
            Workload.objects.filter(visible_workloads(self.request.user))
            .select_related("owner", "tenant", "cluster", "template", "flavor")
            .prefetch_related("datasets")
        )

    @extend_schema(
        request=s.LaunchSerializer,
        responses={201: s.WorkloadSerializer},
        parameters=[IDEMPOTENCY_KEY],
    )
    @action(detail=False, methods=["post"])
    def launch(self, request: Request) -> Response:
        """Launch an environment from a granted template. With an ``Idempotency-Key`` header,
        a retry gets the first answer and launches nothing more."""

        def create() -> Workload:
            body = s.LaunchSerializer(data=request.data)
            body.is_valid(raise_exception=True)
            return services.launch_environment(actor=request.user, **body.validated_data)

        return self._created(request, create)

    @extend_schema(
        request=s.JobSerializer, responses={201: s.WorkloadSerializer}, parameters=[IDEMPOTENCY_KEY]
    )
    @action(detail=False, methods=["post"])
    def jobs(self, request: Request) -> Response:
        """Submit a training job (``workers`` > 1: distributed, all-or-nothing). With an
        ``Idempotency-Key`` header, a retry gets the first answer and submits nothing more."""

        def create() -> Workload:
            body = s.JobSerializer(data=request.data)
            body.is_valid(raise_exception=True)
            data = dict(body.validated_data)
            tenant = services.member_tenants(request.user).filter(slug=data.pop("tenant")).first()
            if tenant is None:
                raise ValidationError({"tenant": _("not one of your classes or projects")})
            return services.submit_job(actor=request.user, tenant=tenant, **data)

        return self._created(request, create)

    def _created(self, request: Request, create: Callable[[], Workload]) -> Response:
        """201 with the new workload; once per ``Idempotency-Key`` (``core.idempotency``)."""

        def run() -> idempotency.Answer:
            workload = create()
            data = self.get_serializer(self._fresh(workload)).data
            return idempotency.Answer(
                status.HTTP_201_CREATED, json.loads(json.dumps(data, cls=DjangoJSONEncoder))
            )

        key = request.headers.get(idempotency.HEADER)
        if key is None:
            answer = run()
        else:
            try:
                answer = idempotency.once(
                    user=request.user,
                    key=key,
                    scope=f"{request.method} {request.path}",
                    body=request.data,
                    run=run,
                )
            except idempotency.IdempotencyError as exc:
                return Response({"detail": str(exc)}, status=exc.status)
        response = Response(answer.body, status=answer.status)
        if answer.replayed:
            response["Idempotent-Replayed"] = "true"
        return response

    def _fresh(self, workload: Workload) -> Workload:
        return self.get_queryset().get(pk=workload.pk)

    def _controlled(self) -> Workload:
        workload = self.get_object()
        if not can_control(self.request.user, workload):
            raise PermissionDenied(_("You cannot act on this workload."))
        return workload

    @extend_schema(request=None, responses=s.WorkloadSerializer)
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, pk: str) -> Response:
        workload = self._controlled()
        if not workload.is_active:
            raise ValidationError(
                {"state": _("it is already %(state)s") % {"state": workload.state}}
            )
        services.stop(actor=request.user, workload=workload)
        return Response(self.get_serializer(self._fresh(workload)).data)

    @extend_schema(request=None, responses=s.WorkloadSerializer)
    @action(detail=True, methods=["post"])
    def extend(self, request: Request, pk: str) -> Response:
        workload = self.get_object()
        if workload.kind != WorkloadKind.NOTEBOOK:
            raise ValidationError({"workload": _("only environments have a time limit")})
        services.extend(actor=request.user, workload=workload)
        return Response(self.get_serializer(self._fresh(workload)).data)

    @extend_schema(request=None, responses=s.WorkloadSerializer)
    @action(detail=True, methods=["post"], url_path="keep-gpu")
    def keep_gpu(self, request: Request, pk: str) -> Response:
        """The owner still uses the GPU: the GPU idle window starts again (docs/workloads.md)."""
        workload = self.get_object()
        services.keep_gpu(actor=request.user, workload=workload)
        return Response(self.get_serializer(self._fresh(workload)).data)

    @extend_schema(responses=s.GpuUtilisationSerializer)
    @action(detail=True)
    def gpu(self, request: Request, pk: str) -> Response:
        """Its GPUs' utilisation over the history kept, and its GPU-aware culling rule."""
        workload = self.get_object()
        return Response(
            s.GpuUtilisationSerializer(
                {
                    "gpu_idle_percent": workload.gpu_idle_percent,
                    "gpu_idle_minutes": workload.gpu_idle_minutes,
                    "gpu_warned_at": workload.gpu_warned_at,
                    "samples": utilisation.history(workload),
                }
            ).data
        )

    @extend_schema(
        request=None, responses={201: s.WorkloadSerializer}, parameters=[IDEMPOTENCY_KEY]
    )
    @action(detail=True, methods=["post"], url_path="run-again")
    def run_again(self, request: Request, pk: str) -> Response:
        """Submit an ended job again, or launch a stopped environment again: a new workload
        with the same settings and the same checks as a new one (its owner only)."""
        workload = self.get_object()
        if workload.owner_id != request.user.pk:
            raise PermissionDenied(_("Only its owner can run it again."))
        return self._created(
            request, lambda: services.run_again(actor=request.user, workload=workload)
        )

    @extend_schema(responses=s.WorkloadEventSerializer(many=True))
    @action(detail=True)
    def events(self, request: Request, pk: str) -> Response:
        workload = self.get_object()
        events = workload.events.select_related("actor")
        return Response(s.WorkloadEventSerializer(events, many=True).data)

    @extend_schema(parameters=[s.LogQuerySerializer], responses=s.LogSerializer)
    @action(detail=True)
    def logs(self, request: Request, pk: str) -> Response:
        """A task's output from ``offset`` on; poll with the returned ``next_offset``."""
        workload = self._controlled()
        query = s.LogQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        task, offset = query.validated_data["task"], query.validated_data["offset"]
        if task >= workload.workers:
            raise ValidationError({"task": _("task is 0 to %(n)s") % {"n": workload.workers - 1}})
        chunk = get_backend(workload.cluster).logs(handle_for(workload), task, offset)
        return Response(
            {"text": chunk.text, "next_offset": chunk.next_offset, "tasks": chunk.tasks}
        )
