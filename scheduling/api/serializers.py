from __future__ import annotations

from rest_framework import serializers

from scheduling.models import Cluster, GpuDevice, Node, PriorityClass, Queue, WhatIfRun
from tenants.models import Tenant, User


class ClusterSerializer(serializers.ModelSerializer[Cluster]):
    is_simulated = serializers.BooleanField(read_only=True)

    class Meta:
        model = Cluster
        fields = [
            "id",
            "name",
            "slug",
            "backend",
            "config",
            "placement_policy",
            "is_default",
            "is_simulated",
            "created_at",
        ]
        read_only_fields = ["id", "created_at", "is_simulated"]


class GpuDeviceSerializer(serializers.ModelSerializer[GpuDevice]):
    node: serializers.SlugRelatedField[Node] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    allocated_milli = serializers.IntegerField(read_only=True, default=0)

    class Meta:
        model = GpuDevice
        fields = [
            "id",
            "node",
            "index",
            "model",
            "memory_mib",
            "uuid",
            "sharing",
            "mig_profiles",
            "allocated_milli",
        ]
        read_only_fields = ["id", "node", "index", "model", "memory_mib", "uuid", "allocated_milli"]


class NodeSerializer(serializers.ModelSerializer[Node]):
    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    gpus = GpuDeviceSerializer(many=True, read_only=True)
    allocated_cpu_milli = serializers.IntegerField(read_only=True, default=0)
    allocated_memory_mib = serializers.IntegerField(read_only=True, default=0)

    class Meta:
        model = Node
        fields = [
            "id",
            "cluster",
            "name",
            "cpu_milli",
            "memory_mib",
            "labels",
            "taints",
            "cordoned",
            "gone_at",
            "allocated_cpu_milli",
            "allocated_memory_mib",
            "gpus",
        ]
        read_only_fields = [
            "id",
            "cluster",
            "name",
            "cpu_milli",
            "memory_mib",
            "gone_at",
            "cordoned",
            "gpus",
        ]


class QueueSerializer(serializers.ModelSerializer[Queue]):
    cluster = serializers.SlugRelatedField(slug_field="slug", queryset=Cluster.objects.all())
    # The stubs give every Field the attribute ``parent`` (the serializer it is bound to), so a
    # declared field of that name reads as a clash; there is none at run time, as DRF's
    # SerializerMetaclass pops declared fields off the class.
    parent = serializers.PrimaryKeyRelatedField(  # type: ignore[assignment]
        queryset=Queue.objects.all(), required=False, allow_null=True
    )
    tenants = serializers.SlugRelatedField(
        slug_field="slug", many=True, required=False, queryset=Tenant.objects.all()
    )

    class Meta:
        model = Queue
        fields = [
            "id",
            "cluster",
            "name",
            "parent",
            "tenants",
            "weight",
            "capability",
            "reclaimable",
            "is_open",
        ]


class PriorityClassSerializer(serializers.ModelSerializer[PriorityClass]):
    class Meta:
        model = PriorityClass
        fields = ["id", "name", "value", "preempting", "description"]


class WhatIfSerializer(serializers.ModelSerializer[WhatIfRun]):
    cluster = serializers.SlugRelatedField(
        slug_field="slug", queryset=Cluster.objects.all(), required=False, allow_null=True
    )
    created_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )

    class Meta:
        model = WhatIfRun
        fields = [
            "id",
            "created_by",
            "created_at",
            "status",
            "error",
            "cluster",
            "trace_name",
            "policies",
            "seeds",
            "result",
        ]
        read_only_fields = fields


class NewWhatIfSerializer(serializers.Serializer):
    cluster = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=Cluster.objects.all(),
        required=False,
        allow_null=True,
        help_text="Plan on this cluster's nodes, or …",
    )
    nodes = serializers.FileField(required=False, help_text="… on an openb node list.")
    pods = serializers.FileField(help_text="The workload trace: an openb pod list.")
    policies = serializers.ListField(child=serializers.CharField(), min_length=1)
    seeds = serializers.IntegerField(default=1)
