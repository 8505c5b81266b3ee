"""`manage.py volcano_manifests --out DIR`: what the portal would submit, as YAML files.

For the demo data (``manage.py seed_demo``): a namespace and ResourceQuota per tenant, the
Volcano Queues, a PriorityClass per portal priority, and one workload of every kind (each
notebook / IDE template, a single and a distributed training job, a vGPU job, a model
server), one file per object, numbered so that ``kubectl apply --dry-run=server -f DIR``
creates namespaces and queues before what goes in them. Nothing is written to the database
and nothing is sent to a cluster.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling.backends.base import WorkloadSpec
from scheduling.backends.kubernetes import manifests
from scheduling.backends.kubernetes.config import KubernetesConfig
from scheduling.choices import BackendKind
from scheduling.inventory import desired_objects, queue_for, tenant_spec
from scheduling.models import Cluster, Queue
from tenants.models import Membership, Tenant
from workloads.models import AppTemplate, Flavor, Grant
from workloads.specs import resources_for

# Deterministic ids: the same demo data gives the same files.
NAMESPACE = uuid.UUID("6f1c1b1e-9b7e-4c43-9f43-7d1f3e0c5a10")
ORDER = {  # apply order: what others refer to first
    "Namespace": 0,
    "ResourceQuota": 1,
    "PersistentVolumeClaim": 1,
    "PriorityClass": 2,
    "Queue": 3,
    "Secret": 4,
    "Job": 5,
    "Deployment": 5,
    "Service": 6,
    "NetworkPolicy": 6,
    "HorizontalPodAutoscaler": 7,
}


class Command(BaseCommand):
    help = "Write the Kubernetes / Volcano manifests the portal would submit for the demo data."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", required=True, help="directory for the YAML files")
        parser.add_argument(
            "--cluster",
            help="slug of a Kubernetes cluster whose config to use (default: the first one, "
            "else the default settings)",
        )

    def handle(self, *args: Any, out: str, cluster: str | None = None, **options: Any) -> None:
        record = self._cluster(cluster)
        config = KubernetesConfig.from_mapping(record.config if record.pk else {})
        if not Tenant.objects.exists() or not AppTemplate.objects.exists():
            raise CommandError("no demo data: run `manage.py seed_demo` first")
        objects = self._cluster_objects(record, config)
        for spec in self._workloads(record):
            objects += manifests.workload_objects(
                spec, config, token="example-token-replaced-at-submit"
            )
        directory = Path(out)
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob("*.yaml"):
            stale.unlink()
        for number, obj in enumerate(sorted(objects, key=_order), start=1):
            meta = obj["metadata"]
            where = f"{meta['namespace']}-" if meta.get("namespace") else ""
            path = directory / f"{number:03d}-{obj['kind'].lower()}-{where}{meta['name']}.yaml"
            path.write_text(yaml.safe_dump(obj, sort_keys=False), encoding="utf-8")
        self.stdout.write(
            self.style.SUCCESS(f"Wrote {len(objects)} manifests to {directory}")
            + "\nCheck them with: kubectl apply --dry-run=server -f "
            + str(directory)
        )

    def _cluster(self, slug: str | None) -> Cluster:
        clusters = Cluster.objects.filter(backend=BackendKind.KUBERNETES)
        if slug:
            found = clusters.filter(slug=slug).first()
            if found is None:
                raise CommandError(f"no Kubernetes cluster {slug!r}")
            return found
        return clusters.first() or Cluster(
            name="example", slug="example", backend=BackendKind.KUBERNETES
        )

    def _cluster_objects(self, cluster: Cluster, config: KubernetesConfig) -> list[dict[str, Any]]:
        if cluster.pk:
            objects = desired_objects(cluster)
            if Queue.objects.filter(cluster=cluster).exists():
                return objects
            return objects + [manifests.volcano_queue(q) for q in example_queues()]
        objects = []
        for tenant in Tenant.objects.filter(is_active=True).select_related("quota"):
            objects += manifests.tenant_objects(tenant_spec(tenant), config)
        return objects + [manifests.volcano_queue(q) for q in example_queues()]

    def _workloads(self, cluster: Cluster) -> list[WorkloadSpec]:
        """One of each kind, as the portal's spec_for would build it for a demo student."""
        specs: list[WorkloadSpec] = []
        for grant in Grant.objects.select_related("template", "template__image", "tenant"):
            template = grant.template
            # Model servers are not notebooks: the serving workload below stands for them.
            if template.kind == "model-server" or any(s.app == template.kind for s in specs):
                continue
            owner = _member(grant.tenant)
            specs.append(
                self._spec(
                    f"notebook-{template.slug}",
                    kind="notebook",
                    app=template.kind,
                    owner=owner,
                    tenant=grant.tenant,
                    cluster=cluster,
                    flavor=template.default_flavor,
                    image=template.image.registry_ref,
                    env=dict(template.environment),
                    program=tuple(template.program.split()),
                )
            )
        tenant = Tenant.objects.filter(slug="dl-201").first() or Tenant.objects.first()
        assert tenant is not None
        image = "quanta/pytorch:2.13-cuda12.4"
        jobs = [
            ("job-single", "gpu-1", 1, ("python", "train.py", "--epochs", "10")),
            ("job-distributed", "gpu-4-v100", 4, ("torchrun", "train.py")),
            ("job-vgpu", "vgpu-8g", 1, ("python", "finetune.py")),
        ]
        for name, flavor_slug, workers, command in jobs:
            flavor = Flavor.objects.filter(slug=flavor_slug).first()
            if flavor is None:
                continue
            specs.append(
                self._spec(
                    name,
                    kind="job",
                    app="command",
                    owner=_member(tenant),
                    tenant=tenant,
                    cluster=cluster,
                    flavor=flavor,
                    image=image,
                    command=command,
                    workers=workers,
                    max_retries=2,
                )
            )
        flavor = Flavor.objects.filter(slug="vgpu-8g").first() or Flavor.objects.first()
        if flavor is not None:
            specs.append(
                self._spec(
                    "serving",
                    kind="serving",
                    app="command",
                    owner=_member(tenant),
                    tenant=tenant,
                    cluster=cluster,
                    flavor=flavor,
                    image=image,
                    command=("python", "-m", "serve", "--model", "/models/resnet50"),
                    workers=2,
                )
            )
        return specs

    def _spec(
        self,
        name: str,
        *,
        tenant: Tenant,
        cluster: Cluster,
        flavor: Flavor,
        command: tuple[str, ...] = (),
        **fields: Any,
    ) -> WorkloadSpec:
        workload_id = str(uuid.uuid5(NAMESPACE, name))
        return WorkloadSpec(
            workload_id=workload_id,
            command=command,
            resources=resources_for(flavor),
            base_url=f"/nb/{workload_id}/",
            queue=queue_for(cluster, tenant) if cluster.pk else _example_queue(tenant),
            labels={"quanta.workload-id": workload_id, "quanta.tenant": tenant.slug},
            **fields,
        )


