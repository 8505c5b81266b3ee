"""The openb workload variants of "Beware of Fragmentation" (Weng et al., USENIX ATC '23), made
from the default pod list as the paper describes them (Sec. 6, Figs. 11-14).

Each family moves one share of the workload and leaves the rest as the trace has it:

- cpuNNN: CPU-only pods are NNN/10 % of the pod count (default 13.35 %): CPU-only pods are
  dropped at random, or sampled with replacement and added; GPU pods are kept.
- gpushareNN: GPU-sharing pods (one GPU, gpu_milli < 1000) hold NN % of the GPU request
  (default 28.45 %): the GPU pods are resampled, as many as there were, from the sharing and
  the whole-GPU pods, each draw from whichever side is below its share; CPU-only pods are kept.
- multigpuNN: multi-GPU pods hold NN % of the GPU request (default 7.3 %): multi-GPU pods are
  sampled with replacement and added (or dropped at random) until they do.
- gpuspecNN: pods holding NN % of the GPU request, chosen at random, are constrained to one GPU
  model; the model is drawn uniformly among those with at least 1 % of the cluster's GPUs on
  which the pod fits an empty node, so the small models are asked for far beyond their share
  of the cluster, as the paper's constrained traces ask for the scarce ones.

Shares are of the summed GPU request (num_gpu x gpu_milli), as in the paper's traces. Pods the
generator adds get new names (`<variant>-<n>`); kept pods keep theirs.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from .model import Node, TaskRequest

FAMILIES = ("cpu", "gpushare", "multigpu", "gpuspec")
# The paper's variants of each family (Figs. 11-14); cpu levels are per mille.
LEVELS = {
    "cpu": (50, 100, 200, 250),
    "gpushare": (20, 40, 60, 80, 100),
    "multigpu": (20, 30, 40, 50),
    "gpuspec": (10, 20, 25, 33),
}
MIN_MODEL_SHARE = 0.01  # models with fewer of the cluster's GPUs are never a constraint


def parse(name: str) -> tuple[str, float]:
    """A variant name (cpu250, gpushare40, ...) as its family and target share (0..1)."""
    match = re.fullmatch(r"(cpu|gpushare|multigpu|gpuspec)(\d+)", name)
    if not match:
        raise ValueError(f"unknown variant {name!r}: a family ({', '.join(FAMILIES)}) and a number")
    family, level = match.group(1), int(match.group(2))
    share = level / (1000 if family == "cpu" else 100)
    if not 0 <= share <= 1 or (family == "cpu" and share >= 1):
        raise ValueError(f"variant {name!r}: share out of range")
    return family, share


def all_variants() -> list[str]:
    return [
        f"{family}{level:03d}" if family == "cpu" else f"{family}{level}"
        for family, levels in LEVELS.items()
        for level in levels
    ]


def defining_share(family: str, tasks: Sequence[TaskRequest]) -> float:
    """The share (0..1) the family sets: CPU-only pods of the pod count for cpu, otherwise of
    the summed GPU request."""
    if family == "cpu":
        return sum(1 for t in tasks if not t.num_gpu) / len(tasks)
    total = sum(t.gpu_total_milli for t in tasks)
    if family == "gpushare":
        part = sum(t.gpu_total_milli for t in tasks if t.is_sharing)
    elif family == "multigpu":
        part = sum(t.gpu_total_milli for t in tasks if t.num_gpu > 1)
    elif family == "gpuspec":
        part = sum(t.gpu_total_milli for t in tasks if t.num_gpu and t.gpu_models)
    else:
        raise ValueError(f"unknown family {family!r}")
    return part / total if total else 0.0


def make_variant(
    name: str, tasks: Sequence[TaskRequest], nodes: Sequence[Node], seed: int = 0
) -> list[TaskRequest]:
    """The variant `name` of the pod list `tasks` (the default trace) for the cluster `nodes`."""
    family, share = parse(name)
    rng = np.random.default_rng(seed)
    tasks = list(tasks)
    fresh = (f"{name}-{i}" for i in range(10**9))

    def draw(pool: Sequence[TaskRequest]) -> TaskRequest:
        return replace(pool[int(rng.integers(len(pool)))], name=next(fresh))

    if family == "cpu":
        cpu = [t for t in tasks if not t.num_gpu]
        gpu = [t for t in tasks if t.num_gpu]
        want = round(share / (1 - share) * len(gpu))
        if want <= len(cpu):
            keep = set(rng.choice(len(cpu), size=want, replace=False).tolist())
            cpu = [t for i, t in enumerate(cpu) if i in keep]
        else:
            cpu = cpu + [draw(cpu) for _ in range(want - len(cpu))]
        return gpu + cpu
    if family == "gpushare":
        sharing = [t for t in tasks if t.is_sharing]
        whole = [t for t in tasks if t.num_gpu and not t.is_sharing]
        out = [t for t in tasks if not t.num_gpu]
        part = total = 0
        for _ in range(len(sharing) + len(whole)):
            take_sharing = share > 0 and (share == 1 or part <= share * total)
            task = draw(sharing if take_sharing else whole)
            out.append(task)
            part += task.gpu_total_milli if take_sharing else 0
            total += task.gpu_total_milli
        return out
    if family == "multigpu":
        multi = [t for t in tasks if t.num_gpu > 1]
        part = sum(t.gpu_total_milli for t in multi)
        total = sum(t.gpu_total_milli for t in tasks)
        if part < share * total:
            while part < share * total:
                task = draw(multi)
                after = (part + task.gpu_total_milli) / (total + task.gpu_total_milli)
                if after - share > share - part / total:
                    break  # this pod would overshoot by more than we are short
                tasks.append(task)
                part += task.gpu_total_milli
                total += task.gpu_total_milli
            return tasks
        drop: set[str] = set()
        for i in rng.permutation(len(multi)):
            task = multi[int(i)]
            if part - task.gpu_total_milli < share * (total - task.gpu_total_milli):
                break
            drop.add(task.name)
            part -= task.gpu_total_milli
            total -= task.gpu_total_milli
        return [t for t in tasks if t.name not in drop]
    # gpuspec
    capacity: dict[str, int] = {}
    for n in nodes:
        if n.gpu_count:
            capacity[n.gpu_model] = capacity.get(n.gpu_model, 0) + n.gpu_count
    gpus = sum(capacity.values())
    models = sorted(m for m, c in capacity.items() if c >= MIN_MODEL_SHARE * gpus)
    total = sum(t.gpu_total_milli for t in tasks)
    part = sum(t.gpu_total_milli for t in tasks if t.num_gpu and t.gpu_models)
    out = list(tasks)
    for i in rng.permutation(len(out)):
        task = out[int(i)]
        if not task.num_gpu or task.gpu_models:
            continue
        if part + task.gpu_total_milli / 2 > share * total:
            continue  # a smaller pod may still close the gap
        hosts = [
            m
            for m in models
            if any(
                n.gpu_model == m
                and n.gpu_count >= task.num_gpu
                and n.cpu_milli >= task.cpu_milli
                and n.memory_mib >= task.memory_mib
                for n in nodes
            )
        ]
        if not hosts:
            continue
        out[int(i)] = replace(task, gpu_models=frozenset([str(rng.choice(hosts))]))
        part += task.gpu_total_milli
    return out


def write_tasks(tasks: Sequence[TaskRequest], path: Path) -> None:
    """An openb-format pod CSV (the columns the replay reads, and gpu_spec)."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle)
        out.writerow(["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"])
        for t in tasks:
            out.writerow(
                [
                    t.name,
                    t.cpu_milli,
                    t.memory_mib,
                    t.num_gpu,
                    t.gpu_milli,
                    "|".join(sorted(t.gpu_models)),
                ]
            )
