"""The catalog (images, flavors, app templates, grants) and workloads with their events."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from tenants.choices import MANAGING_ROLES
from tenants.permissions import Access
from workloads.choices import (
    ACTIVE,
    AppKind,
    Framework,
    PayerKind,
    State,
    Visibility,
    WorkloadKind,
)
from workloads.constants import MAX_FLAVOR_GPUS, PROGRAM_PATTERN, command_text


class Image(models.Model):
    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=64, unique=True)
    framework = models.CharField(max_length=50, blank=True)  # "PyTorch"
    framework_version = models.CharField(max_length=30, blank=True)  # "2.13"
    tools = models.JSONField(default=list, blank=True)  # ["jupyterlab", "tensorboard"]
    registry_ref = models.CharField(
        max_length=255, blank=True, help_text="Image reference used on Kubernetes."
    )
    description = models.TextField(blank=True)
    is_active = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Flavor(models.Model):
    """A size: CPU, memory and GPUs, either whole devices or a share of one device."""

    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=64, unique=True)
    cpu_milli = models.PositiveIntegerField(validators=[MinValueValidator(100)])
    memory_mib = models.PositiveIntegerField(validators=[MinValueValidator(64)])
    gpus = models.PositiveSmallIntegerField(
        default=0, validators=[MaxValueValidator(MAX_FLAVOR_GPUS)], help_text="Whole GPUs."
    )
    gpu_milli = models.PositiveSmallIntegerField(
        default=0,
        validators=[MaxValueValidator(999)],
        help_text="A share of one GPU's compute in thousandths (500 = half). 0: none.",
    )
    gpu_memory_mib = models.PositiveIntegerField(
        default=0, help_text="With a share: the GPU memory it may use."
    )
    gpu_models = models.JSONField(
        default=list, blank=True, help_text='Allowed GPU models, e.g. ["V100M16", "V100M32"].'
    )
    is_active = models.BooleanField(default=True)

    class Meta:
        ordering = ["gpus", "gpu_milli", "cpu_milli"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(gpus=0) | models.Q(gpu_milli=0),
                name="flavor_whole_or_fraction",
            )
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def gpu_equivalents(self) -> Decimal:
        """Whole-GPU equivalents counted against quotas (a half share is 0.5)."""
        return Decimal(self.gpus) if self.gpus else Decimal(self.gpu_milli) / 1000

    @property
    def uses_gpu(self) -> bool:
        return bool(self.gpus or self.gpu_milli)


class AppTemplateQuerySet(models.QuerySet["AppTemplate"]):
    def grantable(self, *, keeping: Grant | None = None) -> AppTemplateQuerySet:
        """Templates a grant may be given for: the active ones, and the one ``keeping``
        already has (so editing a grant of a retired template does not lose it)."""
        active = Q(is_active=True)
        if keeping is not None:
            active |= Q(pk=keeping.template_id)
        return self.filter(active).order_by("name")


class AppTemplate(models.Model):
    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=64, unique=True)
    kind = models.CharField(max_length=20, choices=AppKind.choices)
    image = models.ForeignKey(Image, on_delete=models.PROTECT, related_name="templates")
    default_flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="+")
    allowed_flavors = models.ManyToManyField(Flavor, related_name="templates")
    environment = models.JSONField(default=dict, blank=True)
    ports = models.JSONField(default=list, blank=True)
    # Desktops: the program the desktop starts, words separated by spaces ("xterm",
    # "idle3 -n"); no shell, no quoting. PyCharm's templates leave it empty.
    program = models.CharField(
        max_length=200,
        blank=True,
        validators=[
            RegexValidator(
                PROGRAM_PATTERN,
                _("a program and its arguments: letters, digits and . _ / + - = : , only"),
            )
        ],
    )
    description = models.TextField(blank=True)
    is_active = models.BooleanField(default=True)
    # GPU-aware culling (docs/workloads.md): an environment holding a GPU that stays below
    # gpu_idle_percent utilisation for gpu_idle_minutes is warned, then stopped. 0: off. Its
    # grants may set their own; jobs are culled only where their grant says so.
    gpu_idle_percent = models.PositiveSmallIntegerField(
        default=5, validators=[MaxValueValidator(100)]
    )
    gpu_idle_minutes = models.PositiveIntegerField(default=60)

    objects = AppTemplateQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class GrantQuerySet(models.QuerySet["Grant"]):
    def visible_to(self, user: Any) -> GrantQuerySet:
        """Grants of the subtrees ``user`` manages, and grants to the tenants they belong to."""
        access = Access.of(user)
        if access.is_superuser:
            return self.all()
        mine = access.tenant_filter(MANAGING_ROLES, prefix="tenant__") | Q(
            tenant__memberships__user=user
        )
        return self.filter(mine).distinct()

    def of_tenant(self, tenant: Any) -> GrantQuerySet:
        """A class's grants as its dashboard lists them: by template, with their flavors."""
        return (
            self.filter(tenant=tenant)
            .select_related("template")
            .prefetch_related("flavors")
            .order_by("template__name")
        )