def example_queues() -> list[manifests.QueueSpec]:
    """With no queues configured: one per tenant with a GPU quota, nested as the tenant tree,
    weighted by GPUs and capped at the quota. What an admin would likely start from."""
    queues = []
    tenants = Tenant.objects.filter(is_active=True, quota__gpus__isnull=False)
    with_queue = {t.pk for t in tenants}
    for tenant in tenants.select_related("quota", "parent"):
        spec = tenant_spec(tenant)
        capability = {"gpus": int(spec.gpus or 0)}
        if spec.cpu_cores is not None:
            capability["cpu_milli"] = int(spec.cpu_cores * 1000)
        if spec.memory_mib is not None:
            capability["memory_mib"] = spec.memory_mib
        above = tenant.parent
        parent = above.slug if above is not None and above.pk in with_queue else ""
        queues.append(
            manifests.QueueSpec(
                name=tenant.slug,
                weight=max(int(spec.gpus or 1), 1),
                capability=capability,
                parent=parent,
            )
        )
    return queues


def _example_queue(tenant: Tenant) -> str:
    if getattr(getattr(tenant, "quota", None), "gpus", None) is not None:
        return tenant.slug
    return ""


def _member(tenant: Tenant) -> str:
    membership = (
        Membership.objects.filter(tenant=tenant, role="student").select_related("user").first()
    )
    return membership.user.username if membership else "student1"


def _order(obj: dict[str, Any]) -> int:
    """By kind only: the sort is stable, so parent queues stay before their children."""
    return ORDER.get(obj["kind"], 9)
