"""Clusters and their inventory (nodes, GPU devices) and what is allocated on them."""

from __future__ import annotations

from django.db import models
from django.db.models import Prefetch, Q, Sum
from django.db.models.functions import Coalesce

from scheduling.choices import BackendKind, GpuSharing, PlacementPolicy
from scheduling.placement import SHARED_GPU_POLICY, WHOLE_GPU_POLICY


class Cluster(models.Model):
    """Where workloads run: a backend kind and its configuration."""

    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=64, unique=True)
    backend = models.CharField(max_length=16, choices=BackendKind.choices)
    config = models.JSONField(default=dict, blank=True)
    placement_policy = models.CharField(
        max_length=16, choices=PlacementPolicy.choices, default=PlacementPolicy.AUTO
    )
    is_default = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_default"], condition=Q(is_default=True), name="one_default_cluster"
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} (simulated)" if self.is_simulated else self.name

    @property
    def is_simulated(self) -> bool:
        return self.backend == BackendKind.SIMULATED

    def resolved_placement_policy(self) -> str:
        """``placement_policy`` with ``auto`` resolved against the inventory (one query):
        fgd-mix where some GPU of a present node is shared, else binpack. Admission resolves
        it over the free view it has already read (``scheduling.placement.resolve_policy``)."""
        if self.placement_policy != PlacementPolicy.AUTO:
            return self.placement_policy
        shared = GpuDevice.objects.filter(
            node__cluster=self, node__gone_at__isnull=True, sharing=GpuSharing.FRACTIONAL
        ).exists()
        return SHARED_GPU_POLICY if shared else WHOLE_GPU_POLICY


class NodeQuerySet(models.QuerySet["Node"]):
    def with_allocations(self, devices: models.QuerySet[GpuDevice] | None = None) -> NodeQuerySet:
        """The nodes still reported, each with its cluster, what is allocated on it
        (``allocated_cpu_milli``, ``allocated_memory_mib``) and its GPUs by index with what is
        allocated on each (``allocated_milli``): a fixed number of queries for any number of
        nodes. ``devices`` prefetches more per GPU (the hosts page: who holds it)."""
        if devices is None:
            devices = GpuDevice.objects.with_allocated()
        return (
            self.filter(gone_at__isnull=True)
            .select_related("cluster")
            .annotate(
                allocated_cpu_milli=Coalesce(Sum("allocations__cpu_milli"), 0),
                allocated_memory_mib=Coalesce(Sum("allocations__memory_mib"), 0),
            )
            .prefetch_related(Prefetch("gpus", queryset=devices.order_by("index")))
            .order_by("cluster", "name")
        )


class Node(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=253)
    cpu_milli = models.PositiveIntegerField()
    memory_mib = models.PositiveBigIntegerField()
    labels = models.JSONField(default=dict, blank=True)
    taints = models.JSONField(default=list, blank=True)
    cordoned = models.BooleanField(default=False)
    gone_at = models.DateTimeField(null=True, blank=True)  # no longer reported by the backend
    updated_at = models.DateTimeField(auto_now=True)

    objects = NodeQuerySet.as_manager()

    # Not columns: annotations of NodeQuerySet.with_allocations().
    allocated_cpu_milli: int
    allocated_memory_mib: int

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="one_node_name_per_cluster")
        ]

    def __str__(self) -> str:
        return self.name


class GpuDeviceQuerySet(models.QuerySet["GpuDevice"]):
    def with_allocated(self) -> GpuDeviceQuerySet:
        """Each device with the share allocated on it (``allocated_milli``, 1000: whole)."""
        return self.annotate(allocated_milli=Coalesce(Sum("allocations__gpu_milli"), 0))


class GpuDevice(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    model = models.CharField(max_length=64)
    memory_mib = models.PositiveIntegerField()
    uuid = models.CharField(max_length=64, blank=True)
    sharing = models.CharField(
        max_length=16, choices=GpuSharing.choices, default=GpuSharing.FRACTIONAL
    )
    # With MIG: the profiles the device is partitioned into, e.g. ["3g.20gb", "2g.10gb"].
    mig_profiles = models.JSONField(default=list, blank=True)

    objects = GpuDeviceQuerySet.as_manager()

    # Not a column: the annotation of GpuDeviceQuerySet.with_allocated().
    allocated_milli: int

    class Meta:
        ordering = ["node", "index"]
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="one_gpu_index_per_node")
        ]

    def __str__(self) -> str:
        return f"{self.node.name}/gpu{self.index} ({self.model})"


