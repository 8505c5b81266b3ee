"""Every manifest the portal builds is valid for the cluster: Volcano objects against the CRD
schemas of Volcano 1.15 (../shared/reference/volcano/crds), core objects against the Kubernetes
OpenAPI schemas shipped in kubernetes-validate (offline). Both strictly: an unknown field is an
error here, as it is for ``kubectl apply --validate=strict``, so a typo cannot hide."""

from __future__ import annotations

import copy
import functools
from decimal import Decimal
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from scheduling.backends.kubernetes import manifests
from scheduling.backends.kubernetes.config import KubernetesConfig
from tests.scheduling.kubernetes.conftest import spec, with_gpus

CRDS = Path(__file__).resolve().parents[3] / ".." / "shared" / "reference" / "volcano" / "crds"
KUBERNETES_VERSION = "1.33"
CONFIG = KubernetesConfig.from_mapping(
    {
        "gpu_products": {"V100M16": "Tesla-V100-SXM2-16GB"},
        "datasets": [{"claim": "imagenet", "mount_path": "/datasets/imagenet"}],
        "portal_namespace": "quanta",
        "portal_pod_labels": {"app.kubernetes.io/name": "quanta-web"},
        "storage_class": "cephfs",
        "image_pull_secrets": ["campus-registry"],
    }
)


def all_manifests() -> list[dict[str, Any]]:
    """One of everything the portal submits."""
    tensorflow = {"quanta.tenant": "ml-101", "quanta.distribution": "tensorflow"}
    workloads = [
        spec("job"),
        with_gpus(spec("job", workers=4, max_retries=2), gpus=4, gpu_models=("V100M16",)),
        with_gpus(spec("job", workers=3, labels=tensorflow), gpus=1),
        with_gpus(spec("job"), gpu_milli=250, gpu_memory_mib=8192),
        spec("notebook"),
        with_gpus(spec("notebook", app="vscode"), gpu_milli=500, gpu_memory_mib=16384),
        spec("notebook", app="tensorboard"),
        spec("notebook", app="pycharm-desktop"),
        spec("notebook", app="desktop", program=("xterm",)),
        with_gpus(spec("serving", workers=2), gpus=1),
    ]
    objects: list[dict[str, Any]] = []
    for workload in workloads:
        objects += manifests.workload_objects(workload, CONFIG, token="t0ken")
    tenant = manifests.TenantSpec(
        slug="ml-101", gpus=Decimal("4.5"), cpu_cores=Decimal("64.5"), memory_mib=1024,
        gpu_memory_mib=8192, environments=12, jobs=8,
    )  # fmt: skip
    objects += manifests.tenant_objects(tenant, CONFIG)
    objects.append(
        manifests.volcano_queue(
            manifests.QueueSpec("dl-201", 4, {"gpus": 8, "gpu_memory_mib": 65536}, False, "cs")
        )
    )
    objects.append(manifests.priority_class(manifests.PriorityClassSpec("high", 1000)))
    job = copy.deepcopy(objects[0])
    job["metadata"]["uid"] = "8a5f0a54-6f5c-4a51-a3f6-6c36b8f0d6f1"
    objects.append(manifests.stop_command(job))
    return objects


@functools.cache
def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    schemas = {}
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = strict(version["schema"]["openAPIV3Schema"])
            schemas[(f"{group}/{version['name']}", kind)] = schema
    return schemas


def strict(schema: Any) -> Any:
    """The CRD's schema with unknown fields refused (the API server would prune them)."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def volcano(obj: dict[str, Any]) -> bool:
    return obj["apiVersion"].split("/")[0].endswith("volcano.sh")


VOLCANO = [o for o in all_manifests() if volcano(o)]
CORE = [o for o in all_manifests() if not volcano(o)]


def label(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}-{obj['metadata']['name']}"


@pytest.mark.parametrize("obj", VOLCANO, ids=label)
def test_volcano_objects_match_the_volcano_crd_schemas(obj: dict[str, Any]) -> None:
    if not CRDS.is_dir():
        pytest.skip(f"no Volcano CRDs at {CRDS.resolve()}: the shared reference folder is absent")
    schema = crd_schemas()[(obj["apiVersion"], obj["kind"])]
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(obj), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:10])


def kubernetes_validate() -> Any:
    try:
        import kubernetes_validate as validator
    except ImportError:
        pytest.skip("kubernetes-validate is not installed: pip install kubernetes-validate")
    return validator


@pytest.mark.parametrize("obj", CORE, ids=label)
def test_core_objects_match_the_kubernetes_schemas(obj: dict[str, Any]) -> None:
    validator = kubernetes_validate()
    validator.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("obj", [o for o in VOLCANO if o["kind"] == "Job"], ids=label)
def test_the_pods_of_volcano_jobs_match_the_kubernetes_pod_schema(obj: dict[str, Any]) -> None:
    validator = kubernetes_validate()
    for task in obj["spec"]["tasks"]:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{obj['metadata']['name']}-{task['name']}-0",
                **task["template"]["metadata"],
            },
            "spec": task["template"]["spec"],
        }
        validator.validate(pod, KUBERNETES_VERSION, strict=True)


def test_a_misspelt_field_is_caught() -> None:
    if not CRDS.is_dir():
        pytest.skip(f"no Volcano CRDs at {CRDS.resolve()}")
    job = copy.deepcopy(VOLCANO[0])
    job["spec"]["minAvaliable"] = 1
    schema = crd_schemas()[(job["apiVersion"], job["kind"])]
    assert not jsonschema.Draft7Validator(schema).is_valid(job)
    validator = kubernetes_validate()
    service = copy.deepcopy(next(o for o in CORE if o["kind"] == "Service"))
    service["spec"]["selectr"] = {}
    with pytest.raises(validator.ValidationError):
        validator.validate(service, KUBERNETES_VERSION, strict=True)
