"""REST API for tenants, memberships, quotas, roster import, users, personal tokens
and SSH keys.

Querysets are scoped to what the caller may see (others' objects are 404); actions on a
visible object that the caller may not take are 403.
"""

from __future__ import annotations

from typing import Any, cast

from django.db.models import Q, QuerySet
from django.shortcuts import get_object_or_404
from django.utils.translation import gettext as _
from django_filters import rest_framework as filters
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer
from rest_framework.views import APIView

from core.parsers import StrictFormParser, StrictMultiPartParser
from tenants import roster, services
from tenants.api import serializers as s
from tenants.choices import MANAGING_ROLES
from tenants.models import ApiToken, Membership, SshKey, Tenant, User
from tenants.permissions import Access


def access(request: Request) -> Access:
    return Access.of(request.user)


def caller(request: Request) -> User:
    """The signed-in caller: every view here requires authentication (IsAuthenticated is the
    default permission), so the user is never anonymous."""
    return cast(User, request.user)


class TenantFilter(filters.FilterSet):
    parent = filters.CharFilter(field_name="parent__slug", lookup_expr="iexact")
    within = filters.CharFilter(method="filter_within", label="slug of a tenant: its subtree")

    class Meta:
        model = Tenant
        fields = ["kind", "is_active", "parent", "within"]

    def filter_within(self, queryset: QuerySet[Tenant], name: str, value: str) -> QuerySet[Tenant]:
        root = Tenant.objects.filter(slug__iexact=value).first()
        return queryset.filter(path__startswith=root.path) if root else queryset.none()


class TenantViewSet(viewsets.ModelViewSet[Tenant]):
    """The tenant tree. Admins change their subtree; everyone sees where they belong."""

    queryset = Tenant.objects.none()  # for the schema; requests use get_queryset
    serializer_class = s.TenantSerializer
    lookup_field = "slug"
    filterset_class = TenantFilter
    ordering_fields = ["path", "name", "slug", "created_at"]

    def get_queryset(self) -> QuerySet[Tenant]:
        return Tenant.objects.filter(access(self.request).visible_tenants()).select_related(
            "parent"
        )

    def get_object(self) -> Tenant:
        """By slug, in any letter case (``/tenants/ML-101/`` is ``ml-101``)."""
        tenant = get_object_or_404(
            self.filter_queryset(self.get_queryset()), slug__iexact=self.kwargs["slug"]
        )
        self.check_object_permissions(self.request, tenant)
        return tenant

    def perform_create(self, serializer: BaseSerializer[Tenant]) -> None:
        data = serializer.validated_data
        parent = data.get("parent")
        me = access(self.request)
        if parent is None:
            if not me.is_superuser:
                raise PermissionDenied(_("Only a superuser creates a top-level organisation."))
        elif not me.can_view(parent):
            raise ValidationError({"parent": _("no tenant %(slug)r") % {"slug": parent.slug}})
        elif not me.can_administer(parent):
            raise PermissionDenied(_("You do not administer %(name)s.") % {"name": parent.name})
        serializer.instance = services.create_tenant(actor=self.request.user, **data)

    def perform_update(self, serializer: BaseSerializer[Tenant]) -> None:
        tenant = serializer.instance
        assert tenant is not None  # an update's serializer is built with get_object()
        if not access(self.request).can_administer(tenant):
            raise PermissionDenied(_("You do not administer %(name)s.") % {"name": tenant.name})
        serializer.instance = services.update_tenant(
            actor=self.request.user, tenant=tenant, **serializer.validated_data
        )

    def perform_destroy(self, instance: Tenant) -> None:
        if not access(self.request).can_administer(instance.parent or instance):
            raise PermissionDenied(_("You do not administer %(name)s.") % {"name": instance.name})
        services.delete_tenant(actor=self.request.user, tenant=instance)

    @extend_schema(request=s.MoveSerializer, responses=s.TenantSerializer)
    @action(detail=True, methods=["post"])
    def move(self, request: Request, slug: str) -> Response:
        """Move this tenant and its subtree under another parent."""
        tenant = self.get_object()
        body = s.MoveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        parent = body.validated_data["parent"]
        me = access(request)
        if not me.can_view(parent):
            raise ValidationError({"parent": _("no tenant %(slug)r") % {"slug": parent.slug}})
        if not (me.can_administer(tenant) and me.can_administer(parent)):
            raise PermissionDenied(_("You must administer both the tenant and its new parent."))
        tenant = services.move_tenant(actor=request.user, tenant=tenant, parent=parent)
        return Response(self.get_serializer(tenant).data)

    @extend_schema(methods=["GET"], responses=s.QuotaSerializer)
    @extend_schema(methods=["PUT", "PATCH"], request=s.QuotaSerializer, responses=s.QuotaSerializer)
    @action(detail=True, methods=["get", "put", "patch"])
    def quota(self, request: Request, slug: str) -> Response:
        """Limits and current use. ``over_use`` lists limits set below what is in use."""
        tenant = self.get_object()
        quota = tenant.quota
        if request.method == "GET":
            return Response(s.QuotaSerializer(quota).data)
        if not access(request).can_set_quota(tenant):
            raise PermissionDenied(
                _("The limits of %(name)s are set by the admins of the tenants above it.")
                % {"name": tenant.name}
            )
        body = s.QuotaSerializer(quota, data=request.data, partial=request.method == "PATCH")
        body.is_valid(raise_exception=True)
        update = services.set_quota(actor=request.user, tenant=tenant, **body.validated_data)
        return Response(s.QuotaSerializer(update.quota).data)


