"""The models and serving API: ``/api/v1/models/`` (with ``versions/`` and ``aliases/``) and
``/api/v1/endpoints/`` (deploy, stop, keys, live stats). Every write goes through
``workloads.model_registry`` or ``workloads.serving``; what one may not see is a 404."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, parsers, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from tenants.models import Tenant
from tenants.permissions import Access
from workloads import gateway, model_registry
from workloads import serving as service
from workloads.choices import Framework, Visibility
from workloads.models import EndpointKey, Flavor, MlModel, ModelVersion, ServingEndpoint, Workload
from workloads.services import stop


class VersionSerializer(serializers.ModelSerializer[ModelVersion]):
    source_job: serializers.PrimaryKeyRelatedField[Workload] = serializers.PrimaryKeyRelatedField(
        read_only=True
    )
    dataset: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    created_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )

    class Meta:
        model = ModelVersion
        fields = [
            "number", "framework", "source_job", "dataset", "metrics", "size_bytes", "files",
            "created_by", "created_at",
        ]  # fmt: skip
        read_only_fields = fields


class ModelSerializer(serializers.ModelSerializer[MlModel]):
    owner: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    tenant: serializers.SlugRelatedField[Tenant] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    versions = VersionSerializer(many=True, read_only=True)
    aliases = serializers.SerializerMethodField()

    class Meta:
        model = MlModel
        fields = [
            "slug", "name", "description", "owner", "visibility", "tenant", "created_at",
            "versions", "aliases",
        ]  # fmt: skip
        read_only_fields = fields

    def get_aliases(self, model: MlModel) -> dict[str, int]:
        return {alias.name: alias.version.number for alias in model.aliases.all()}


def _tenant(request: Request, value: Any) -> Tenant | None:
    if not value:
        return None
    tenant = Tenant.objects.filter(slug=str(value)).first()
    if tenant is None or not Access.of(request.user).can_view(tenant):
        raise ValidationError({"tenant": "no such class or project"})
    return tenant


class ModelWriteSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    slug = serializers.CharField(max_length=64, required=False)
    description = serializers.CharField(max_length=5000, required=False, allow_blank=True)
    visibility = serializers.ChoiceField(choices=Visibility.choices, required=False)
    tenant = serializers.CharField(max_length=64, required=False, allow_null=True)


class VersionWriteSerializer(serializers.Serializer):
    framework = serializers.ChoiceField(choices=Framework.choices)
    job = serializers.UUIDField(required=False, help_text="a Succeeded job of yours")
    path = serializers.CharField(
        max_length=500, required=False, help_text="with job: its output folder in its home"
    )
    file = serializers.FileField(required=False, help_text=".zip, .tar, .tar.gz or .tgz")


class AliasWriteSerializer(serializers.Serializer):
    name = serializers.SlugField(max_length=40)
    version = serializers.IntegerField(min_value=1)


class ModelViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet[MlModel],
):
    """Models you may see; versions are added from a job's output or an upload."""

    permission_classes = [permissions.IsAuthenticated]
    serializer_class = ModelSerializer
    lookup_field = "slug"
    parser_classes = [parsers.JSONParser, parsers.MultiPartParser, parsers.FormParser]

    def get_queryset(self) -> QuerySet[MlModel]:
        return model_registry.visible_to(self.request.user).prefetch_related(
            "versions__source_job", "versions__dataset", "versions__created_by", "aliases__version"
        )

    @extend_schema(request=ModelWriteSerializer, responses={201: ModelSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        body = ModelWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        data["tenant"] = _tenant(request, data.get("tenant"))
        model = model_registry.create_model(actor=request.user, **data)
        return Response(self.get_serializer(model).data, status=status.HTTP_201_CREATED)

    def _owned(self) -> MlModel:
        model = self.get_object()
        if not model_registry.can_change(self.request.user, model):
            raise PermissionDenied("only the model's owner changes it")
        return model

    @extend_schema(request=VersionWriteSerializer, responses={201: VersionSerializer})
    @action(detail=True, methods=["post"])
    def versions(self, request: Request, slug: str | None = None) -> Response:
        model = self._owned()
        body = VersionWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        upload, job_id = data.get("file"), data.get("job")
        if (upload is None) == (job_id is None):
            raise ValidationError({"file": "give either an archive (file) or a job and its path"})
        if upload is not None:
            version = model_registry.register_upload(
                actor=request.user,
                model=model,
                archive=upload,
                filename=upload.name,
                framework=data["framework"],
            )
        else:
            job = Workload.objects.filter(pk=job_id).first()
            if job is None:
                raise ValidationError({"job": "no such job of yours"})
            version = model_registry.register_from_job(
                actor=request.user,
                model=model,
                job=job,
                path=data.get("path"),
                framework=data["framework"],
            )
        return Response(VersionSerializer(version).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=AliasWriteSerializer, responses={200: ModelSerializer})
    @action(detail=True, methods=["post"])
    def aliases(self, request: Request, slug: str | None = None) -> Response:
        model = self._owned()
        body = AliasWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        version = model.versions.filter(number=body.validated_data["version"]).first()
        if version is None:
            raise ValidationError({"version": "no such version of this model"})
        model_registry.set_alias(
            actor=request.user, model=model, name=body.validated_data["name"], version=version
        )
        return Response(self.get_serializer(self.get_object()).data)


class EndpointSerializer(serializers.ModelSerializer[ServingEndpoint]):
    owner: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    tenant: serializers.SlugRelatedField[Tenant] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    flavor: serializers.SlugRelatedField[Flavor] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    model = serializers.CharField(source="version.model.slug", read_only=True)
    version = serializers.IntegerField(source="version.number", read_only=True)
    workload: serializers.PrimaryKeyRelatedField[Workload] = serializers.PrimaryKeyRelatedField(
        read_only=True
    )
    state = serializers.CharField(source="workload.state", read_only=True, default="")
    reason = serializers.CharField(source="workload.reason", read_only=True, default="")
    url = serializers.CharField(source="serve_path", read_only=True)
    model_name = serializers.CharField(read_only=True)

    class Meta:
        model = ServingEndpoint
        fields = [
            "slug", "name", "owner", "tenant", "model", "version", "model_name", "flavor",
            "min_replicas", "max_replicas", "target_concurrency", "target_gpu_utilisation",
            "scale_to_zero_after_s",
            "schedule", "rate_limit", "workload", "state", "reason", "url", "created_at",
        ]  # fmt: skip
        read_only_fields = fields


class DeploySerializer(serializers.Serializer):
    model = serializers.CharField(max_length=64)
    version = serializers.CharField(max_length=40, required=False, help_text="number or alias")
    flavor = serializers.CharField(max_length=64)
    name = serializers.CharField(max_length=100, required=False)
    slug = serializers.CharField(max_length=64, required=False)
    tenant = serializers.CharField(max_length=64, required=False, allow_null=True)
    min_replicas = serializers.IntegerField(required=False, default=1)
    max_replicas = serializers.IntegerField(required=False, default=1)
    target_concurrency = serializers.IntegerField(required=False, default=4)
    target_gpu_utilisation = serializers.IntegerField(required=False, default=0)
    scale_to_zero_after_s = serializers.IntegerField(required=False, default=300)
    schedule = serializers.JSONField(required=False)
    rate_limit = serializers.IntegerField(required=False)


class KeySerializer(serializers.ModelSerializer[EndpointKey]):
    class Meta:
        model = EndpointKey
        fields = ["id", "name", "prefix", "created_at", "revoked_at"]
        read_only_fields = fields


class EndpointViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet[ServingEndpoint],
):
    """Serving endpoints you may see (yours, your classes' as their teacher, all as admin)."""

    permission_classes = [permissions.IsAuthenticated]
    serializer_class = EndpointSerializer
    lookup_field = "slug"

    def get_queryset(self) -> QuerySet[ServingEndpoint]:
        return service.visible_to(self.request.user)

    @extend_schema(request=DeploySerializer, responses={201: EndpointSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        body = DeploySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        model = model_registry.visible_to(request.user).filter(slug=data.pop("model")).first()
        if model is None:
            raise ValidationError({"model": "no model of that name that you may use"})
        version = model_registry.resolve(model, data.pop("version", None))
        flavor = Flavor.objects.filter(slug=data.pop("flavor"), is_active=True).first()
        if flavor is None:
            raise ValidationError({"flavor": "no such flavor"})
        data["tenant"] = _tenant(request, data.get("tenant"))
        endpoint = service.deploy(actor=request.user, version=version, flavor=flavor, **data)
        return Response(self.get_serializer(endpoint).data, status=status.HTTP_201_CREATED)

    def _controlled(self) -> ServingEndpoint:
        endpoint = self.get_object()
        if not service.can_change(self.request.user, endpoint):
            raise PermissionDenied("only the endpoint's owner or class staff change it")
        return endpoint

    @extend_schema(request=None, responses={202: EndpointSerializer})
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, slug: str | None = None) -> Response:
        endpoint = self._controlled()
        if endpoint.workload is not None and endpoint.workload.is_active:
            stop(actor=request.user, workload=endpoint.workload)
        return Response(self.get_serializer(endpoint).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(responses={200: KeySerializer(many=True)})
    @action(detail=True, methods=["get", "post"])
    def keys(self, request: Request, slug: str | None = None) -> Response:
        """GET: the keys (never the secrets). POST {"name"}: a new key, its ``key`` shown once."""
        endpoint = self._controlled()
        if request.method == "GET":
            return Response(KeySerializer(endpoint.keys.all(), many=True).data)
        data = request.data if isinstance(request.data, dict) else {}
        key, secret = service.create_key(
            actor=request.user, endpoint=endpoint, name=data.get("name", "")
        )
        return Response({**KeySerializer(key).data, "key": secret}, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={204: None})
    @action(detail=True, methods=["post"], url_path=r"keys/(?P<key_id>\d+)/revoke")
    def revoke(self, request: Request, slug: str | None = None, key_id: str = "") -> Response:
        endpoint = self._controlled()
        key = endpoint.keys.filter(pk=int(key_id)).first()
        if key is None:
            raise NotFound()
        service.revoke_key(actor=request.user, key=key)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @action(detail=True, methods=["get"])
    def stats(self, request: Request, slug: str | None = None) -> Response:
        """Live replicas, request rate, p50/p99 latency and errors (the last minute)."""
        return Response(gateway.live_stats(self.get_object()))