class Grant(models.Model):
    """A template (with some of its flavors) handed to a class or project, with limits."""

    template = models.ForeignKey(AppTemplate, on_delete=models.CASCADE, related_name="grants")
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="grants")
    flavors = models.ManyToManyField(Flavor, related_name="grants")
    cluster = models.ForeignKey(
        "scheduling.Cluster",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="grants",
        help_text="Empty: the default cluster.",
    )
    member_limit = models.PositiveSmallIntegerField(
        default=1, help_text="Environments of this grant one member may run at once."
    )
    max_duration_minutes = models.PositiveIntegerField(default=240)
    idle_timeout_minutes = models.PositiveIntegerField(default=60)
    max_extensions = models.PositiveSmallIntegerField(default=2)
    # GPU-aware culling; empty: the template's (environments) or off (jobs).
    gpu_idle_percent = models.PositiveSmallIntegerField(
        null=True, blank=True, validators=[MaxValueValidator(100)]
    )
    gpu_idle_minutes = models.PositiveIntegerField(null=True, blank=True)
    windows = models.JSONField(
        default=list,
        blank=True,
        help_text='Weekly windows, e.g. [{"day": 1, "start": "14:00", "end": "16:00"}] '
        "(day 0 = Monday). Empty: any time.",
    )
    expires_on = models.DateField(null=True, blank=True)
    priority_class = models.ForeignKey(
        "scheduling.PriorityClass",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Work from this grant is scheduled with this priority.",
    )
    # Who pays for the work launched from it (workloads.payer.payer_for).
    payer = models.CharField(max_length=10, choices=PayerKind.choices, default=PayerKind.CLASS)
    payer_tenant = models.ForeignKey(
        "tenants.Tenant",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="With payer 'tenant': the project or group that pays.",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = GrantQuerySet.as_manager()

    # Not a column: set on fetched grants for the pages (workloads.teaching.queries).
    windows_text: str

    class Meta:
        ordering = ["tenant", "template"]

    def __str__(self) -> str:
        return f"{self.template} → {self.tenant}"


class Dataset(models.Model):
    """A folder of data that workloads mount read-only at ``/datasets/<slug>``: one an admin
    registered on the host (under ``DATASETS_DIR``) or an archive someone uploaded. Who may
    see and mount it: ``visibility`` (``workloads.datasets.visible_to``). On Kubernetes the
    same data is a claim (``claim``, optionally ``sub_path`` in it), mounted read-only."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True, max_length=5000)
    licence = models.CharField(max_length=200, blank=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="datasets"
    )
    visibility = models.CharField(
        max_length=8, choices=Visibility.choices, default=Visibility.PRIVATE
    )
    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    path = models.CharField(max_length=500, help_text=_("Relative to DATASETS_DIR."))
    claim = models.CharField(max_length=253, blank=True)  # Kubernetes PersistentVolumeClaim
    sub_path = models.CharField(max_length=500, blank=True)
    size_bytes = models.PositiveBigIntegerField(default=0)
    files = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "slug"]
        constraints = [
            models.CheckConstraint(
                condition=~Q(visibility="tenant") | Q(tenant__isnull=False),
                name="dataset_tenant_visibility_names_a_tenant",
            )
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def mount_path(self) -> str:
        return f"/datasets/{self.slug}"


class Workload(models.Model):
    """A notebook, job or model server: one row from launch to its end."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=16, choices=WorkloadKind.choices)
    name = models.CharField(max_length=100)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="workloads"
    )
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.PROTECT, related_name="workloads")
    cluster = models.ForeignKey(
        "scheduling.Cluster", on_delete=models.PROTECT, related_name="workloads"
    )
    template = models.ForeignKey(
        AppTemplate, null=True, blank=True, on_delete=models.SET_NULL, related_name="workloads"
    )
    grant = models.ForeignKey(
        Grant, null=True, blank=True, on_delete=models.SET_NULL, related_name="workloads"
    )
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="workloads")
    image = models.ForeignKey(
        Image, null=True, blank=True, on_delete=models.SET_NULL, related_name="workloads"
    )
    command = models.JSONField(default=list, blank=True)  # argv of each task (jobs)
    datasets = models.ManyToManyField(Dataset, blank=True, related_name="workloads")
    env = models.JSONField(default=dict, blank=True)
    workers = models.PositiveSmallIntegerField(default=1)
    max_retries = models.PositiveSmallIntegerField(default=0)
    attempt = models.PositiveSmallIntegerField(default=0)
    priority = models.IntegerField(default=0)  # from the grant's priority class at launch

    state = models.CharField(
        max_length=16, choices=State.choices, default=State.PENDING, db_index=True
    )
    reason = models.CharField(max_length=500, blank=True)  # in English, for API and audit
    # The reason as a code with parameters (core.reasons), rendered in the reader's language.
    reason_code = models.CharField(max_length=64, blank=True)
    reason_params = models.JSONField(default=dict, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    deadline_at = models.DateTimeField(null=True, blank=True)
    extensions = models.PositiveSmallIntegerField(default=0)
    idle_timeout_minutes = models.PositiveIntegerField(null=True, blank=True)
    last_activity_at = models.DateTimeField(null=True, blank=True)
    idle_warned_at = models.DateTimeField(null=True, blank=True)
    # GPU-aware culling (workloads.gpu_idle): the rule copied at launch (0: off), when the
    # owner last kept it (the idle window starts again) and when it was last warned.
    gpu_idle_percent = models.PositiveSmallIntegerField(default=0)
    gpu_idle_minutes = models.PositiveIntegerField(default=0)
    gpu_kept_at = models.DateTimeField(null=True, blank=True)
    gpu_warned_at = models.DateTimeField(null=True, blank=True)

    # What admission charged to the quota chain, given back exactly when the workload ends.
    quota_request = models.JSONField(default=dict, blank=True)
    charged = models.BooleanField(default=False)
    # Who pays, resolved at launch from the grant (workloads.payer); both empty: the tenant.
    payer_tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    payer_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # The backend's own record (processes, ports, object names): JSON, never shown to users.
    backend_state = models.JSONField(default=dict, blank=True)

    # Not columns: set on fetched workloads for the pages (workloads.teaching.queries: the
    # class dashboard; workloads.views: My Desktop).
    gpu_hours_now: Decimal
    gpu_busy: int | None
    idle_minutes: int | None
    minutes_left: int | None
    open_suffix: str

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["owner", "state"]),
            models.Index(fields=["tenant", "state"]),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.state})"

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE

    @property
    def open_path(self) -> str:
        return f"/nb/{self.id}/"

    @property
    def command_text(self) -> str:
        """The command as typed (``constants.command_text``)."""
        return command_text(self.command or [])