class MembershipFilter(filters.FilterSet):
    tenant = filters.CharFilter(field_name="tenant__slug", lookup_expr="iexact")
    user = filters.CharFilter(field_name="user__username")
    within = filters.CharFilter(method="filter_within", label="slug of a tenant: its subtree")

    class Meta:
        model = Membership
        fields = ["tenant", "user", "role", "within"]

    def filter_within(
        self, queryset: QuerySet[Membership], name: str, value: str
    ) -> QuerySet[Membership]:
        root = Tenant.objects.filter(slug__iexact=value).first()
        return queryset.filter(tenant__path__startswith=root.path) if root else queryset.none()


class MembershipViewSet(viewsets.ModelViewSet[Membership]):
    """Who has which role where. Managers see their subtree's members; everyone sees their own."""

    queryset = Membership.objects.none()  # for the schema; requests use get_queryset
    serializer_class = s.MembershipSerializer
    filterset_class = MembershipFilter
    ordering_fields = ["created_at", "role"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> QuerySet[Membership]:
        me = access(self.request)
        return (
            Membership.objects.filter(
                me.tenant_filter(prefix="tenant__", roles=MANAGING_ROLES)
                | Q(user=self.request.user)
            )
            .select_related("user", "tenant")
            .distinct()
        )

    def _check(self, tenant: Tenant, role: str) -> None:
        me = access(self.request)
        if not me.can_view(tenant):
            raise ValidationError({"tenant": _("no tenant %(slug)r") % {"slug": tenant.slug}})
        if not (me.can_manage(tenant) and me.can_assign_role(tenant, role)):
            raise PermissionDenied(
                _("You cannot give the role %(role)s in %(tenant)s.")
                % {"role": role, "tenant": tenant.name}
            )

    def perform_create(self, serializer: BaseSerializer[Membership]) -> None:
        data = serializer.validated_data
        self._check(data["tenant"], data["role"])
        if Membership.objects.filter(user=data["user"], tenant=data["tenant"]).exists():
            raise ValidationError(
                {
                    "user": _("%(user)s is already a member; change the role of that membership")
                    % {"user": data["user"].username}
                }
            )
        serializer.instance = services.set_membership(actor=self.request.user, **data)

    def perform_update(self, serializer: BaseSerializer[Membership]) -> None:
        membership = serializer.instance
        assert membership is not None  # an update's serializer is built with get_object()
        data = serializer.validated_data
        if (
            data.get("tenant", membership.tenant) != membership.tenant
            or data.get("user", membership.user) != membership.user
        ):
            raise ValidationError({"tenant": _("only the role of a membership can change")})
        self._check(membership.tenant, membership.role)
        self._check(membership.tenant, data.get("role", membership.role))
        serializer.instance = services.set_membership(
            actor=self.request.user,
            tenant=membership.tenant,
            user=membership.user,
            role=data.get("role", membership.role),
        )

    def perform_destroy(self, instance: Membership) -> None:
        self._check(instance.tenant, instance.role)
        services.remove_membership(actor=self.request.user, membership=instance)


class RosterImportView(APIView):
    """Upload a class roster (CSV or .xlsx): every row is checked first; nothing is
    half-imported."""

    parser_classes = [StrictMultiPartParser, StrictFormParser]

    @extend_schema(
        request=s.RosterUploadSerializer,
        responses={
            200: s.RosterResultSerializer,
            400: OpenApiResponse(
                s.RowErrorSerializer(many=True),
                description="The rows' problems; nothing was imported.",
            ),
        },
    )
    def post(self, request: Request) -> Response:
        me = access(request)
        if not me.manages_anything():
            raise PermissionDenied(_("Only teachers and admins import rosters."))
        body = s.RosterUploadSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            result = services.import_roster(
                actor=request.user, data=body.validated_data["file"].read()
            )
        except roster.RosterError as exc:
            return Response({"file": [str(exc)]}, status=status.HTTP_400_BAD_REQUEST)
        except services.RosterRejected as exc:
            return Response(
                {"detail": str(exc), "errors": s.RowErrorSerializer(exc.errors, many=True).data},
                status=status.HTTP_400_BAD_REQUEST,
            )
        return Response(s.RosterResultSerializer(result).data)


class UserViewSet(viewsets.ReadOnlyModelViewSet[User]):
    """People: yourself, and the members of the tenants you manage."""

    queryset = User.objects.none()  # for the schema; requests use get_queryset
    serializer_class = s.UserSerializer
    filterset_fields = ["username", "student_number"]
    ordering_fields = ["username", "date_joined"]

    def get_queryset(self) -> QuerySet[User]:
        me = access(self.request)
        users = User.objects.all()
        if me.is_superuser:
            return users.order_by("sort_key")  # natural order: student2 before student10
        managed = me.tenant_filter(prefix="memberships__tenant__", roles=MANAGING_ROLES)
        return users.filter(managed | Q(pk=self.request.user.pk)).distinct().order_by("sort_key")

    @action(detail=False)
    def me(self, request: Request) -> Response:
        return Response(self.get_serializer(request.user).data)


class ApiTokenViewSet(
    mixins.CreateModelMixin, mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet[ApiToken]
):
    """Your personal API tokens. The secret is shown once, at creation; DELETE revokes."""

    queryset = ApiToken.objects.none()  # for the schema; requests use get_queryset
    serializer_class = s.ApiTokenSerializer

    def get_queryset(self) -> QuerySet[ApiToken]:
        return ApiToken.objects.filter(user=caller(self.request))

    @extend_schema(responses={201: s.NewApiTokenSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        body = self.get_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        token, secret = services.create_api_token(actor=request.user, **body.validated_data)
        data = s.NewApiTokenSerializer(token).data | {"token": secret}
        return Response(data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: ApiToken) -> None:
        services.revoke_api_token(actor=self.request.user, token=instance)


class SshKeyViewSet(
    mixins.CreateModelMixin, mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet[SshKey]
):
    """Your SSH public keys, for the portal's SSH gateway (docs/ssh.md). Only your own: any
    other key is 404."""

    queryset = SshKey.objects.none()  # for the schema; requests use get_queryset
    serializer_class = s.SshKeySerializer

    def get_queryset(self) -> QuerySet[SshKey]:
        return SshKey.objects.filter(user=caller(self.request))

    def perform_create(self, serializer: s.SshKeySerializer) -> None:  # type: ignore[override]
        serializer.instance = services.add_ssh_key(
            actor=self.request.user, **serializer.validated_data
        )

    def perform_destroy(self, instance: SshKey) -> None:
        services.remove_ssh_key(actor=self.request.user, ssh_key=instance)
