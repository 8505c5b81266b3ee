"""deploy/kubernetes: the portal's own manifests, checked offline.

Every object is validated strictly (unknown fields fail) against the Kubernetes JSON schemas
that `kubernetes-validate` ships. The base is read through its kustomization's resources
list, and the example overlay is rendered with `kubectl kustomize` (or `kustomize build`)
where one is installed: both without a cluster or a network.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.urls import resolve

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
BASE = DEPLOY / "base"
OVERLAY = DEPLOY / "overlays" / "example"
KUBERNETES_VERSION = "1.33"  # as tests/scheduling/kubernetes/test_schemas.py
NAMESPACE = "quanta"
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
SECRET_KEYS = {"SECRET_KEY", "DATABASE_URL", "REDIS_URL"}


def validator() -> Any:
    try:
        import kubernetes_validate
    except ImportError:
        pytest.skip("kubernetes-validate is not installed (pip install -e '.[dev]')")
    return kubernetes_validate


def base_objects() -> list[dict[str, Any]]:
    """The base's resources as kustomize would emit them: its namespace on namespaced ones."""
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    objects = []
    for name in kustomization["resources"]:
        for obj in yaml.safe_load_all((BASE / name).read_text()):
            if obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = kustomization["namespace"]
            objects.append(obj)
    return objects


def kustomize_command() -> list[str] | None:
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    return None


