from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduling.models import Cluster, PriorityClass
from tenants.api.fields import TenantCodeField
from tenants.models import Tenant, User
from workloads import windows
from workloads.choices import State, WorkloadKind
from workloads.constants import MAX_ENV_VARIABLES, MAX_LOG_OFFSET, check_env_limits
from workloads.launch import MAX_WORKERS
from workloads.models import AppTemplate, Dataset, Flavor, Grant, Image, Workload, WorkloadEvent


# The catalog's JSON columns, typed: a list of names, an environment, ports. (A bare
# JSONField would take a form's "null" and hand None to a NOT NULL column.)
def _names(help_text: str = "") -> serializers.ListField:
    return serializers.ListField(
        child=serializers.CharField(max_length=64),
        max_length=64,
        required=False,
        help_text=help_text,
    )


def _check_env(value: dict[str, str], field: str) -> dict[str, str]:
    try:
        check_env_limits(value, field=field)
    except DjangoValidationError as exc:
        raise serializers.ValidationError(exc.message_dict[field]) from None
    return value


class ImageSerializer(serializers.ModelSerializer[Image]):
    tools = _names('e.g. ["jupyterlab", "tensorboard"]')

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


class FlavorSerializer(serializers.ModelSerializer[Flavor]):
    gpu_equivalents = serializers.DecimalField(max_digits=6, decimal_places=3, read_only=True)
    gpu_models = _names('Allowed GPU models, e.g. ["V100M16", "V100M32"].')

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


class AppTemplateSerializer(serializers.ModelSerializer[AppTemplate]):
    image = serializers.SlugRelatedField(slug_field="slug", queryset=Image.objects.all())
    default_flavor = serializers.SlugRelatedField(slug_field="slug", queryset=Flavor.objects.all())
    allowed_flavors = serializers.SlugRelatedField(
        slug_field="slug", many=True, queryset=Flavor.objects.all()
    )
    environment = serializers.DictField(
        child=serializers.CharField(max_length=4096, allow_blank=True), required=False
    )
    ports = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=65535), max_length=16, required=False
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
            "program",
            "description",
            "is_active",
            "gpu_idle_percent",
            "gpu_idle_minutes",
        ]

    def validate_environment(self, value: dict[str, str]) -> dict[str, str]:
        return _check_env(value, "environment")


class GrantSerializer(serializers.ModelSerializer[Grant]):
    template = serializers.SlugRelatedField(slug_field="slug", queryset=AppTemplate.objects.all())
    tenant = TenantCodeField(queryset=Tenant.objects.all())
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
    payer_tenant = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=Tenant.objects.all(),
        required=False,
        allow_null=True,
        help_text="With payer 'tenant': the project or group (one you manage) that pays.",
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
            "gpu_idle_percent",
            "gpu_idle_minutes",
            "max_extensions",
            "windows",
            "windows_text",
            "expires_on",
            "payer",
            "payer_tenant",
            "created_at",
        ]
        read_only_fields = ["id", "created_at", "windows_text"]

    def get_windows_text(self, grant: Grant) -> str:
        return windows.describe(grant.windows)


class WorkloadEventSerializer(serializers.ModelSerializer[WorkloadEvent]):
    actor: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )

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


class WorkloadSerializer(serializers.ModelSerializer[Workload]):
    owner: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    tenant: serializers.SlugRelatedField[Tenant] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    template: serializers.SlugRelatedField[AppTemplate] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    flavor: serializers.SlugRelatedField[Flavor] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    open_url = serializers.SerializerMethodField()
    datasets: serializers.SlugRelatedField[Dataset] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True, many=True
    )

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
            "datasets",
            "attempt",
            "exit_code",
            "created_at",
            "started_at",
            "finished_at",
            "deadline_at",
            "extensions",
            "last_activity_at",
            "gpu_idle_percent",
            "gpu_idle_minutes",
            "gpu_warned_at",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_open_url(self, workload: Workload) -> str | None:
        if workload.kind != WorkloadKind.NOTEBOOK or workload.state != State.RUNNING:
            return None
        if workload.cluster.is_simulated:
            return None  # nothing runs on a simulated cluster, so there is nothing to open
        kind = workload.template.kind if workload.template else "jupyter"
        suffix = {"jupyter": "lab", "terminal": "lab", "tensorboard": ""}.get(kind, "")
        return f"{workload.open_path}{suffix}"


class LaunchSerializer(serializers.Serializer):
    template = serializers.SlugRelatedField(
        slug_field="slug", queryset=AppTemplate.objects.filter(is_active=True)
    )
    flavor = serializers.SlugRelatedField(
        slug_field="slug", queryset=Flavor.objects.all(), required=False, allow_null=True
    )
    name = serializers.CharField(max_length=100, required=False, allow_blank=True)
    datasets = serializers.ListField(
        child=serializers.CharField(max_length=64),
        required=False,
        max_length=16,
        help_text="slugs of datasets you may use, mounted read-only at /datasets/<slug>",
    )


class JobSerializer(serializers.Serializer):
    tenant = serializers.CharField(help_text="slug of your class or project")
    flavor = serializers.SlugRelatedField(slug_field="slug", queryset=Flavor.objects.all())
    command = serializers.JSONField(help_text="argv list, or one shell-like string")
    name = serializers.CharField(max_length=100, required=False, allow_blank=True)
    env = serializers.DictField(
        child=serializers.CharField(allow_blank=True, max_length=4096),
        required=False,
        help_text=f"NAME: value, at most {MAX_ENV_VARIABLES} variables and 32 KiB in all",
    )
    workers = serializers.IntegerField(default=1)
    max_retries = serializers.IntegerField(default=0)
    datasets = serializers.ListField(
        child=serializers.CharField(max_length=64),
        required=False,
        max_length=16,
        help_text="slugs of datasets you may use, mounted read-only at /datasets/<slug>",
    )

    def validate_env(self, value: dict[str, str]) -> dict[str, str]:
        return _check_env(value, "env")


class LogQuerySerializer(serializers.Serializer):
    """The query of a log read: which task, from which byte."""

    task = serializers.IntegerField(default=0, min_value=0, max_value=MAX_WORKERS - 1)
    offset = serializers.IntegerField(default=0, min_value=0, max_value=MAX_LOG_OFFSET)


class GpuSampleSerializer(serializers.Serializer):
    time = serializers.DateTimeField()
    utilisation = serializers.IntegerField(help_text="Percent busy, the mean of its GPUs.")
    memory_used_mib = serializers.IntegerField()
    span_seconds = serializers.IntegerField(help_text="0: one reading; else a mean over this.")


class GpuUtilisationSerializer(serializers.Serializer):
    gpu_idle_percent = serializers.IntegerField(help_text="GPU-aware culling threshold; 0: off.")
    gpu_idle_minutes = serializers.IntegerField()
    gpu_warned_at = serializers.DateTimeField(allow_null=True)
    samples = GpuSampleSerializer(many=True)


class LogSerializer(serializers.Serializer):
    text = serializers.CharField()
    next_offset = serializers.IntegerField()
    tasks = serializers.IntegerField()