class GpuSample(models.Model):
    """A device's utilisation at ``time`` (``scheduling.utilisation``): as read, or the mean
    of the readings of ``span_seconds`` (0: one reading) once the history is downsampled."""

    device = models.ForeignKey(GpuDevice, on_delete=models.CASCADE, related_name="samples")
    time = models.DateTimeField()
    utilisation = models.PositiveSmallIntegerField()  # percent
    memory_used_mib = models.PositiveIntegerField(default=0)
    span_seconds = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["device", "time"]
        indexes = [models.Index(fields=["device", "time"]), models.Index(fields=["time"])]

    def __str__(self) -> str:
        return f"{self.device_id} {self.time:%H:%M}: {self.utilisation} %"


class Allocation(models.Model):
    """Resources one task of a workload holds on a node (and, with a GPU, on one device).

    Written in the admission transaction while the cluster's node rows are locked, deleted
    when the workload ends: the sum of a node's allocations is what is in use on it.
    """

    workload = models.ForeignKey(
        "workloads.Workload", on_delete=models.CASCADE, related_name="allocations"
    )
    task = models.PositiveSmallIntegerField(default=0)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="allocations")
    device = models.ForeignKey(
        GpuDevice, null=True, blank=True, on_delete=models.CASCADE, related_name="allocations"
    )
    cpu_milli = models.PositiveIntegerField(default=0)
    memory_mib = models.PositiveBigIntegerField(default=0)
    gpu_milli = models.PositiveIntegerField(default=0)  # 1000: the whole device
    gpu_memory_mib = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["workload", "task"]

    def __str__(self) -> str:
        where = f"{self.device}" if self.device else self.node.name
        return f"{self.workload_id} task {self.task} on {where}"


# Where work goes that no queue names (its tenant's or an ancestor's); Volcano's name too.
DEFAULT_QUEUE = "default"


class Queue(models.Model):
    """A share of a cluster (Volcano's Queue): weight for the deserved share, capability as
    the hard cap, reclaimable when others may take back what it borrowed above its share."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="queues")
    name = models.SlugField(max_length=63)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    tenants = models.ManyToManyField(
        "tenants.Tenant",
        blank=True,
        related_name="queues",
        help_text="Workloads of these tenants (and below) go here.",
    )
    weight = models.PositiveIntegerField(default=1)
    capability = models.JSONField(
        default=dict, blank=True, help_text='Hard caps, e.g. {"gpus": 8, "cpu_milli": 64000}.'
    )
    reclaimable = models.BooleanField(default=True)
    is_open = models.BooleanField(default=True)

    # Not a column: the deserved share in percent, set for the console's queues page.
    share: int

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="one_queue_name_per_cluster")
        ]

    def __str__(self) -> str:
        return self.name


class PriorityClass(models.Model):
    """A named priority: higher values are scheduled first and may preempt lower ones."""

    name = models.SlugField(max_length=63, unique=True)
    value = models.IntegerField()
    preempting = models.BooleanField(
        default=True, help_text="May evict lower-priority work in its queue."
    )
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-value"]
        verbose_name_plural = "priority classes"

    def __str__(self) -> str:
        return f"{self.name} ({self.value})"


class WhatIfRun(models.Model):
    """A capacity what-if: replay a workload trace on an inventory under several policies."""

    PENDING, RUNNING, DONE, FAILED = "pending", "running", "done", "failed"
    STATUSES = [(s, s) for s in (PENDING, RUNNING, DONE, FAILED)]

    created_by = models.ForeignKey(
        "tenants.User", null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    status = models.CharField(max_length=10, choices=STATUSES, default=PENDING)
    error = models.TextField(blank=True)
    cluster = models.ForeignKey(
        Cluster,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Inventory: this cluster's nodes.",
    )
    nodes_csv = models.TextField(blank=True, help_text="Inventory: an openb node list.")
    pods_csv = models.TextField(help_text="The workload trace (openb pod list).")
    trace_name = models.CharField(max_length=200, blank=True)
    policies = models.JSONField(default=list)
    seeds = models.PositiveSmallIntegerField(default=1)
    result = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"what-if {self.pk} ({self.status})"