class WorkloadGpuSample(models.Model):
    """A workload's GPUs at ``time`` (``workloads.utilisation``): the mean utilisation of the
    devices it holds and the memory used on them, or the mean of ``span_seconds`` of samples
    once downsampled."""

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="gpu_samples")
    time = models.DateTimeField()
    utilisation = models.PositiveSmallIntegerField()  # percent
    memory_used_mib = models.PositiveIntegerField(default=0)
    span_seconds = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["workload", "time"]
        indexes = [models.Index(fields=["workload", "time"]), models.Index(fields=["time"])]

    def __str__(self) -> str:
        return f"{self.workload_id} {self.time:%H:%M}: {self.utilisation} %"


class WorkloadEvent(models.Model):
    """One transition (or a warning) of a workload, with who and why."""

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="events")
    time = models.DateTimeField(auto_now_add=True, db_index=True)
    from_state = models.CharField(max_length=16, blank=True)
    to_state = models.CharField(max_length=16)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    reason = models.CharField(max_length=500, blank=True)  # in English
    reason_code = models.CharField(max_length=64, blank=True)
    reason_params = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["time", "id"]

    def __str__(self) -> str:
        return f"{self.workload_id}: {self.from_state} → {self.to_state}"


# --- Models and serving (workloads.model_registry, workloads.serving; docs/serving.md) --------


