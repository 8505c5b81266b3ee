"""The datasets API: ``/api/v1/datasets/``. Everyone signed in lists what they may use and
uploads archives (multipart ``file``); admins register host folders (``path``); the owner
changes and deletes. Every write goes through ``workloads.datasets``."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, parsers, permissions, serializers, status, viewsets
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from tenants.models import Tenant
from tenants.permissions import Access
from workloads import datasets as service
from workloads.choices import ACTIVE, Visibility
from workloads.models import Dataset
from workloads.permissions import visible_workloads


class DatasetSerializer(serializers.ModelSerializer[Dataset]):
    owner: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    tenant: serializers.SlugRelatedField[Tenant] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    mount_path = serializers.CharField(read_only=True)
    mounted_by = serializers.SerializerMethodField(
        help_text="the running workloads you may see that mount it"
    )

    class Meta:
        model = Dataset
        fields = [
            "slug",
            "name",
            "description",
            "licence",
            "owner",
            "visibility",
            "tenant",
            "mount_path",
            "size_bytes",
            "files",
            "claim",
            "sub_path",
            "created_at",
            "mounted_by",
        ]
        read_only_fields = fields

    def get_mounted_by(self, dataset: Dataset) -> list[str]:
        user = self.context["request"].user
        return [
            str(pk)
            for pk in dataset.workloads.filter(visible_workloads(user), state__in=ACTIVE)
            .order_by("created_at")
            .values_list("pk", flat=True)[:50]
        ]


class DatasetWriteSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200, required=False)
    slug = serializers.CharField(max_length=64, required=False)
    description = serializers.CharField(max_length=5000, required=False, allow_blank=True)
    licence = serializers.CharField(max_length=200, required=False, allow_blank=True)
    visibility = serializers.ChoiceField(choices=Visibility.choices, required=False)
    tenant = serializers.CharField(
        max_length=64, required=False, allow_null=True, help_text="slug (visibility tenant)"
    )
    claim = serializers.CharField(max_length=253, required=False, allow_blank=True)
    sub_path = serializers.CharField(max_length=500, required=False, allow_blank=True)
    path = serializers.CharField(
        max_length=500, required=False, help_text="admins: a folder under DATASETS_DIR"
    )
    file = serializers.FileField(required=False, help_text=".zip, .tar, .tar.gz or .tgz")

    def validate_tenant(self, value: str | None) -> Tenant | None:
        if not value:
            return None
        access = Access.of(self.context["request"].user)
        tenant = Tenant.objects.filter(slug=value).first()
        if tenant is None or not access.can_view(tenant):
            raise serializers.ValidationError("no such class or project")
        return tenant


class DatasetViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet[Dataset],
):
    """Datasets you may mount. Create with a ``file`` (an archive) or, as an admin, a
    ``path`` under ``DATASETS_DIR``."""

    permission_classes = [permissions.IsAuthenticated]
    serializer_class = DatasetSerializer
    lookup_field = "slug"
    parser_classes = [parsers.JSONParser, parsers.MultiPartParser, parsers.FormParser]
    filterset_fields = ["visibility"]

    def get_queryset(self) -> QuerySet[Dataset]:
        return service.visible_to(self.request.user)

    def _body(self, request: Request, *, partial: bool) -> dict[str, Any]:
        body = DatasetWriteSerializer(
            data=request.data, context={"request": request}, partial=partial
        )
        body.is_valid(raise_exception=True)
        return dict(body.validated_data)

    @extend_schema(request=DatasetWriteSerializer, responses={201: DatasetSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = self._body(request, partial=False)
        upload, path = data.pop("file", None), data.pop("path", None)
        if (upload is None) == (path is None):
            raise ValidationError({"file": "give either an archive (file) or a folder (path)"})
        if upload is not None:
            dataset = service.upload_archive(
                actor=request.user, archive=upload, filename=upload.name, **data
            )
        else:
            dataset = service.register_folder(actor=request.user, path=path, **data)
        return Response(self.get_serializer(dataset).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=DatasetWriteSerializer, responses={200: DatasetSerializer})
    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        dataset = self.get_object()
        if not service.can_change(request.user, dataset):
            raise PermissionDenied("only the owner changes a dataset")
        data = self._body(request, partial=True)
        for fixed in ("file", "path", "slug"):
            if data.pop(fixed, None) is not None:
                raise ValidationError({fixed: "cannot be changed; upload a new dataset"})
        dataset = service.update(actor=request.user, dataset=dataset, **data)
        return Response(self.get_serializer(dataset).data)

    def perform_destroy(self, instance: Dataset) -> None:
        service.delete(actor=self.request.user, dataset=instance)
