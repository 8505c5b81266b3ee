from django.contrib import admin

from scheduling.models import Cluster, GpuDevice, Node, PriorityClass, Queue


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "backend", "placement_policy", "is_default")


class GpuInline(admin.TabularInline):
    model = GpuDevice
    extra = 0


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ("name", "cluster", "cpu_milli", "memory_mib", "cordoned", "gone_at")
    list_filter = ("cluster", "cordoned")
    inlines = [GpuInline]


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    list_display = ("name", "cluster", "weight", "reclaimable", "is_open")
    filter_horizontal = ("tenants",)


@admin.register(PriorityClass)
class PriorityClassAdmin(admin.ModelAdmin):
    list_display = ("name", "value", "preempting")
