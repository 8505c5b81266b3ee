from __future__ import annotations

from decimal import Decimal

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from billing.models import Account, LedgerEntry, PricePlan, UsageInterval
from scheduling.models import Cluster
from tenants.models import Tenant, User


class OffpeakSerializer(serializers.Serializer):
    start = serializers.TimeField(format="%H:%M")
    end = serializers.TimeField(format="%H:%M")


class PricePlanSerializer(serializers.ModelSerializer[PricePlan]):
    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    offpeak = serializers.SerializerMethodField()
    created_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )

    class Meta:
        model = PricePlan
        fields = [
            "id",
            "cluster",
            "effective_from",
            "gpu_hour",
            "gpu_hour_by_model",
            "cpu_core_hour",
            "memory_gib_hour",
            "storage_gib_month",
            "priority_multipliers",
            "queue_multipliers",
            "offpeak",
            "offpeak_multiplier",
            "note",
            "created_by",
            "created_at",
        ]
        read_only_fields = fields

    @extend_schema_field(OffpeakSerializer(allow_null=True))
    def get_offpeak(self, plan: PricePlan) -> dict[str, str] | None:
        if plan.offpeak_start is None or plan.offpeak_end is None:
            return None
        return {
            "start": plan.offpeak_start.strftime("%H:%M"),
            "end": plan.offpeak_end.strftime("%H:%M"),
        }


class PriceField(serializers.DecimalField):
    """A price: a number or numeric string, four decimals, not negative."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(
            max_digits=12,
            decimal_places=4,
            min_value=Decimal(0),
            required=False,
            **kwargs,  # type: ignore[arg-type]
        )


class PricePlanCreateSerializer(serializers.Serializer):
    """A new version of a cluster's prices from ``effective_from`` (now or later)."""

    cluster = serializers.SlugRelatedField(slug_field="slug", queryset=Cluster.objects.all())
    effective_from = serializers.DateTimeField()
    gpu_hour = PriceField(help_text="Per hour of a whole GPU of a model not listed.")
    gpu_hour_by_model = serializers.DictField(
        child=PriceField(), required=False, help_text='Per GPU model, e.g. {"A100": "2.50"}.'
    )
    cpu_core_hour = PriceField()
    memory_gib_hour = PriceField()
    storage_gib_month = PriceField()
    priority_multipliers = serializers.DictField(
        child=PriceField(), required=False, help_text='By priority class, e.g. {"low": "0.5"}.'
    )
    queue_multipliers = serializers.DictField(child=PriceField(), required=False)
    offpeak = OffpeakSerializer(required=False, allow_null=True)
    offpeak_multiplier = PriceField(help_text="In the off-peak window (0: free).")
    note = serializers.CharField(required=False, allow_blank=True, max_length=200)


class AccountSerializer(serializers.ModelSerializer[Account]):
    tenant: serializers.SlugRelatedField[Tenant] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    user: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    name = serializers.CharField(read_only=True)
    total = serializers.DecimalField(
        max_digits=18,
        decimal_places=2,
        source="total_exact",
        read_only=True,
        help_text="What the account owes: the sum of its entries, to the cent.",
    )
    total_exact = serializers.DecimalField(max_digits=18, decimal_places=6, read_only=True)
    entries = serializers.IntegerField(source="entry_count", read_only=True)

    class Meta:
        model = Account
        fields = ["id", "name", "tenant", "user", "total", "total_exact", "entries", "created_at"]
        read_only_fields = fields


class LedgerEntrySerializer(serializers.ModelSerializer[LedgerEntry]):
    actor: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    workload = serializers.UUIDField(source="interval.workload_id", read_only=True, default=None)

    class Meta:
        model = LedgerEntry
        fields = [
            "id",
            "account",
            "kind",
            "amount",
            "description",
            "details",
            "period_start",
            "period_end",
            "interval",
            "workload",
            "corrects",
            "actor",
            "created_at",
        ]
        read_only_fields = fields


class CorrectionSerializer(serializers.Serializer):
    amount = serializers.CharField(help_text="Signed, e.g. -2.50 to give back 2.50.")
    reason = serializers.CharField(max_length=200)


class UsageIntervalSerializer(serializers.ModelSerializer[UsageInterval]):
    class Meta:
        model = UsageInterval
        fields = [
            "id",
            "workload",
            "account",
            "workload_name",
            "owner_name",
            "flavor_name",
            "started_at",
            "ended_at",
            "settled_until",
            "charged",
            "workers",
            "cpu_milli",
            "memory_mib",
            "gpus",
            "gpu_share_milli",
            "gpu_model",
            "priority_class",
            "queue",
        ]
        read_only_fields = fields
