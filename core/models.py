"""The audit log (one row for every state change made through a service function) and the
idempotency keys of create requests."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q


class AuditEventQuerySet(models.QuerySet["AuditEvent"]):
    def visible_to(self, access: Any) -> AuditEventQuerySet:
        """The events one person reads: those of the tenants they administer, and their own
        actions; superusers read everything.

        ``access`` answers like ``tenants.permissions.Access`` (``is_superuser``, ``user_id``,
        ``administered_tenants(prefix)``); it is passed in, not imported, so that the audit
        log stays below the apps that write to it.
        """
        scope = access.administered_tenants(prefix="tenant__")
        if not access.is_superuser and access.user_id is not None:
            scope |= Q(actor_id=access.user_id)
        return self.filter(scope).select_related("actor", "tenant")


class AuditEvent(models.Model):
    time = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    action = models.CharField(max_length=64, db_index=True)
    target_type = models.CharField(max_length=64)
    target_id = models.CharField(max_length=64, blank=True)
    target_repr = models.CharField(max_length=255, blank=True)
    # The tenant the change belongs to, so an admin sees the events of their subtree.
    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    data = models.JSONField(default=dict, blank=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        db_table = "portal_auditevent"  # created by portal's first migration, kept as it is
        ordering = ["-time", "-id"]

    def __str__(self) -> str:
        return f"{self.time:%Y-%m-%d %H:%M} {self.actor} {self.action} {self.target_repr}"


class IdempotencyKey(models.Model):
    """A create request a client may retry: the first answer, kept for the same key.

    Written in the same transaction as what the request created, so a retry after a lost
    answer finds either both (and gets the first answer again) or neither (and creates it
    once). Keys are per person and kept for ``core.idempotency.KEEP``.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    scope = models.CharField(max_length=200)  # "POST /api/v1/workloads/launch/"
    fingerprint = models.CharField(max_length=64)  # sha256 of the request body
    status = models.PositiveSmallIntegerField()
    response = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "key"], name="idempotency_key_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.user_id}:{self.key}"


class Notice(models.Model):
    """A message to one person (a budget at 80 %, say), kept as a reason code with parameters
    so that it renders in the reader's language (``core.reasons``), with the English text
    beside it. ``dedupe_key`` makes a notice once-only per person: a second ``notify`` with the
    same key adds nothing (``core.notices``)."""

    class Level(models.TextChoices):
        INFO = "info", "info"
        WARNING = "warning", "warning"
        ERROR = "error", "error"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    level = models.CharField(max_length=8, choices=Level.choices, default=Level.INFO)
    reason_code = models.CharField(max_length=64)
    reason_params = models.JSONField(default=dict, blank=True)
    text = models.CharField(max_length=500)  # in English, for logs and the API
    link = models.CharField(max_length=300, blank=True)  # a page of the portal, e.g. /teaching/x/
    dedupe_key = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "dedupe_key"],
                condition=~Q(dedupe_key=""),
                name="one_notice_per_user_and_key",
            )
        ]
        indexes = [
            models.Index(
                fields=["user", "created_at"],
                condition=Q(read_at__isnull=True),
                name="notice_unread",
            )
        ]

    def __str__(self) -> str:
        return f"{self.user_id}: {self.text}"