@pytest.fixture(scope="module")
def overlay(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    command = kustomize_command()
    if command is None:
        pytest.skip("neither kustomize nor kubectl is installed: the overlay is not rendered")
    copy_root = tmp_path_factory.mktemp("deploy") / "kubernetes"
    shutil.copytree(DEPLOY, copy_root, ignore=shutil.ignore_patterns("secrets.env"))
    example = copy_root / "overlays" / "example"
    shutil.copy(example / "secrets.env.example", example / "secrets.env")
    result = subprocess.run(
        [*command, str(example)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return list(yaml.safe_load_all(result.stdout))


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def pod_specs(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        o["metadata"]["name"]: o["spec"]["template"]["spec"]
        for o in objects
        if o["kind"] in ("Deployment", "Job")
    }


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", ()), *spec["containers"]]


def label(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}-{obj['metadata']['name']}"


@pytest.mark.parametrize("obj", base_objects(), ids=label)
def test_every_base_object_matches_the_kubernetes_schemas(obj: dict[str, Any]) -> None:
    validator().validate(obj, KUBERNETES_VERSION, strict=True)


def test_the_rendered_overlay_matches_the_kubernetes_schemas(overlay) -> None:
    kinds = {o["kind"] for o in overlay}
    assert {"Deployment", "Job", "Service", "Ingress", "Secret", "ConfigMap"} <= kinds
    for obj in overlay:
        validator().validate(obj, KUBERNETES_VERSION, strict=True)
        if obj["kind"] not in CLUSTER_SCOPED:
            assert obj["metadata"]["namespace"] == NAMESPACE, label(obj)


def test_the_validation_is_strict() -> None:
    web = copy.deepcopy(by_kind(base_objects(), "Deployment")["quanta-web"])
    web["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(validator().ValidationError):
        validator().validate(web, KUBERNETES_VERSION, strict=True)


def test_the_overlay_sets_the_image_and_makes_the_secret_the_pods_read(overlay) -> None:
    secret = by_kind(overlay, "Secret")["quanta-secrets"]
    assert set(secret["data"]) >= SECRET_KEYS
    for name, spec in pod_specs(overlay).items():
        for container in containers(spec):
            assert container["image"].startswith("registry.example.edu/"), name
            refs = {ref["secretRef"]["name"] for ref in container["envFrom"] if "secretRef" in ref}
            assert refs == {"quanta-secrets"}, name
    assert by_kind(overlay, "Service")["quanta-ssh-gateway"]["spec"]["type"] == "LoadBalancer"


def command_of(objects: list[dict[str, Any]], name: str) -> list[str]:
    return pod_specs(objects)[name]["containers"][0]["command"]


def test_each_process_of_the_portal_runs_what_compose_runs() -> None:
    objects = base_objects()
    web = command_of(objects, "quanta-web")
    assert web[0] == "daphne" and web[-1] == "portal.asgi:application"
    assert "--proxy-headers" in web
    assert command_of(objects, "quanta-migrate")[-2:] == ["migrate", "--noinput"]
    assert command_of(objects, "quanta-ssh-gateway")[-1] == "ssh_gateway"
    beat = by_kind(objects, "Deployment")["quanta-beat"]
    assert beat["spec"]["replicas"] == 1 and beat["spec"]["strategy"]["type"] == "Recreate"
    assert command_of(objects, "quanta-beat")[:4] == ["celery", "-A", "portal", "beat"]
    # Every pod but the Job's waits for the migrations.
    for name, spec in pod_specs(objects).items():
        waits = [c for c in spec.get("initContainers", ()) if "migrate --check" in str(c)]
        assert bool(waits) == (name != "quanta-migrate"), name


def test_the_worker_consumes_every_routed_queue() -> None:
    from django.conf import settings

    from portal.celery import app

    command = command_of(base_objects(), "quanta-worker")
    queues = set(command[command.index("-Q") + 1].split(","))
    routed = {route["queue"] for route in app.conf.task_routes.values()}
    assert routed | {settings.CELERY_TASK_DEFAULT_QUEUE} <= queues


def test_services_and_ingress_reach_the_pods() -> None:
    objects = base_objects()
    deployments = by_kind(objects, "Deployment")
    services = by_kind(objects, "Service")
    for name in ("quanta-web", "quanta-ssh-gateway"):
        service = services[name]["spec"]
        pod = deployments[name]["spec"]["template"]
        assert service["selector"].items() <= pod["metadata"]["labels"].items(), name
        ports = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", ())}
        assert {p["targetPort"] for p in service["ports"]} <= ports, name
    (ingress,) = by_kind(objects, "Ingress").values()
    (rule,) = ingress["spec"]["rules"]
    backend = rule["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] == "quanta-web"
    assert backend["port"]["name"] in {p["name"] for p in services["quanta-web"]["spec"]["ports"]}


def test_web_probes_the_health_endpoints_with_an_allowed_host() -> None:
    objects = base_objects()
    (web,) = pod_specs(objects)["quanta-web"]["containers"]
    allowed = by_kind(objects, "ConfigMap")["quanta-config"]["data"]["ALLOWED_HOSTS"].split(",")
    paths = {}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = web[probe]["httpGet"]
        paths[probe] = get["path"]
        host = {h["name"]: h["value"] for h in get["httpHeaders"]}["Host"]
        assert host in allowed, probe
        resolve(get["path"])  # a URL the portal has
    assert paths == {
        "startupProbe": "/healthz",
        "livenessProbe": "/healthz",
        "readinessProbe": "/readyz",
    }
    for name, spec in pod_specs(objects).items():
        if name != "quanta-migrate":
            main = spec["containers"][0]
            assert "livenessProbe" in main or "readinessProbe" in main, name


def test_every_container_is_unprivileged_and_requests_resources() -> None:
    for name, spec in pod_specs(base_objects()).items():
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] == 10001, name
        assert pod["seccompProfile"]["type"] == "RuntimeDefault", name
        for container in containers(spec):
            where = f"{name}/{container['name']}"
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["capabilities"]["drop"] == ["ALL"], where
            assert context["readOnlyRootFilesystem"] is True, where
            assert {"cpu", "memory"} <= set(container["resources"]["requests"]), where
            assert "memory" in container["resources"]["limits"], where


def settings_variables() -> set[str]:
    text = (ROOT / "portal" / "settings.py").read_text()
    return set(re.findall(r'env\w*\(\s*"([A-Z][A-Z0-9_]+)"', text))


def test_every_variable_the_manifests_set_is_one_the_settings_read_and_the_docs_list() -> None:
    objects = base_objects()
    names = set(by_kind(objects, "ConfigMap")["quanta-config"]["data"])
    example = (OVERLAY / "secrets.env.example").read_text().splitlines()
    secrets = {line.split("=", 1)[0] for line in example if line and not line.startswith("#")}
    assert secrets == SECRET_KEYS
    names |= secrets
    for spec in pod_specs(objects).values():
        for container in containers(spec):
            names |= {env["name"] for env in container.get("env", ())}
    overlay = yaml.safe_load((OVERLAY / "kustomization.yaml").read_text())
    for generator in overlay["configMapGenerator"]:
        names |= {literal.split("=", 1)[0] for literal in generator["literals"]}
    assert names - settings_variables() == set()
    documented = (ROOT / "docs" / "configuration.md").read_text()
    assert {n for n in names if f"`{n}`" not in documented} == set()


def documented_rbac() -> list[dict[str, Any]]:
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    section = text[text.index("## RBAC") :]
    block = section[section.index("```yaml") + len("```yaml") : section.index("```\n", 10)]
    return list(yaml.safe_load_all(block))


def test_rbac_is_exactly_the_one_docs_kubernetes_md_gives() -> None:
    objects = base_objects()
    for documented in documented_rbac():
        ours = by_kind(objects, documented["kind"])[documented["metadata"]["name"]]
        for field in ("rules", "roleRef", "subjects"):
            assert ours.get(field) == documented.get(field), (documented["kind"], field)
    # No other grant anywhere: no Role, RoleBinding or second ClusterRole(Binding).
    grants = [o for o in objects if o["kind"] in ("Role", "RoleBinding", "ClusterRole")]
    grants += [o for o in objects if o["kind"] == "ClusterRoleBinding"]
    assert sorted(label(o) for o in grants) == [
        "ClusterRole-quanta-portal",
        "ClusterRoleBinding-quanta-portal",
    ]


def test_only_web_and_worker_hold_an_api_token() -> None:
    objects = base_objects()
    accounts = by_kind(objects, "ServiceAccount")
    for name, spec in pod_specs(objects).items():
        account = spec["serviceAccountName"]
        assert account in accounts, name
        if name in ("quanta-web", "quanta-worker"):
            assert account == "quanta-portal", name
        else:
            assert accounts[account].get("automountServiceAccountToken") is False, name
            assert spec.get("automountServiceAccountToken") is False, name
