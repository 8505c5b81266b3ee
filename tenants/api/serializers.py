from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from tenants.api.fields import TenantCodeField
from tenants.choices import Role
from tenants.models import ApiToken, Membership, Quota, SshKey, Tenant, User
from tenants.permissions import Access
from tenants.services import QUOTA_LIMIT_FIELDS, quota_over_use


class UserSerializer(serializers.ModelSerializer[User]):
    class Meta:
        model = User
        fields = [
            "id",
            "username",
            "display_name",
            "email",
            "student_number",
            "language",
            "time_zone",
            "is_superuser",
        ]
        read_only_fields = fields


class TenantSerializer(serializers.ModelSerializer[Tenant]):
    # The stubs give every Field the attribute ``parent`` (the serializer it is bound to), so a
    # declared field of that name reads as a clash; there is none at run time, as DRF's
    # SerializerMetaclass pops declared fields off the class.
    parent = TenantCodeField(  # type: ignore[assignment]
        queryset=Tenant.objects.all(), required=False, allow_null=True
    )
    my_role = serializers.SerializerMethodField()

    class Meta:
        model = Tenant
        fields = [
            "id",
            "kind",
            "name",
            "slug",
            "parent",
            "path",
            "term_start",
            "term_end",
            "is_active",
            "created_at",
            "my_role",
        ]
        read_only_fields = ["id", "path", "created_at", "my_role"]

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_my_role(self, tenant: Tenant) -> str | None:
        request = self.context.get("request")
        return Access.of(request.user).role_on(tenant) if request else None

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # The tree shape is changed with the move action, so its checks run in one place.
        if self.instance is not None and "parent" in attrs:
            raise serializers.ValidationError({"parent": _("use the move action to re-parent")})
        if self.instance is not None and "kind" in attrs and attrs["kind"] != self.instance.kind:
            raise serializers.ValidationError({"kind": _("the kind of a tenant cannot change")})
        return attrs


class MoveSerializer(serializers.Serializer):
    # The stubs give every Field the attribute ``parent`` (the serializer it is bound to), so a
    # declared field of that name reads as a clash; there is none at run time, as DRF's
    # SerializerMetaclass pops declared fields off the class.
    parent = TenantCodeField(queryset=Tenant.objects.all())  # type: ignore[assignment]


class MembershipSerializer(serializers.ModelSerializer[Membership]):
    user = serializers.SlugRelatedField(slug_field="username", queryset=User.objects.all())
    tenant = TenantCodeField(queryset=Tenant.objects.all())
    role = serializers.ChoiceField(choices=Role.choices)

    class Meta:
        model = Membership
        fields = ["id", "user", "tenant", "role", "created_at"]
        read_only_fields = ["id", "created_at"]


USED_FIELDS = [
    f"used_{name}"
    for name in (
        "gpus",
        "gpu_memory_mib",
        "cpu_cores",
        "memory_mib",
        "environments",
        "jobs",
        "gpu_hours",
    )
]


class QuotaSerializer(serializers.ModelSerializer[Quota]):
    tenant: serializers.SlugRelatedField[Tenant] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    over_use = serializers.SerializerMethodField(
        help_text="Limits currently below use: new work waits; running work is not stopped."
    )

    class Meta:
        model = Quota
        fields = ["tenant", *QUOTA_LIMIT_FIELDS, *USED_FIELDS, "over_use", "updated_at"]
        read_only_fields = ["tenant", *USED_FIELDS, "over_use", "updated_at"]

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_over_use(self, quota: Quota) -> list[str]:
        return quota_over_use(quota)


class ApiTokenSerializer(serializers.ModelSerializer[ApiToken]):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "last_used_at", "expires_at", "revoked_at"]
        read_only_fields = ["id", "prefix", "created_at", "last_used_at", "revoked_at"]


class NewApiTokenSerializer(ApiTokenSerializer):
    token = serializers.CharField(
        read_only=True, help_text="The secret. Shown only in this response; store it now."
    )

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]


class SshKeySerializer(serializers.ModelSerializer[SshKey]):
    name = serializers.CharField(
        max_length=100, required=False, allow_blank=True, help_text="Default: the key's comment."
    )
    key = serializers.CharField(
        allow_blank=True,  # the service says what to paste
        trim_whitespace=False,
        help_text="The public key in OpenSSH format, e.g. the contents of ~/.ssh/id_ed25519.pub.",
    )

    class Meta:
        model = SshKey
        fields = ["id", "name", "key", "fingerprint", "created_at", "last_used_at"]
        read_only_fields = ["id", "fingerprint", "created_at", "last_used_at"]


class RosterUploadSerializer(serializers.Serializer):
    file = serializers.FileField(
        help_text="CSV (UTF-8) or Excel .xlsx: student_number, name, email, class[, role]"
    )


class RosterResultSerializer(serializers.Serializer):
    created_users = serializers.ListField(child=serializers.CharField())
    created_memberships = serializers.ListField(child=serializers.CharField())
    changed_memberships = serializers.ListField(child=serializers.CharField())
    unchanged = serializers.IntegerField()


class RowErrorSerializer(serializers.Serializer):
    line = serializers.IntegerField()
    column = serializers.CharField()
    message = serializers.CharField()
