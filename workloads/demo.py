"""Demo catalog: images, flavors, templates and grants for the demo classes."""

from __future__ import annotations

from typing import Any

from scheduling.models import Cluster
from tenants.models import Tenant
from workloads.models import AppTemplate, Flavor, Grant, Image

IMAGES = [
    {
        "slug": "pytorch-2-13",
        "name": "PyTorch 2.13",
        "framework": "PyTorch",
        "framework_version": "2.13",
        "tools": ["jupyterlab", "tensorboard", "terminal"],
        "registry_ref": "quanta/pytorch:2.13-cuda12.4",
    },
    {
        "slug": "python-ds",
        "name": "Python 3.11 data science",
        "framework": "scikit-learn",
        "framework_version": "1.7",
        "tools": ["jupyterlab", "terminal"],
        "registry_ref": "quanta/python-ds:3.11",
    },
    {
        "slug": "desktop",
        "name": "Desktop (noVNC) with PyCharm",
        "framework": "Python",
        "framework_version": "3.11",
        "tools": ["novnc", "xterm", "idle", "pycharm"],
        "registry_ref": "quanta/desktop:3.11",
    },
]
FLAVORS = [
    {"slug": "cpu-small", "name": "½ CPU, 1 GiB", "cpu_milli": 500, "memory_mib": 1024},
    {"slug": "cpu-medium", "name": "2 CPU, 4 GiB", "cpu_milli": 2000, "memory_mib": 4096},
    {
        "slug": "vgpu-8g",
        "name": "1 × 8 GiB vGPU, 4 CPU, 16 GiB",
        "cpu_milli": 4000,
        "memory_mib": 16384,
        "gpu_milli": 250,
        "gpu_memory_mib": 8192,
    },
    {
        "slug": "gpu-1",
        "name": "1 GPU, 8 CPU, 32 GiB",
        "cpu_milli": 8000,
        "memory_mib": 32768,
        "gpus": 1,
    },
    {
        "slug": "gpu-4-v100",
        "name": "4 × V100, 32 CPU, 128 GiB",
        "cpu_milli": 32000,
        "memory_mib": 131072,
        "gpus": 4,
        "gpu_models": ["V100M16", "V100M32"],
    },
]
TEMPLATES: list[dict[str, Any]] = [
    {
        "slug": "jupyter-pytorch",
        "name": "JupyterLab · PyTorch",
        "kind": "jupyter",
        "image": "pytorch-2-13",
        "default": "cpu-small",
        "allowed": ["cpu-small", "cpu-medium", "vgpu-8g", "gpu-1", "gpu-4-v100"],
        "description": "JupyterLab with PyTorch; your files persist between sessions.",
    },
    {
        "slug": "jupyter-ds",
        "name": "JupyterLab · data science",
        "kind": "jupyter",
        "image": "python-ds",
        "default": "cpu-small",
        "allowed": ["cpu-small", "cpu-medium"],
    },
    {
        "slug": "terminal",
        "name": "Terminal",
        "kind": "terminal",
        "image": "python-ds",
        "default": "cpu-small",
        "allowed": ["cpu-small"],
    },
    {
        "slug": "vscode",
        "name": "VS Code",
        "kind": "vscode",
        "image": "pytorch-2-13",
        "default": "cpu-medium",
        "allowed": ["cpu-small", "cpu-medium", "vgpu-8g"],
        "description": "VS Code in the browser, your home folder as its workspace.",
    },
    {
        "slug": "desktop-xterm",
        "name": "Desktop · xterm",
        "kind": "desktop",
        "image": "desktop",
        "program": "xterm",
        "default": "cpu-small",
        "allowed": ["cpu-small", "cpu-medium"],
        "description": "A Linux desktop in the browser with a terminal window.",
    },
    {
        "slug": "pycharm",
        "name": "PyCharm",
        "kind": "pycharm-desktop",
        "image": "desktop",
        "default": "cpu-medium",
        "allowed": ["cpu-medium", "vgpu-8g"],
        "description": "PyCharm on a desktop in the browser.",
    },
    {
        "slug": "jupyter-sim",
        "name": "JupyterLab · PyTorch on a GPU (simulated)",
        "kind": "jupyter",
        "image": "pytorch-2-13",
        "default": "vgpu-8g",
        "allowed": ["vgpu-8g", "gpu-1"],
        "description": "Try a GPU size on the simulated GPU farm: it queues, is placed and "
        "runs like real work, but nothing executes and there is nothing to open.",
    },
    {
        "slug": "model-server",
        "name": "Model server",
        "kind": "model-server",
        "image": "python-ds",
        "default": "cpu-small",
        "allowed": ["cpu-small", "cpu-medium"],
        "description": "Serves a registered model over the Open Inference Protocol v2.",
    },
]
# class -> (template, flavors, extra). "cluster": "sim" sends the grant's work to the
# simulated GPU farm: the demo host may have no GPU at all.
GRANTS: list[tuple[str, str, list[str], dict[str, Any]]] = [
    ("ml-101", "jupyter-pytorch", ["cpu-small", "cpu-medium", "vgpu-8g"], {}),
    ("ml-101", "terminal", ["cpu-small"], {}),
    ("ml-101", "vscode", ["cpu-small"], {}),
    ("ml-101", "desktop-xterm", ["cpu-small"], {}),
    ("ml-101", "pycharm", ["cpu-medium"], {}),
    ("ml-101", "model-server", ["cpu-small"], {"member_limit": 2}),
    ("dl-201", "jupyter-pytorch", ["cpu-small"], {"max_duration_minutes": 480}),
    (
        "dl-201",
        "jupyter-pytorch",
        ["gpu-1", "gpu-4-v100"],
        {"max_duration_minutes": 480, "member_limit": 2, "cluster": "sim"},
    ),
    ("dl-201", "vscode", ["cpu-medium"], {}),
    # Every demo class may try a GPU size on the simulated farm.
    ("ml-101", "jupyter-sim", ["vgpu-8g", "gpu-1"], {"cluster": "sim", "member_limit": 1}),
    ("dl-201", "jupyter-sim", ["vgpu-8g", "gpu-1"], {"cluster": "sim", "member_limit": 1}),
    ("sp-210", "jupyter-sim", ["vgpu-8g"], {"cluster": "sim", "member_limit": 1}),
    (
        "sp-210",
        "jupyter-ds",
        ["cpu-small", "cpu-medium"],
        {"windows": [{"day": d, "start": "08:00", "end": "22:00"} for d in range(5)]},
    ),
]


