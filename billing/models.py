"""Price plans, usage intervals, accounts and the ledger.

Money is ``Decimal`` with six places (micro-units of the currency) everywhere it is stored;
prices are per unit-hour with four places. The only rounding is in
``billing.pricing.round_amount``: an interval's exact cost (a ``Fraction``) up to its watermark
is rounded there, and each charge is the rounded cost minus what the interval was charged
before, so repeated settlements never drift (see docs/billing.md).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import Q

from billing.choices import (
    BudgetPeriod,
    BudgetPolicy,
    CreditSource,
    EntryKind,
    InvoiceState,
    LineKind,
)


class PricePlan(models.Model):
    """One version of a cluster's prices, in force from ``effective_from`` until the next
    version's. A version is never changed: a price change is a new version from a stated time
    (``billing.services.create_plan``)."""

    cluster = models.ForeignKey(
        "scheduling.Cluster", on_delete=models.PROTECT, related_name="price_plans"
    )
    effective_from = models.DateTimeField()
    # Per hour of one whole GPU, by model; a share pays its fraction (the share admission
    # charged: the larger of its compute and memory share).
    gpu_hour = models.DecimalField(
        max_digits=12, decimal_places=4, default=Decimal(0), help_text="Unlisted models."
    )
    gpu_hour_by_model = models.JSONField(default=dict, blank=True)  # {"A100": "2.5000"}
    cpu_core_hour = models.DecimalField(max_digits=12, decimal_places=4, default=Decimal(0))
    memory_gib_hour = models.DecimalField(max_digits=12, decimal_places=4, default=Decimal(0))
    storage_gib_month = models.DecimalField(
        max_digits=12, decimal_places=4, default=Decimal(0)
    )  # not metered yet
    priority_multipliers = models.JSONField(default=dict, blank=True)  # {"preemptible": "0.5"}
    queue_multipliers = models.JSONField(default=dict, blank=True)  # {"research": "1.2"}
    # A daily window in the portal's time zone (start > end: across midnight); empty: none.
    offpeak_start = models.TimeField(null=True, blank=True)
    offpeak_end = models.TimeField(null=True, blank=True)
    offpeak_multiplier = models.DecimalField(max_digits=8, decimal_places=4, default=Decimal(1))
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["cluster", "effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "effective_from"], name="one_price_version_per_time"
            )
        ]

    def __str__(self) -> str:
        return f"{self.cluster.slug} prices from {self.effective_from:%Y-%m-%d %H:%M}"


class Account(models.Model):
    """Who is charged: a tenant (class, project, department) or a person."""

    tenant = models.OneToOneField(
        "tenants.Tenant", null=True, blank=True, on_delete=models.PROTECT, related_name="account"
    )
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="billing_account",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["pk"]
        constraints = [
            models.CheckConstraint(
                condition=Q(tenant__isnull=False, user__isnull=True)
                | Q(tenant__isnull=True, user__isnull=False),
                name="account_tenant_or_person",
            )
        ]

    def __str__(self) -> str:
        return self.tenant.name if self.tenant is not None else str(self.user)

    @property
    def name(self) -> str:
        return str(self)


class UsageInterval(models.Model):
    """What one workload held from a transition into a holding state (Starting, Running,
    Stopping) to the transition out of them, with the resources snapshotted as they were
    held. ``settled_until`` is the watermark: the interval is charged up to there, and
    ``charged`` is what it was charged in all."""

    workload = models.ForeignKey(
        "workloads.Workload",
        null=True,
        on_delete=models.SET_NULL,
        related_name="usage_intervals",
    )
    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="intervals")
    cluster = models.ForeignKey("scheduling.Cluster", on_delete=models.PROTECT, related_name="+")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, on_delete=models.SET_NULL, related_name="+"
    )
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    settled_until = models.DateTimeField()
    charged = models.DecimalField(max_digits=18, decimal_places=6, default=Decimal(0))
    is_settled = models.BooleanField(default=False)  # closed and charged to its end
    # The resources held, in all (all workers): snapshotted when the interval opens.
    workers = models.PositiveSmallIntegerField(default=1)
    cpu_milli = models.PositiveIntegerField(default=0)
    memory_mib = models.PositiveBigIntegerField(default=0)
    gpus = models.PositiveIntegerField(default=0)  # whole devices
    gpu_share_milli = models.PositiveIntegerField(default=0)  # shares, thousandths of a device
    gpu_model = models.CharField(max_length=64, blank=True)
    # Storage held (a dataset's files): priced per GiB-month (``billing.storage``).
    storage_mib = models.PositiveBigIntegerField(default=0)
    dataset = models.ForeignKey(
        "workloads.Dataset",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    priority_class = models.CharField(max_length=63, blank=True)
    queue = models.CharField(max_length=63, blank=True)
    # Names as they were, for statements that outlive renames.
    workload_name = models.CharField(max_length=100, blank=True)
    owner_name = models.CharField(max_length=150, blank=True)
    flavor_name = models.CharField(max_length=100, blank=True)

    class Meta:
        ordering = ["started_at", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["workload"],
                condition=Q(ended_at__isnull=True),
                name="one_open_interval_per_workload",
            ),
            models.UniqueConstraint(
                fields=["dataset"],
                condition=Q(ended_at__isnull=True),
                name="one_open_interval_per_dataset",
            ),
        ]
        indexes = [
            models.Index(
                fields=["id"], condition=Q(is_settled=False), name="usage_interval_unsettled"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workload_name} {self.started_at:%Y-%m-%d %H:%M} → {self.ended_at or '…'}"

    @property
    def gpu_milli(self) -> int:
        """Thousandths of a device held in all, whole devices and shares together."""
        return self.gpus * 1000 + self.gpu_share_milli


class LedgerEntryQuerySet(models.QuerySet["LedgerEntry"]):
    def update(self, **kwargs: Any) -> int:
        raise PermissionDenied("ledger entries are never changed; add a correction")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise PermissionDenied("ledger entries are never deleted; add a correction")


class LedgerEntry(models.Model):
    """One immutable signed amount on an account: positive is owed (a charge), negative is
    given back. A mistake is answered with a correction entry, never an edit."""

    # Indexed with created_at below (an account's entries in time order).
    account = models.ForeignKey(
        Account, on_delete=models.PROTECT, related_name="entries", db_index=False
    )
    kind = models.CharField(max_length=12, choices=EntryKind.choices, default=EntryKind.CHARGE)
    amount = models.DecimalField(max_digits=18, decimal_places=6)
    interval = models.ForeignKey(
        UsageInterval, null=True, blank=True, on_delete=models.PROTECT, related_name="entries"
    )
    period_start = models.DateTimeField(null=True, blank=True)
    period_end = models.DateTimeField(null=True, blank=True)
    description = models.CharField(max_length=300)
    details = models.JSONField(default=dict, blank=True)  # the priced segments, names, rates
    # Set on the few entries a person made (corrections, credits): partial indexes below,
    # not an index entry for each of the 100,000 charges of a settlement tick.
    corrects = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="corrections",
        db_index=False,
    )
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = LedgerEntryQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "pk"]
        verbose_name_plural = "ledger entries"
        indexes = [
            models.Index(fields=["account", "created_at"], name="ledger_account_time"),
            # Spend per period (budgets, invoices): a charge counts at its period_start.
            models.Index(fields=["account", "period_start"], name="ledger_account_period"),
            models.Index(
                fields=["corrects"], condition=Q(corrects__isnull=False), name="ledger_corrects"
            ),
            models.Index(fields=["actor"], condition=Q(actor__isnull=False), name="ledger_actor"),
        ]

    def __str__(self) -> str:
        return f"{self.amount} {self.description}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None or kwargs.get("force_update"):
            raise PermissionDenied("ledger entries are never changed; add a correction")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise PermissionDenied("ledger entries are never deleted; add a correction")


class Invoice(models.Model):
    """A payer's closed month: the ledger entries assigned to it (``InvoicedEntry``), grouped
    into lines with the names as they were. ``total`` is exactly the sum of those entries. A
    closed invoice is never changed; an open month is computed live (``billing.invoices``)."""

    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="invoices")
    period_start = models.DateTimeField()  # local midnight of the month's first day
    period_end = models.DateTimeField()  # local midnight of the next month's first day
    number = models.CharField(max_length=32, unique=True)
    state = models.CharField(
        max_length=8, choices=InvoiceState.choices, default=InvoiceState.CLOSED
    )
    total = models.DecimalField(max_digits=18, decimal_places=6, default=Decimal(0))
    payer_name = models.CharField(max_length=200)
    closed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-period_start", "account_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["account", "period_start"], name="one_invoice_per_account_month"
            )
        ]

    def __str__(self) -> str:
        return f"{self.number} {self.payer_name}"


class InvoiceLine(models.Model):
    """One usage interval's charges in the month (hours and amounts summed), or one
    correction or credit entry. The names are snapshots: renames do not reach them."""

    invoice = models.ForeignKey(Invoice, on_delete=models.CASCADE, related_name="lines")
    position = models.PositiveIntegerField(default=0)
    kind = models.CharField(max_length=12, choices=LineKind.choices, default=LineKind.CHARGE)
    interval = models.ForeignKey(
        UsageInterval, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    entry = models.ForeignKey(  # the correction or credit entry of a line of its own
        LedgerEntry, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    person = models.CharField(max_length=150, blank=True)
    workload = models.CharField(max_length=100, blank=True)
    size = models.CharField(max_length=100, blank=True)
    description = models.CharField(max_length=300, blank=True)
    hours = models.DecimalField(max_digits=18, decimal_places=6, default=Decimal(0))
    # The average over the line: amount / hours (prices may change within a line).
    unit_price = models.DecimalField(max_digits=18, decimal_places=6, null=True, blank=True)
    amount = models.DecimalField(max_digits=18, decimal_places=6)

    class Meta:
        ordering = ["invoice", "position", "pk"]

    def __str__(self) -> str:
        return f"{self.invoice.number} #{self.position} {self.amount}"


class InvoicedEntry(models.Model):
    """Which invoice a ledger entry went into: each entry into exactly one (the entry itself
    is immutable, so the assignment lives here)."""

    entry = models.OneToOneField(
        LedgerEntry, primary_key=True, on_delete=models.PROTECT, related_name="invoiced"
    )
    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, related_name="+")

    def __str__(self) -> str:
        return f"entry {self.entry_id} → invoice {self.invoice_id}"


def default_thresholds() -> list[int]:
    return [80, 100]


class Budget(models.Model):
    """What a tenant (class, department, project) may spend per month or term: an allowance
    per period (granted as a credit lot of that period, ``CreditLot``), warnings at
    ``thresholds`` per cent, and ``policy`` for when it is used up. A department's budget
    covers the spend of its whole subtree. Written only by ``billing.budgets``."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.PROTECT, related_name="budgets")
    period = models.CharField(
        max_length=8, choices=BudgetPeriod.choices, default=BudgetPeriod.MONTH
    )
    allowance = models.DecimalField(max_digits=18, decimal_places=6, default=Decimal(0))
    thresholds = models.JSONField(default=default_thresholds, blank=True)  # per cent, 1..100
    policy = models.CharField(
        max_length=12, choices=BudgetPolicy.choices, default=BudgetPolicy.BLOCK
    )
    stop_grace_minutes = models.PositiveIntegerField(default=15)
    is_active = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant__path", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant"], condition=Q(is_active=True), name="one_active_budget_per_tenant"
            )
        ]

    def __str__(self) -> str:
        return f"budget of {self.tenant.name} per {self.period}"


