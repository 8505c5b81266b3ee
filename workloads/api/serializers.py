from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduling.models import PriorityClass
from tenants.models import Tenant
from workloads import windows
from workloads.choices import State, WorkloadKind
from workloads.models import AppTemplate, Flavor, Grant, Image, Workload, WorkloadEvent


class ImageSerializer(serializers.ModelSerializer):
    class Meta:
        model = Image
        fields = [
            "id",
            "name",
            "slug",
            "framework",
            "framework_version",
            "tools",
            "registry_ref",
            "description",
            "is_active",
        ]


class FlavorSerializer(serializers.ModelSerializer):
    gpu_equivalents = serializers.DecimalField(max_digits=6, decimal_places=3, read_only=True)

    class Meta:
        model = Flavor
        fields = [
            "id",
            "name",
            "slug",
            "cpu_milli",
            "memory_mib",
            "gpus",
            "gpu_milli",
            "gpu_memory_mib",
            "gpu_models",
            "gpu_equivalents",
            "is_active",
        ]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        gpus = attrs.get("gpus", getattr(self.instance, "gpus", 0))
        milli = attrs.get("gpu_milli", getattr(self.instance, "gpu_milli", 0))
        if gpus and milli:
            raise serializers.ValidationError(
                {"gpu_milli": _("a flavor has whole GPUs or a share of one, not both")}
            )
        models = attrs.get("gpu_models", [])
        if not isinstance(models, list) or not all(isinstance(m, str) and m for m in models):
            raise serializers.ValidationError({"gpu_models": _("a list of GPU model names")})
        return attrs


class AppTemplateSerializer(serializers.ModelSerializer):
    image = serializers.SlugRelatedField(slug_field="slug", queryset=Image.objects.all())
    default_flavor = serializers.SlugRelatedField(slug_field="slug", queryset=Flavor.objects.all())
    allowed_flavors = serializers.SlugRelatedField(
        slug_field="slug", many=True, queryset=Flavor.objects.all()
    )

    class Meta:
        model = AppTemplate
        fields = [
            "id",
            "name",
            "slug",
            "kind",
            "image",
            "default_flavor",
            "allowed_flavors",
            "environment",
            "ports",
            "description",
            "is_active",
        ]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        default = attrs.get("default_flavor") or getattr(self.instance, "default_flavor", None)
        allowed = attrs.get("allowed_flavors")
        if allowed is not None and default is not None and default not in allowed:
            raise serializers.ValidationError(
                {"default_flavor": _("must be one of the allowed flavors")}
            )
        return attrs


class GrantSerializer(serializers.ModelSerializer):
    template = serializers.SlugRelatedField(slug_field="slug", queryset=AppTemplate.objects.all())
    tenant = serializers.SlugRelatedField(slug_field="slug", queryset=Tenant.objects.all())
    flavors = serializers.SlugRelatedField(
        slug_field="slug", many=True, queryset=Flavor.objects.all()
    )
    windows_text = serializers.SerializerMethodField()
    priority_class = serializers.SlugRelatedField(
        slug_field="name",
        queryset=PriorityClass.objects.all(),
        required=False,
        allow_null=True,
        help_text="Work from this grant is scheduled with this priority (admins only).",
    )

    class Meta:
        model = Grant
        fields = [
            "id",
            "template",
            "tenant",
            "flavors",
            "priority_class",
            "member_limit",
            "max_duration_minutes",
            "idle_timeout_minutes",
            "max_extensions",
            "windows",
            "windows_text",
            "expires_on",
            "created_at",
        ]
        read_only_fields = ["id", "created_at", "windows_text"]

    def get_windows_text(self, grant: Grant) -> str:
        return windows.describe(grant.windows)

    def validate_windows(self, value: Any) -> list[dict[str, Any]]:
        from django.core.exceptions import ValidationError as DjangoValidationError

        try:
            return windows.validate(value)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict["windows"]) from None

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        template = attrs.get("template") or getattr(self.instance, "template", None)
        flavors = attrs.get("flavors")
        if template is not None and flavors is not None:
            if not flavors:
                raise serializers.ValidationError({"flavors": _("grant at least one flavor")})
            allowed = set(template.allowed_flavors.all())
            outside = [f.slug for f in flavors if f not in allowed]
            if outside:
                raise serializers.ValidationError(
                    {
                        "flavors": _("not allowed by %(template)s: %(flavors)s")
                        % {"template": template.name, "flavors": ", ".join(outside)}
                    }
                )
        tenant = attrs.get("tenant")
        if tenant is not None and tenant.kind not in ("class", "project"):
            raise serializers.ValidationError({"tenant": _("grant to a class or a project")})
        for name in ("member_limit", "max_duration_minutes"):
            if name in attrs and attrs[name] < 1:
                raise serializers.ValidationError({name: _("must be at least 1")})
        return attrs


class WorkloadEventSerializer(serializers.ModelSerializer):
    actor = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = WorkloadEvent
        fields = [
            "time",
            "from_state",
            "to_state",
            "actor",
            "reason",
            "reason_code",
            "reason_params",
        ]


class WorkloadSerializer(serializers.ModelSerializer):
    owner = serializers.SlugRelatedField(slug_field="username", read_only=True)
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    cluster = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    template = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    flavor = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    open_url = serializers.SerializerMethodField()

    class Meta:
        model = Workload
        fields = [
            "id",
            "kind",
            "name",
            "owner",
            "tenant",
            "cluster",
            "template",
            "flavor",
            "state",
            "reason",
            "reason_code",
            "reason_params",
            "open_url",
            "command",
            "env",
            "workers",
            "max_retries",
            "attempt",
            "exit_code",
            "created_at",
            "started_at",
            "finished_at",
            "deadline_at",
            "extensions",
            "last_activity_at",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_open_url(self, workload: Workload) -> str | None:
        if workload.kind != WorkloadKind.NOTEBOOK or workload.state != State.RUNNING:
            return None
        if workload.cluster.is_simulated:
            return None  # nothing runs on a simulated cluster, so there is nothing to open
        kind = workload.template.kind if workload.template else "jupyter"
        suffix = {"jupyter": "lab", "terminal": "terminals/1", "tensorboard": ""}.get(kind, "")
        return f"{workload.open_path}{suffix}"


class LaunchSerializer(serializers.Serializer):
    template = serializers.SlugRelatedField(
        slug_field="slug", queryset=AppTemplate.objects.filter(is_active=True)
    )
    flavor = serializers.SlugRelatedField(
        slug_field="slug", queryset=Flavor.objects.all(), required=False, allow_null=True
    )
    name = serializers.CharField(max_length=100, required=False, allow_blank=True)


class JobSerializer(serializers.Serializer):
    tenant = serializers.CharField(help_text="slug of your class or project")
    flavor = serializers.SlugRelatedField(slug_field="slug", queryset=Flavor.objects.all())
    command = serializers.JSONField(help_text="argv list, or one shell-like string")
    name = serializers.CharField(max_length=100, required=False, allow_blank=True)
    env = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False)
    workers = serializers.IntegerField(default=1)
    max_retries = serializers.IntegerField(default=0)


class LogSerializer(serializers.Serializer):
    text = serializers.CharField()
    next_offset = serializers.IntegerField()
    tasks = serializers.IntegerField()
