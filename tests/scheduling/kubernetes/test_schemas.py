"""Every manifest the portal builds is valid for the cluster: Volcano objects against the CRD
schemas of Volcano 1.15 (../shared/reference/volcano/crds), KServe InferenceServices against
KServe's CRD (../shared/reference/kserve), core objects against the Kubernetes
OpenAPI schemas shipped in kubernetes-validate (offline). Both strictly: an unknown field is an
error here, as it is for ``kubectl apply --validate=strict``, so a typo cannot hide."""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import functools
from decimal import Decimal
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from scheduling.backends.base import ReplicaWindow, ServingSpec
from scheduling.backends.kubernetes import manifests
from scheduling.backends.kubernetes.config import KubernetesConfig
from tests.scheduling.kubernetes.conftest import spec, with_gpus

REFERENCE = Path(__file__).resolve().parents[3] / ".." / "shared" / "reference"
CRDS = REFERENCE / "volcano" / "crds"
KSERVE_CRD = REFERENCE / "kserve" / "serving.kserve.io_inferenceservices.yaml"
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
KSERVE = dataclasses.replace(CONFIG, serving="kserve", serving_queue="serving")
SKLEARN = ServingSpec(
    "iris", "sklearn", storage_uri="pvc://models/iris/3", min_replicas=0, max_replicas=3,
    schedule=(ReplicaWindow((0, 1, 2, 3, 4), dt.time(8), dt.time(22), 2),),
)  # fmt: skip
CUSTOM = ServingSpec("echo", "custom", storage_uri="pvc://models/echo/1", min_replicas=1)


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
        with_gpus(spec("serving", serving=SKLEARN), gpu_milli=250, gpu_memory_mib=4096),
        spec("serving", serving=CUSTOM, command=()),
    ]
    servers = [
        with_gpus(spec("serving", serving=SKLEARN), gpus=1, gpu_models=("V100M16",)),
        with_gpus(spec("serving", serving=CUSTOM), gpu_milli=500, gpu_memory_mib=8192),
        spec("serving", serving=dataclasses.replace(SKLEARN, framework="pytorch")),
        spec("serving", serving=dataclasses.replace(SKLEARN, framework="onnx")),
    ]
    objects: list[dict[str, Any]] = []
    for workload in workloads:
        objects += manifests.workload_objects(workload, CONFIG, token="t0ken")
    for server in servers:
        objects += manifests.workload_objects(server, KSERVE, priority_class="quanta-high")
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
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # KServe's CRD is 2 MB
    for path in [*sorted(CRDS.glob("*.yaml")), *([KSERVE_CRD] if KSERVE_CRD.is_file() else [])]:
        crd = yaml.load(path.read_text(), Loader=loader)  # a safe loader, C when built
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


def kserve(obj: dict[str, Any]) -> bool:
    return obj["apiVersion"].split("/")[0] == "serving.kserve.io"


VOLCANO = [o for o in all_manifests() if volcano(o)]
KSERVE_OBJECTS = [o for o in all_manifests() if kserve(o)]
CORE = [o for o in all_manifests() if not volcano(o) and not kserve(o)]


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


def kserve_schema() -> dict[str, Any]:
    if not KSERVE_CRD.is_file():
        pytest.skip(f"no KServe CRD at {KSERVE_CRD.resolve()}: the shared reference is absent")
    return crd_schemas()[(manifests.KSERVE_API, "InferenceService")]


def kserve_errors(obj: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(kserve_schema())
    errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.path))
    return [f"{list(e.path)}: {e.message}" for e in errors]


@pytest.mark.parametrize("obj", KSERVE_OBJECTS, ids=label)
def test_inference_services_match_the_kserve_crd_schema(obj: dict[str, Any]) -> None:
    errors = kserve_errors(obj)
    assert not errors, "\n".join(errors[:10])


def test_every_model_format_and_a_custom_container_are_checked() -> None:
    predictors = [o["spec"]["predictor"] for o in KSERVE_OBJECTS]
    formats = {p["model"]["modelFormat"]["name"] for p in predictors if "model" in p}
    assert formats == {"sklearn", "pytorch", "onnx"}
    assert any("containers" in p for p in predictors)


def test_a_wrong_inference_service_field_fails_the_crd_schema() -> None:
    isvc = copy.deepcopy(KSERVE_OBJECTS[0])
    isvc["spec"]["predictor"]["minReplica"] = 1  # misspelt
    assert any("minReplica" in e for e in kserve_errors(isvc))
    isvc = copy.deepcopy(KSERVE_OBJECTS[0])
    isvc["spec"]["predictor"]["scaleMetric"] = "gpu"  # not one KServe knows
    assert any("scaleMetric" in e for e in kserve_errors(isvc))
    isvc = copy.deepcopy(KSERVE_OBJECTS[0])
    isvc["spec"]["predictor"]["model"]["storageUri"] = 7
    assert any("storageUri" in e for e in kserve_errors(isvc))
