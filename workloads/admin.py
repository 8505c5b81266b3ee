from django.contrib import admin
from django.http import HttpRequest

from workloads.models import AppTemplate, Flavor, Grant, Image, Workload, WorkloadEvent


@admin.register(Image)
class ImageAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "framework", "framework_version", "registry_ref", "is_active")
    search_fields = ("name", "slug")


@admin.register(Flavor)
class FlavorAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "cpu_milli", "memory_mib", "gpus", "gpu_milli", "is_active")
    search_fields = ("name", "slug")


@admin.register(AppTemplate)
class AppTemplateAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "kind", "image", "default_flavor", "is_active")
    filter_horizontal = ("allowed_flavors",)


@admin.register(Grant)
class GrantAdmin(admin.ModelAdmin):
    list_display = ("template", "tenant", "cluster", "member_limit", "expires_on")
    filter_horizontal = ("flavors",)


class EventInline(admin.TabularInline):
    model = WorkloadEvent
    extra = 0
    can_delete = False
    readonly_fields = ("time", "from_state", "to_state", "actor", "reason")


@admin.register(Workload)
class WorkloadAdmin(admin.ModelAdmin):
    """Read-only: workloads change state only through the lifecycle (services)."""

    list_display = ("name", "kind", "owner", "tenant", "cluster", "state", "created_at")
    list_filter = ("state", "kind", "cluster")
    search_fields = ("name", "owner__username")
    inlines = [EventInline]

    def has_change_permission(self, request: HttpRequest, obj: Workload | None = None) -> bool:
        return False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
