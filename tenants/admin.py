from django.contrib import admin
from django.contrib.auth.admin import UserAdmin
from guardian.admin import GuardedModelAdmin

from tenants.models import ApiToken, Membership, Quota, Tenant, User


@admin.register(User)
class QuantaUserAdmin(UserAdmin):
    fieldsets = (
        *(UserAdmin.fieldsets or ()),  # the stubs allow None; Django's UserAdmin sets them
        ("Quanta", {"fields": ("display_name", "student_number", "language", "time_zone")}),
    )
    list_display = ("username", "display_name", "email", "student_number", "is_superuser")
    search_fields = ("username", "display_name", "email", "student_number")
    ordering = ("sort_key",)  # student2 before student10


class QuotaInline(admin.StackedInline):
    model = Quota
    can_delete = False
    readonly_fields = (
        "used_gpus",
        "used_gpu_memory_mib",
        "used_cpu_cores",
        "used_memory_mib",
        "used_environments",
        "used_jobs",
        "used_gpu_hours",
    )


@admin.register(Tenant)
class TenantAdmin(GuardedModelAdmin):
    """Object permissions (Object permissions button) delegate a tenant without a membership."""

    list_display = ("name", "slug", "kind", "parent", "term_start", "term_end", "is_active")
    list_filter = ("kind", "is_active")
    search_fields = ("name", "slug")
    readonly_fields = ("path", "parent")
    inlines = [QuotaInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "tenant", "role", "created_at")
    list_filter = ("role", "tenant__kind")
    search_fields = ("user__username", "tenant__slug")
    raw_id_fields = ("user",)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("name", "user", "prefix", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("prefix", "digest", "last_used_at")
