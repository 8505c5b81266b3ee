from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from rest_framework import serializers

from scheduling.models import Cluster, GpuDevice, Node, PriorityClass, Queue, WhatIfRun
from tenants.models import Tenant

CAPABILITY_KEYS = ("gpus", "cpu_milli", "memory_mib", "gpu_memory_mib")


class ClusterSerializer(serializers.ModelSerializer):
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

    def validate_config(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise serializers.ValidationError(_("must be an object"))
        gpus = value.get("gpus")
        if gpus is not None:
            if not isinstance(gpus, list):
                raise serializers.ValidationError(_("gpus: a list of {index, model, memory_mib}"))
            for i, gpu in enumerate(gpus):
                if (
                    not isinstance(gpu, dict)
                    or not isinstance(gpu.get("index"), int)
                    or not isinstance(gpu.get("model"), str)
                    or not gpu["model"]
                    or not isinstance(gpu.get("memory_mib"), int)
                    or gpu["memory_mib"] <= 0
                ):
                    raise serializers.ValidationError(
                        _("gpus[%(i)s]: give index (int), model (text) and memory_mib (> 0)")
                        % {"i": i}
                    )
        overcommit = value.get("cpu_overcommit", 1)
        if not isinstance(overcommit, int | float) or not 1 <= overcommit <= 64:
            raise serializers.ValidationError(_("cpu_overcommit: a number from 1 to 64"))
        return value


class GpuDeviceSerializer(serializers.ModelSerializer):
    node = serializers.SlugRelatedField(slug_field="name", read_only=True)
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


class NodeSerializer(serializers.ModelSerializer):
    cluster = serializers.SlugRelatedField(slug_field="slug", read_only=True)
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

    def validate_labels(self, value: Any) -> dict[str, str]:
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise serializers.ValidationError(_("labels are an object of text: text"))
        return value

    def validate_taints(self, value: Any) -> list[dict[str, str]]:
        if not isinstance(value, list):
            raise serializers.ValidationError(_("taints are a list of {key, value, effect}"))
        for i, taint in enumerate(value):
            if (
                not isinstance(taint, dict)
                or not isinstance(taint.get("key"), str)
                or (
                    taint.get("effect", "NoSchedule")
                    not in ("NoSchedule", "PreferNoSchedule", "NoExecute")
                )
            ):
                raise serializers.ValidationError(
                    _(
                        "taints[%(i)s]: give key, optionally value and effect "
                        "(NoSchedule, PreferNoSchedule or NoExecute)"
                    )
                    % {"i": i}
                )
        return value


class QueueSerializer(serializers.ModelSerializer):
    cluster = serializers.SlugRelatedField(slug_field="slug", queryset=Cluster.objects.all())
    parent = serializers.PrimaryKeyRelatedField(
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

    def validate_weight(self, value: int) -> int:
        if value < 1:
            raise serializers.ValidationError(_("must be at least 1"))
        return value

    def validate_capability(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise serializers.ValidationError(_("must be an object"))
        for key, amount in value.items():
            if key not in CAPABILITY_KEYS:
                raise serializers.ValidationError(
                    _("unknown resource %(key)r; use %(keys)s")
                    % {"key": key, "keys": ", ".join(CAPABILITY_KEYS)}
                )
            if not isinstance(amount, int | float) or amount < 0:
                raise serializers.ValidationError(_("%(key)s must be a number ≥ 0") % {"key": key})
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        parent = attrs.get("parent")
        cluster = attrs.get("cluster") or getattr(self.instance, "cluster", None)
        if parent is not None:
            if parent.cluster_id != cluster.pk:
                raise serializers.ValidationError({"parent": _("must be in the same cluster")})
            node: Queue | None = parent
            while node is not None:  # walking up: a queue cannot sit under itself
                if self.instance is not None and node.pk == self.instance.pk:
                    raise serializers.ValidationError(
                        {"parent": _("a queue cannot sit under itself or its descendant")}
                    )
                node = node.parent
        return attrs


class PriorityClassSerializer(serializers.ModelSerializer):
    class Meta:
        model = PriorityClass
        fields = ["id", "name", "value", "preempting", "description"]

    def validate_value(self, value: int) -> int:
        if not -1_000_000 <= value <= 1_000_000_000:
            raise serializers.ValidationError(_("must be between -1000000 and 1000000000"))
        return value


class WhatIfSerializer(serializers.ModelSerializer):
    cluster = serializers.SlugRelatedField(
        slug_field="slug", queryset=Cluster.objects.all(), required=False, allow_null=True
    )
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

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