class CreditLot(models.Model):
    """One grant of credit to an account, valid from ``granted_at`` until ``expires_at``
    (empty: no end). What remains of it is never stored: it is derived from the ledger
    (``billing.budgets.lots``), so it cannot drift. Never changed once written, except the
    amount of the current period's allowance lot when the budget's allowance changes."""

    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="credit_lots")
    amount = models.DecimalField(max_digits=18, decimal_places=6)
    granted_at = models.DateTimeField()
    expires_at = models.DateTimeField(null=True, blank=True)
    source = models.CharField(max_length=10, choices=CreditSource.choices)
    budget = models.ForeignKey(
        Budget, null=True, blank=True, on_delete=models.PROTECT, related_name="lots"
    )  # an allowance lot's budget
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["granted_at", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["budget", "granted_at"],
                condition=Q(source="allowance"),
                name="one_allowance_lot_per_budget_period",
            )
        ]

    def __str__(self) -> str:
        return f"{self.amount} {self.source} from {self.granted_at:%Y-%m-%d}"


class BudgetAlert(models.Model):
    """A threshold of a budget crossed in one period: written once (the unique constraint),
    so its notices go out once; the 100 % alert's ``exhausted_since`` starts a stop policy's
    grace."""

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="alerts")
    period_start = models.DateTimeField()
    threshold = models.PositiveSmallIntegerField()
    created_at = models.DateTimeField()
    # The 100 % alert: since when the budget is used up (a stop policy's grace counts from
    # here); cleared when credit makes it no longer used up.
    exhausted_since = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)  # a stop policy acted

    class Meta:
        ordering = ["period_start", "threshold"]
        constraints = [
            models.UniqueConstraint(
                fields=["budget", "period_start", "threshold"], name="one_alert_per_threshold"
            )
        ]

    def __str__(self) -> str:
        return f"{self.budget} {self.threshold}% from {self.period_start:%Y-%m-%d}"
