"""The billing API: prices, accounts with their totals, ledger entries, usage intervals.

Who sees what: superusers everything; people who manage a tenant (admins, teachers, TAs) the
accounts of the tenants in their subtrees and the usage there; everyone their own account
and their own usage (and what it cost, whoever pays). Prices are public to the people who may
use the cluster; only superusers set them. Anything else is simply not found.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.db.models import Count, DecimalField, Q, QuerySet, Sum, Value
from django.db.models.functions import Coalesce
from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, permissions, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from billing import services
from billing.api import serializers as s
from billing.models import Account, LedgerEntry, PricePlan, UsageInterval
from scheduling.models import Cluster
from tenants.choices import MANAGING_ROLES
from tenants.permissions import Access
from workloads.models import Grant


# Filters by id, never model choices: django-filter's form in the browsable API would list every
# workload and account of the portal as the choices of a dropdown.
class IdFilter(filters.NumberFilter):
    """A row id: a whole number in the database's range, else a 400 (not a 500 from the
    database's integer overflow)."""

    field_class = forms.IntegerField

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, min_value=1, max_value=2**63 - 1, **kwargs)


class LedgerEntryFilter(filters.FilterSet):
    account = IdFilter(field_name="account_id")
    workload = filters.UUIDFilter(field_name="interval__workload_id")

    class Meta:
        model = LedgerEntry
        fields = ["account", "kind", "workload"]


class UsageIntervalFilter(filters.FilterSet):
    account = IdFilter(field_name="account_id")
    workload = filters.UUIDFilter(field_name="workload_id")

    class Meta:
        model = UsageInterval
        fields = ["account", "workload"]


class OperatorsSetPrices(permissions.BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        return request.method in permissions.SAFE_METHODS or bool(user.is_superuser)


def usable_clusters(user: Any) -> QuerySet[Cluster]:
    """The clusters ``user`` may run on or manages grants for (all, for a superuser)."""
    if Access.of(user).is_superuser:
        return Cluster.objects.all()
    grants = Grant.objects.visible_to(user)
    named = Q(pk__in=grants.filter(cluster__isnull=False).values("cluster"))
    if grants.filter(cluster__isnull=True).exists():
        named |= Q(is_default=True)
    return Cluster.objects.filter(named)


def visible_accounts(user: Any) -> Q:
    access = Access.of(user)
    return access.tenant_filter(MANAGING_ROLES, prefix="tenant__") | Q(user_id=user.pk)


class PricePlanViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):
    """Price plan versions of the clusters you may use; a new version (superusers) takes
    effect from its ``effective_from``, now or later, and never changes the past."""

    queryset = PricePlan.objects.none()
    serializer_class = s.PricePlanSerializer
    permission_classes = [OperatorsSetPrices]
    filterset_fields = ["cluster__slug"]

    def get_queryset(self) -> QuerySet[PricePlan]:
        return (
            PricePlan.objects.filter(cluster__in=usable_clusters(self.request.user))
            .select_related("cluster", "created_by")
            .order_by("cluster__slug", "effective_from")
        )

    @extend_schema(request=s.PricePlanCreateSerializer, responses={201: s.PricePlanSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        given = s.PricePlanCreateSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        data = dict(given.validated_data)
        plan = services.create_plan(
            actor=request.user,
            cluster=data.pop("cluster"),
            effective_from=data.pop("effective_from"),
            **data,
        )
        return Response(s.PricePlanSerializer(plan).data, status=status.HTTP_201_CREATED)


class AccountViewSet(viewsets.ReadOnlyModelViewSet[Account]):
    """Accounts with what each owes (the sum of its ledger entries)."""

    queryset = Account.objects.none()
    serializer_class = s.AccountSerializer
    filterset_fields = ["tenant__slug", "user__username"]

    def get_queryset(self) -> QuerySet[Account]:
        zero = Value(0, output_field=DecimalField(max_digits=18, decimal_places=6))
        return (
            Account.objects.filter(visible_accounts(self.request.user))
            .select_related("tenant", "user")
            .annotate(
                total_exact=Coalesce(Sum("entries__amount"), zero), entry_count=Count("entries")
            )
            .order_by("pk")
        )


class LedgerEntryViewSet(viewsets.ReadOnlyModelViewSet[LedgerEntry]):
    """Ledger entries of the accounts you see, and those for your own usage. Entries are
    never changed: ``correct`` adds a correction entry (admins of the account)."""

    queryset = LedgerEntry.objects.none()
    serializer_class = s.LedgerEntrySerializer
    filterset_class = LedgerEntryFilter

    def get_queryset(self) -> QuerySet[LedgerEntry]:
        user = self.request.user
        mine = Q(account__in=Account.objects.filter(visible_accounts(user))) | Q(
            interval__owner_id=user.pk
        )
        return LedgerEntry.objects.filter(mine).select_related("interval", "actor").order_by("pk")

    @extend_schema(request=s.CorrectionSerializer, responses={201: s.LedgerEntrySerializer})
    @action(detail=True, methods=["post"])
    def correct(self, request: Request, pk: str) -> Response:
        entry = self.get_object()
        given = s.CorrectionSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        correction = services.correct(entry=entry, actor=request.user, **given.validated_data)
        return Response(s.LedgerEntrySerializer(correction).data, status=status.HTTP_201_CREATED)


class UsageIntervalViewSet(viewsets.ReadOnlyModelViewSet[UsageInterval]):
    """What workloads held and when: your own, and those of the tenants you manage."""

    queryset = UsageInterval.objects.none()
    serializer_class = s.UsageIntervalSerializer
    filterset_class = UsageIntervalFilter

    def get_queryset(self) -> QuerySet[UsageInterval]:
        user = self.request.user
        access = Access.of(user)
        seen = access.tenant_filter(MANAGING_ROLES, prefix="tenant__") | Q(owner_id=user.pk)
        return UsageInterval.objects.filter(seen).order_by("pk")
