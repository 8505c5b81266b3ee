"""Tenants, memberships, quotas, users and their personal API tokens."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models.functions import Lower
from django.utils.translation import gettext_lazy as _

from core.text import natural_sort_key
from tenants.choices import Role, TenantKind


class User(AbstractUser):
    """A person: student, teacher, TA or admin. Roles come from memberships, not from here."""

    student_number = models.CharField(
        _("student / staff number"), max_length=32, blank=True, db_index=True
    )
    display_name = models.CharField(_("display name"), max_length=150, blank=True)
    language = models.CharField(
        _("language"), max_length=10, choices=settings.LANGUAGES, blank=True
    )
    time_zone = models.CharField(_("time zone"), max_length=64, blank=True)
    # The username with its numbers padded, so that lists sort student2 before student10
    # in the database (and so in paginated API lists) on SQLite and PostgreSQL alike.
    sort_key = models.CharField(max_length=255, editable=False, db_index=True, default="")

    def __str__(self) -> str:
        return self.display_name or self.get_full_name() or self.username

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.sort_key = natural_sort_key(self.username)
        update_fields = kwargs.get("update_fields")
        if update_fields is not None and "username" in update_fields:
            kwargs["update_fields"] = {*update_fields, "sort_key"}
        super().save(*args, **kwargs)


class Tenant(models.Model):
    """A node of the tenant tree: school → department → class / project.

    ``path`` is the materialised list of ancestor ids ("/1/4/9/", ending with the tenant's
    own id) so that a subtree is one indexed prefix query.
    """

    kind = models.CharField(max_length=16, choices=TenantKind.choices)
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=64, unique=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    path = models.CharField(max_length=255, db_index=True, editable=False, default="")
    term_start = models.DateField(null=True, blank=True)
    term_end = models.DateField(null=True, blank=True)
    is_active = models.BooleanField(
        default=True, help_text=_("Inactive tenants (e.g. a class after its term) grant nothing.")
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["path"]
        permissions = [("manage_tenant", "Can manage the tenant's members, quotas and grants")]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(term_start__isnull=True)
                | models.Q(term_end__isnull=True)
                | models.Q(term_end__gte=models.F("term_start")),
                name="tenant_term_ends_after_start",
            ),
            # Class codes are typed by people ("ML-101" for "ml-101"): a code names one
            # tenant whatever its letter case, so a lookup ignoring case is never ambiguous.
            models.UniqueConstraint(Lower("slug"), name="tenant_slug_unique_ignoring_case"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def ancestor_ids(self) -> list[int]:
        """Ids from the root down to this tenant, itself included."""
        return [int(part) for part in self.path.strip("/").split("/") if part]

    @property
    def depth(self) -> int:
        return len(self.ancestor_ids) - 1


class Membership(models.Model):
    """A user's role on a tenant; the role applies to the tenant's whole subtree."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant__path", "user__sort_key"]
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="one_role_per_user_and_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.user} — {self.role} of {self.tenant}"


class Quota(models.Model):
    """Limits of a tenant (null: no limit at this level) and its current use.

    Use is kept as counters next to the limits so that admission can lock the chain of
    quotas from the school down and check and charge in one transaction. ``member_*`` limits
    apply to each member of the tenant separately.
    """

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="quota")

    gpus = models.DecimalField(
        _("GPUs (whole-GPU equivalents)"),
        max_digits=9,
        decimal_places=3,
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
    )
    gpu_memory_mib = models.PositiveBigIntegerField(_("GPU memory (MiB)"), null=True, blank=True)
    cpu_cores = models.DecimalField(
        _("CPU cores"),
        max_digits=9,
        decimal_places=3,
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
    )
    memory_mib = models.PositiveBigIntegerField(_("memory (MiB)"), null=True, blank=True)
    environments = models.PositiveIntegerField(_("concurrent environments"), null=True, blank=True)
    jobs = models.PositiveIntegerField(_("concurrent jobs"), null=True, blank=True)
    gpu_hours_per_term = models.DecimalField(
        _("GPU-hours per term"),
        max_digits=12,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
    )

    member_gpus = models.DecimalField(
        _("GPUs per member"),
        max_digits=9,
        decimal_places=3,
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
    )
    member_environments = models.PositiveIntegerField(
        _("environments per member"), null=True, blank=True
    )
    member_jobs = models.PositiveIntegerField(_("jobs per member"), null=True, blank=True)
    member_gpu_hours_per_term = models.DecimalField(
        _("GPU-hours per member per term"),
        max_digits=12,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
    )

    used_gpus = models.DecimalField(max_digits=9, decimal_places=3, default=0)
    used_gpu_memory_mib = models.PositiveBigIntegerField(default=0)
    used_cpu_cores = models.DecimalField(max_digits=9, decimal_places=3, default=0)
    used_memory_mib = models.PositiveBigIntegerField(default=0)
    used_environments = models.PositiveIntegerField(default=0)
    used_jobs = models.PositiveIntegerField(default=0)
    used_gpu_hours = models.DecimalField(max_digits=12, decimal_places=4, default=0)

    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"quota of {self.tenant}"


class MemberUsage(models.Model):
    """One member's current use inside one tenant, checked against the ``member_*`` limits."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="member_usage")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="usage"
    )
    used_gpus = models.DecimalField(max_digits=9, decimal_places=3, default=0)
    used_environments = models.PositiveIntegerField(default=0)
    used_jobs = models.PositiveIntegerField(default=0)
    used_gpu_hours = models.DecimalField(max_digits=12, decimal_places=4, default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user"], name="one_usage_row_per_member")
        ]

    def __str__(self) -> str:
        return f"use of {self.user} in {self.tenant}"


class ApiToken(models.Model):
    """A personal API token. Only its SHA-256 is stored; the secret is shown once."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, db_index=True)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class SshKey(models.Model):
    """A person's SSH public key for the portal's SSH gateway (docs/ssh.md). The fingerprint
    is unique across all accounts: one key identifies one person."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="ssh_keys"
    )
    name = models.CharField(_("name"), max_length=100)
    key = models.TextField(_("public key"))  # one line, OpenSSH format, comment kept
    fingerprint = models.CharField(_("fingerprint"), max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.fingerprint})"

    @property
    def algorithm(self) -> str:
        return self.key.split(" ", 1)[0]
