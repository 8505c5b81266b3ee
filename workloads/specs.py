"""What a workload asks for, in the shapes the layers below speak: the backend's
``WorkloadSpec`` and ``Resources``, the quota's ``Request``, the backend ``Handle``."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from decimal import Decimal
from typing import Any

from django.conf import settings

from scheduling.backends.base import (
    DatasetMount,
    Handle,
    ReplicaWindow,
    Resources,
    ServingSpec,
    TaskPlacement,
    WorkloadSpec,
)
from scheduling.inventory import queue_for
from scheduling.models import Allocation
from tenants.quota import Request
from workloads import datasets
from workloads.choices import WorkloadKind
from workloads.models import Flavor, ServingEndpoint, Workload


def resources_for(flavor: Flavor) -> Resources:
    return Resources(
        cpu_milli=flavor.cpu_milli,
        memory_mib=flavor.memory_mib,
        gpus=flavor.gpus,
        gpu_milli=flavor.gpu_milli,
        gpu_memory_mib=flavor.gpu_memory_mib,
        gpu_models=tuple(flavor.gpu_models or ()),
    )


def quota_request_for(workload: Workload) -> Request:
    flavor, n = workload.flavor, workload.workers
    return Request(
        gpus=flavor.gpu_equivalents * n,
        gpu_memory_mib=flavor.gpu_memory_mib * n,
        cpu_cores=Decimal(flavor.cpu_milli) / 1000 * n,
        memory_mib=flavor.memory_mib * n,
        environments=1 if workload.kind == WorkloadKind.NOTEBOOK else 0,
        jobs=1 if workload.kind == WorkloadKind.JOB else 0,
    )


def charged_request(charged: dict[str, Any] | None) -> Request:
    """The request stored on the workload when admission charged it (``quota_request``)."""
    charged = charged or {}
    return Request(
        gpus=Decimal(charged.get("gpus", "0")),
        gpu_memory_mib=int(charged.get("gpu_memory_mib", 0)),
        cpu_cores=Decimal(charged.get("cpu_cores", "0")),
        memory_mib=int(charged.get("memory_mib", 0)),
        environments=int(charged.get("environments", 0)),
        jobs=int(charged.get("jobs", 0)),
    )


def home_dir(user: Any) -> str:
    return str(settings.DATA_DIR / "home" / user.username)


def spec_for(workload: Workload) -> WorkloadSpec:
    allocations = list(workload.allocations.select_related("node", "device").order_by("task"))
    by_task: dict[int, list[Allocation]] = defaultdict(list)
    for allocation in allocations:
        by_task[allocation.task].append(allocation)
    placement = tuple(
        TaskPlacement(
            node=rows[0].node.name, gpu_indices=tuple(a.device.index for a in rows if a.device)
        )
        for _task, rows in sorted(by_task.items())
    )
    template = workload.template
    serving = serving_spec_for(workload) if workload.kind == WorkloadKind.SERVING else None
    labels = {"quanta.workload-id": str(workload.pk), "quanta.tenant": workload.tenant.slug}
    if serving is not None:
        labels["quanta.model-version"] = str(workload.endpoint.version.number)
    return WorkloadSpec(
        workload_id=str(workload.pk),
        kind=workload.kind,
        app=template.kind if template else "command",
        owner=workload.owner.username,
        command=tuple(workload.command),
        env={**(template.environment if template else {}), **workload.env},
        resources=resources_for(workload.flavor),
        workers=workload.workers,
        max_retries=workload.max_retries,
        attempt=workload.attempt,
        image=workload.image.registry_ref if workload.image else "",
        base_url=workload.open_path,
        working_dir=home_dir(workload.owner),
        placement=placement,
        queue=queue_for(workload.cluster, workload.tenant),
        labels=labels,
        program=tuple(template.program.split()) if template else (),
        datasets=tuple(
            DatasetMount(
                name=dataset.slug,
                target=dataset.mount_path,
                source=str(folder),
                claim=dataset.claim,
                sub_path=dataset.sub_path,
            )
            for dataset, folder in datasets.mounts(list(workload.datasets.order_by("slug")))
        ),
        serving=serving,
    )


def serving_spec_for(workload: Workload) -> ServingSpec | None:
    """The model and scaling of a serving workload, from its endpoint
    (``workloads.serving``); the version's files are a folder under ``MODELS_DIR`` here and
    ``pvc://MODELS_CLAIM/<folder>`` on Kubernetes."""
    endpoint = getattr(workload, "endpoint", None)
    if endpoint is None:
        return None
    version = endpoint.version
    claim = settings.MODELS_CLAIM
    return ServingSpec(
        model_name=endpoint.model_name,
        framework=version.framework,
        model_dir=str(settings.MODELS_DIR / version.path),
        storage_uri=f"pvc://{claim}/{version.path}" if claim else "",
        min_replicas=endpoint.min_replicas,
        max_replicas=endpoint.max_replicas,
        target_concurrency=endpoint.target_concurrency,
        target_gpu_utilisation=endpoint.target_gpu_utilisation,
        scale_to_zero_after_s=endpoint.scale_to_zero_after_s,
        schedule=windows(endpoint),
    )


def handle_for(workload: Workload) -> Handle:
    return Handle(str(workload.pk), dict(workload.backend_state or {}))


def windows(endpoint: ServingEndpoint) -> tuple[ReplicaWindow, ...]:
    """An endpoint's stored schedule (``workloads.serving.parse_schedule``) as windows."""
    return tuple(
        ReplicaWindow(
            days=tuple(w["days"]),
            start=dt.time.fromisoformat(w["start"]),
            end=dt.time.fromisoformat(w["end"]),
            min_replicas=int(w["min_replicas"]),
        )
        for w in endpoint.schedule or ()
    )
