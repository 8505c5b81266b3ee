"""The budgets and credits API (``/api/v1/billing/budgets/``, ``/api/v1/billing/credits/``).

Who sees what: the people who manage a tenant (admins, teachers, TAs) see the budgets and
credit lots of the tenants in their subtrees, superusers all; students see none (the App
Center shows them what is left of their class's). Only the tenant's admins (and superusers)
create, change, deactivate budgets and grant credit: anyone else gets a 403 saying so
("you do not administer ML-101"). Every write goes through ``billing.budgets``.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from billing import budgets
from billing.choices import BudgetPeriod, BudgetPolicy
from billing.models import Budget, CreditLot
from tenants.choices import MANAGING_ROLES
from tenants.models import Tenant, User
from tenants.permissions import Access


def money(help_text: str = "") -> serializers.DecimalField:
    return serializers.DecimalField(
        max_digits=18, decimal_places=6, read_only=True, help_text=help_text or None
    )


class BudgetStatusSerializer(serializers.Serializer):
    period_start = serializers.DateTimeField(source="period.start")
    period_end = serializers.DateTimeField(source="period.end")
    allowance = money("This period's allowance.")
    credits = money("Credit granted by hand, valid now.")
    spent = money("Spend of the subtree in the period.")
    remaining = money("Credit at hand; ≤ 0: used up.")
    percent = serializers.IntegerField()
    state = serializers.ChoiceField(choices=["ok", "warned", "exhausted"])


class BudgetSerializer(serializers.ModelSerializer[Budget]):
    tenant: serializers.SlugRelatedField[Tenant] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    created_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    status = serializers.SerializerMethodField()

    class Meta:
        model = Budget
        fields = [
            "id",
            "tenant",
            "period",
            "allowance",
            "thresholds",
            "policy",
            "stop_grace_minutes",
            "is_active",
            "created_by",
            "created_at",
            "updated_at",
            "status",
        ]
        read_only_fields = fields

    @extend_schema_field(BudgetStatusSerializer(allow_null=True))
    def get_status(self, budget: Budget) -> dict[str, Any] | None:
        if not budget.is_active:
            return None
        try:
            found = budgets.status(budget, self.context.get("now"))
        except DjangoValidationError:  # a term budget whose tenant lost its term dates
            return None
        return dict(BudgetStatusSerializer(found).data)


class BudgetWriteSerializer(serializers.Serializer):
    """The fields as given: the service checks them and names the field of a 400."""

    tenant = serializers.SlugRelatedField(
        slug_field="slug", queryset=Tenant.objects.all(), required=False
    )
    period = serializers.ChoiceField(choices=BudgetPeriod.choices, required=False)
    allowance = serializers.CharField(required=False, help_text="Per period, e.g. 500.00.")
    thresholds = serializers.ListField(
        child=serializers.IntegerField(), required=False, help_text="Per cent, e.g. [80, 100]."
    )
    policy = serializers.ChoiceField(choices=BudgetPolicy.choices, required=False)
    stop_grace_minutes = serializers.IntegerField(required=False)


class CreditLotSerializer(serializers.ModelSerializer[CreditLot]):
    tenant: serializers.SlugRelatedField[Tenant] = serializers.SlugRelatedField(
        source="account.tenant", slug_field="slug", read_only=True
    )
    created_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    consumed = serializers.SerializerMethodField()
    remaining = serializers.SerializerMethodField()

    class Meta:
        model = CreditLot
        fields = [
            "id",
            "tenant",
            "amount",
            "source",
            "granted_at",
            "expires_at",
            "note",
            "budget",
            "created_by",
            "consumed",
            "remaining",
        ]
        read_only_fields = fields

    def _state(self, lot: CreditLot) -> budgets.LotState | None:
        states: dict[int, budgets.LotState] = self.context.get("states") or {}
        return states.get(lot.pk)

    @extend_schema_field(serializers.DecimalField(max_digits=18, decimal_places=6))
    def get_consumed(self, lot: CreditLot) -> str:
        state = self._state(lot)
        return f"{state.consumed if state else 0:.6f}"

    @extend_schema_field(serializers.DecimalField(max_digits=18, decimal_places=6))
    def get_remaining(self, lot: CreditLot) -> str:
        state = self._state(lot)
        return f"{state.remaining if state else 0:.6f}"


class CreditGrantSerializer(serializers.Serializer):
    tenant = serializers.SlugRelatedField(slug_field="slug", queryset=Tenant.objects.all())
    amount = serializers.CharField(help_text="More than 0, e.g. 50.00.")
    expires_at = serializers.CharField(
        required=False, allow_blank=True, help_text="A date and time; empty: no end."
    )
    note = serializers.CharField(required=False, allow_blank=True, max_length=200)


def _managed(user: Any) -> Any:
    return Access.of(user).tenant_filter(MANAGING_ROLES, prefix="tenant__")


class BudgetViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Budgets of the tenants you manage, with where each stands now (``status``). A DELETE
    deactivates the budget (its history stays)."""

    queryset = Budget.objects.none()
    serializer_class = BudgetSerializer
    filterset_fields = ["tenant__slug", "is_active", "policy"]

    def get_queryset(self) -> QuerySet[Budget]:
        return (
            Budget.objects.filter(_managed(self.request.user))
            .select_related("tenant", "created_by")
            .order_by("tenant__path", "pk")
        )

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "now": timezone.now()}

    def _given(self, request: Request) -> dict[str, Any]:
        given = BudgetWriteSerializer(data=request.data, partial=True)
        given.is_valid(raise_exception=True)
        return dict(given.validated_data)

    @extend_schema(request=BudgetWriteSerializer, responses={201: BudgetSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = self._given(request)
        tenant = data.pop("tenant", None)
        if tenant is None:
            raise serializers.ValidationError({"tenant": ["give the tenant's slug"]})
        budget = budgets.create_budget(actor=request.user, tenant=tenant, **data)
        body = BudgetSerializer(budget, context=self.get_serializer_context()).data
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=BudgetWriteSerializer, responses={200: BudgetSerializer})
    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        budget = self.get_object()
        data = self._given(request)
        if "tenant" in data and data.pop("tenant") != budget.tenant:
            raise serializers.ValidationError({"tenant": ["a budget stays with its tenant"]})
        budget = budgets.update_budget(actor=request.user, budget=budget, **data)
        return Response(BudgetSerializer(budget, context=self.get_serializer_context()).data)

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        budgets.deactivate_budget(actor=request.user, budget=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


class CreditViewSet(mixins.ListModelMixin, mixins.CreateModelMixin, viewsets.GenericViewSet):
    """Credit lots of the tenants you manage (allowances of each period and credit granted
    by hand), each with what the ledger consumed of it and what remains. POST grants credit
    (admins of the tenant)."""

    queryset = CreditLot.objects.none()
    serializer_class = CreditLotSerializer
    filterset_fields = ["account__tenant__slug", "source"]

    def get_queryset(self) -> QuerySet[CreditLot]:
        return (
            CreditLot.objects.filter(
                Access.of(self.request.user).tenant_filter(
                    MANAGING_ROLES, prefix="account__tenant__"
                )
            )
            .select_related("account__tenant", "created_by")
            .order_by("-granted_at", "-pk")
        )

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        lots = self.filter_queryset(self.get_queryset())
        page = self.paginate_queryset(lots)
        shown = list(page if page is not None else lots)
        tenants = {lot.account.tenant_id: lot.account.tenant for lot in shown}
        states = budgets.lots_of([t for t in tenants.values() if t is not None])
        body = CreditLotSerializer(shown, many=True, context={"states": states}).data
        return self.get_paginated_response(body) if page is not None else Response(body)

    @extend_schema(request=CreditGrantSerializer, responses={201: CreditLotSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        given = CreditGrantSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        lot = budgets.grant_credit(actor=request.user, **given.validated_data)
        states = budgets.lots_of([lot.account.tenant]) if lot.account.tenant else {}
        body = CreditLotSerializer(lot, context={"states": states}).data
        return Response(body, status=status.HTTP_201_CREATED)