class MlModel(models.Model):
    """A named model with numbered, immutable versions; seen like a dataset (``visibility``)."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True, max_length=5000)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="ml_models"
    )
    visibility = models.CharField(
        max_length=8, choices=Visibility.choices, default=Visibility.PRIVATE
    )
    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "slug"]
        constraints = [
            models.CheckConstraint(
                condition=~Q(visibility="tenant") | Q(tenant__isnull=False),
                name="model_tenant_visibility_names_a_tenant",
            )
        ]

    def __str__(self) -> str:
        return self.name


class ModelVersion(models.Model):
    """Files copied under ``MODELS_DIR/<path>`` once and never changed, with provenance."""

    model = models.ForeignKey(MlModel, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    framework = models.CharField(max_length=16, choices=Framework.choices)
    path = models.CharField(max_length=500)  # relative to MODELS_DIR
    source_job = models.ForeignKey(
        Workload, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    dataset = models.ForeignKey(
        Dataset, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    metrics = models.JSONField(default=dict, blank=True)
    size_bytes = models.PositiveBigIntegerField(default=0)
    files = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["model", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["model", "number"], name="model_version_number")
        ]

    def __str__(self) -> str:
        return f"{self.model.slug} v{self.number}"


class ModelAlias(models.Model):
    """A movable name for one version of a model ("production", "latest")."""

    model = models.ForeignKey(MlModel, on_delete=models.CASCADE, related_name="aliases")
    name = models.SlugField(max_length=40)
    version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="aliases")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["model", "name"], name="model_alias_name")]

    def __str__(self) -> str:
        return f"{self.model.slug}@{self.name}"


class ServingEndpoint(models.Model):
    """A model version served at ``/serve/<slug>/`` by one serving workload, scaled between
    ``min_replicas`` and ``max_replicas`` aiming at ``target_concurrency`` requests in flight
    per replica; ``schedule`` raises the minimum in its windows (昼推夜训)."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=100)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="endpoints"
    )
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.PROTECT, related_name="+")
    version = models.ForeignKey(ModelVersion, on_delete=models.PROTECT, related_name="endpoints")
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="+")
    min_replicas = models.PositiveSmallIntegerField(default=1)
    max_replicas = models.PositiveSmallIntegerField(default=1)
    target_concurrency = models.PositiveSmallIntegerField(default=4)
    # Percent of its GPU each replica aims at, where the backend knows it; 0: requests only.
    target_gpu_utilisation = models.PositiveSmallIntegerField(
        default=0, validators=[MaxValueValidator(100)]
    )
    scale_to_zero_after_s = models.PositiveIntegerField(default=300)
    # [{"days": [0, 1, 2, 3, 4], "start": "08:00", "end": "22:00", "min_replicas": 2}]
    schedule = models.JSONField(default=list, blank=True)
    rate_limit = models.PositiveIntegerField(default=50)  # requests per second
    workload = models.OneToOneField(
        Workload, null=True, blank=True, on_delete=models.SET_NULL, related_name="endpoint"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_request_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name", "slug"]

    def __str__(self) -> str:
        return self.name

    @property
    def model_name(self) -> str:
        """The name the v2 protocol knows it by: /v2/models/<model_name>/infer."""
        return self.version.model.slug

    @property
    def serve_path(self) -> str:
        return f"/serve/{self.slug}/"


class EndpointKey(models.Model):
    """An API key of an endpoint (``Authorization: Bearer``): kept as a SHA-256, shown once."""

    endpoint = models.ForeignKey(ServingEndpoint, on_delete=models.CASCADE, related_name="keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12)
    digest = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.endpoint.slug}: {self.name}"