def seed(actor: Any) -> None:
    for image in IMAGES:
        Image.objects.get_or_create(slug=image["slug"], defaults=image)
    for flavor in FLAVORS:
        Flavor.objects.get_or_create(slug=flavor["slug"], defaults=flavor)
    for t in TEMPLATES:
        template, created = AppTemplate.objects.get_or_create(
            slug=t["slug"],
            defaults={
                "name": t["name"],
                "kind": t["kind"],
                "image": Image.objects.get(slug=t["image"]),
                "default_flavor": Flavor.objects.get(slug=t["default"]),
                "description": t.get("description", ""),
                "program": t.get("program", ""),
            },
        )
        if created:
            template.allowed_flavors.set(Flavor.objects.filter(slug__in=t["allowed"]))
    for tenant_slug, template_slug, flavors, extra in GRANTS:
        tenant = Tenant.objects.get(slug=tenant_slug)
        template = AppTemplate.objects.get(slug=template_slug)
        options = dict(extra)
        cluster = Cluster.objects.filter(slug=options.pop("cluster", "")).first()
        grant, created = Grant.objects.get_or_create(
            tenant=tenant,
            template=template,
            cluster=cluster,
            defaults={"created_by": actor, **options},
        )
        if created:
            grant.flavors.set(Flavor.objects.filter(slug__in=flavors))
