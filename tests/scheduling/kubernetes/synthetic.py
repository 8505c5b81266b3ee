"""A synthetic GPU cluster as the API server would list it: nodes with GPU feature discovery
labels and device plugin resources, and pods (Quanta's and everyone else's) on them. Used by
the inventory tests and by bench/k8s_sync.py."""

from __future__ import annotations

import copy
import random
from typing import Any

from scheduling.backends.kubernetes import names

Obj = dict[str, Any]

MODELS = [
    # product label, memory MiB, whole GPUs (nvidia device plugin) or shared (Volcano vGPU)
    ("Tesla-V100-SXM2-32GB", 32768, "whole"),
    ("NVIDIA-A100-SXM4-80GB", 81920, "whole"),
    ("Tesla-T4", 15360, "shared"),
]


def node(index: int, rng: random.Random) -> Obj:
    product, memory, mode = MODELS[index % len(MODELS)]
    gpus = 8 if mode == "whole" else 4
    allocatable = {"cpu": "95500m", "memory": "772000Mi", "pods": "110"}
    if mode == "whole":
        allocatable["nvidia.com/gpu"] = str(gpus)
    else:
        allocatable.update(
            {
                "volcano.sh/vgpu-number": str(gpus * 10),
                "volcano.sh/vgpu-memory": str(gpus * memory),
                "volcano.sh/vgpu-cores": str(gpus * 100),
            }
        )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"gpu-{index:04d}",
            "labels": {
                "kubernetes.io/hostname": f"gpu-{index:04d}",
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "topology.kubernetes.io/zone": f"rack-{index // 40}",
                "node.kubernetes.io/instance-type": "gpu-8x" if gpus == 8 else "gpu-4x",
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.memory": str(memory),
                "nvidia.com/gpu.count": str(gpus),
                "nvidia.com/cuda.driver.major": "570",
                "nvidia.com/gfd.timestamp": str(1_790_000_000 + rng.randrange(60)),
            },
        },
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {
            "capacity": dict(allocatable),
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(index: int, node_name: str, rng: random.Random, *, quanta: bool) -> Obj:
    labels = {"app": "daemon"} if not quanta else {names.MANAGED_BY: names.MANAGER}
    requests = {
        "cpu": f"{rng.choice([250, 500, 1000, 4000])}m",
        "memory": f"{rng.choice([512, 2048, 16384])}Mi",
    }
    if quanta and rng.random() < 0.5:
        requests["nvidia.com/gpu"] = "1"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"pod-{index:05d}",
            "namespace": "quanta-ml-101" if quanta else "kube-system",
            "labels": labels,
        },
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "main", "image": "x", "resources": {"requests": requests}}],
        },
        "status": {"phase": rng.choice(["Running"] * 9 + ["Succeeded"])},
    }


def cluster(nodes: int = 1000, pods: int = 10_000, seed: int = 7) -> tuple[list[Obj], list[Obj]]:
    rng = random.Random(seed)
    node_objects = [node(i, rng) for i in range(nodes)]
    pod_objects = [
        pod(i, node_objects[i % nodes]["metadata"]["name"], rng, quanta=(i // nodes) % 3 != 0)
        for i in range(pods)
    ]
    return node_objects, pod_objects


def ten_changes(nodes: list[Obj], pods: list[Obj]) -> tuple[list[Obj], list[Obj]]:
    """The cluster a minute later: GPU feature discovery re-stamped every node (not worth a
    write) and ten things changed, each worth one row."""
    nodes, pods = copy.deepcopy(nodes), copy.deepcopy(pods)
    for obj in nodes:
        obj["metadata"]["labels"]["nvidia.com/gfd.timestamp"] = "1790000999"
    nodes[0]["spec"]["unschedulable"] = True  # cordoned
    nodes[1]["spec"]["taints"].append({"key": "maintenance", "effect": "NoExecute"})
    nodes[2]["metadata"]["labels"]["quanta.io/reserved-for"] = "dl-201"
    nodes[4]["status"]["allocatable"]["memory"] = "771000Mi"
    nodes[5]["status"]["conditions"] = [{"type": "Ready", "status": "False"}]  # NotReady
    del nodes[3]  # gone
    for i in range(10, 14):  # someone else's pods arrive on four nodes
        name = nodes[i]["metadata"]["name"]
        pods.append(pod(90_000 + i, name, random.Random(i), quanta=False))
    return nodes, pods
