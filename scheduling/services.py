"""Every change to clusters, nodes, GPUs, queues and priority classes goes through here.

Each function runs in one transaction, takes the acting user as ``actor`` and writes an audit
row in it. Errors a person can fix raise Django's ``ValidationError`` naming the field; the
API turns them into 400 responses, pages into form errors. Who may call them (superusers, the
platform's operators) is checked by the API and the console pages before they do.

Inventory sync (``scheduling.inventory``) is not here: it is the backend's report of what
exists, not a person's change, and keeps an admin's cordon as it finds it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.utils.translation import gettext as _

from core.audit import record
from scheduling.models import DEFAULT_QUEUE, Cluster, GpuDevice, Node, PriorityClass, Queue

M = TypeVar("M", bound=models.Model)

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
CAPABILITY_KEYS = ("gpus", "cpu_milli", "memory_mib", "gpu_memory_mib")
PRIORITY_RANGE = (-1_000_000, 1_000_000_000)
NODE_FIELDS = ("labels", "taints")
GPU_DEVICE_FIELDS = ("sharing", "mig_profiles")


# What uses a queue or a priority class is mostly above this layer (workloads, grants), so
# those apps register checks in their AppConfig.ready(): each returns why the object cannot be
# deleted now, or "" when nothing of theirs uses it.
QueueInUse = Callable[[Queue], str]
PriorityClassInUse = Callable[[PriorityClass], str]
_queue_in_use: list[QueueInUse] = []
_priority_class_in_use: list[PriorityClassInUse] = []


def register_queue_in_use(check: QueueInUse) -> None:
    if check not in _queue_in_use:
        _queue_in_use.append(check)


def register_priority_class_in_use(check: PriorityClassInUse) -> None:
    if check not in _priority_class_in_use:
        _priority_class_in_use.append(check)


def _refuse_if_used(instance: M, checks: list[Callable[[M], str]]) -> None:
    for check in checks:
        why = check(instance)
        if why:
            raise ValidationError(why)


# --- Shared shape of create / update / delete -------------------------------------------------


def _action(instance: models.Model, verb: str) -> str:
    return f"{instance._meta.model_name}.{verb}"


def _create(model: type[M], *, actor: Any, m2m: tuple[str, ...] = (), **fields: Any) -> M:
    related = {name: fields.pop(name) for name in m2m if name in fields}
    instance = model._default_manager.create(**fields)
    for name, values in related.items():
        getattr(instance, name).set(values)
    record(_action(instance, "create"), actor=actor, target=instance)
    return instance


def _update(instance: M, *, actor: Any, m2m: tuple[str, ...] = (), **changes: Any) -> M:
    for name, value in changes.items():
        if name not in m2m:
            setattr(instance, name, value)
    instance.save()
    for name in m2m:
        if name in changes:
            getattr(instance, name).set(changes[name])
    record(_action(instance, "update"), actor=actor, target=instance, fields=sorted(changes))
    return instance


def _delete(instance: models.Model, *, actor: Any) -> None:
    record(_action(instance, "delete"), actor=actor, target=instance)
    instance.delete()


def _only(changes: dict[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = set(changes) - set(allowed)
    if unknown:
        raise ValidationError({name: _("cannot be changed here") for name in sorted(unknown)})


# --- Clusters ----------------------------------------------------------------------------------


def check_cluster_config(value: Any) -> dict[str, Any]:
    """A cluster's backend configuration; ``gpus`` is a configured inventory (no NVML)."""
    if not isinstance(value, dict):
        raise ValidationError({"config": _("must be an object")})
    gpus = value.get("gpus")
    if gpus is not None:
        if not isinstance(gpus, list):
            raise ValidationError({"config": _("gpus: a list of {index, model, memory_mib}")})
        for i, gpu in enumerate(gpus):
            if (
                not isinstance(gpu, dict)
                or not isinstance(gpu.get("index"), int)
                or not isinstance(gpu.get("model"), str)
                or not gpu["model"]
                or not isinstance(gpu.get("memory_mib"), int)
                or gpu["memory_mib"] <= 0
            ):
                raise ValidationError(
                    {
                        "config": _(
                            "gpus[%(i)s]: give index (int), model (text) and memory_mib (> 0)"
                        )
                        % {"i": i}
                    }
                )
    overcommit = value.get("cpu_overcommit", 1)
    if not isinstance(overcommit, int | float) or not 1 <= overcommit <= 64:
        raise ValidationError({"config": _("cpu_overcommit: a number from 1 to 64")})
    return value


@transaction.atomic
def create_cluster(*, actor: Any, **fields: Any) -> Cluster:
    if "config" in fields:
        check_cluster_config(fields["config"])
    return _create(Cluster, actor=actor, **fields)


@transaction.atomic
def update_cluster(*, actor: Any, cluster: Cluster, **changes: Any) -> Cluster:
    if "config" in changes:
        check_cluster_config(changes["config"])
    return _update(cluster, actor=actor, **changes)


@transaction.atomic
def delete_cluster(*, actor: Any, cluster: Cluster) -> None:
    _delete(cluster, actor=actor)


# --- Nodes and GPUs ----------------------------------------------------------------------------


@transaction.atomic
def cordon(*, actor: Any, node: Node) -> Node:
    """Nothing new lands on the node; what runs there keeps running."""
    return _set_cordoned(node, True, actor=actor)


@transaction.atomic
def uncordon(*, actor: Any, node: Node) -> Node:
    return _set_cordoned(node, False, actor=actor)


def _set_cordoned(node: Node, cordoned: bool, *, actor: Any) -> Node:
    # An UPDATE of the one column: a concurrent inventory sync keeps writing the rest.
    Node.objects.filter(pk=node.pk).update(cordoned=cordoned)
    node.cordoned = cordoned
    record("node.cordon" if cordoned else "node.uncordon", actor=actor, target=node)
    return node


def check_labels(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValidationError({"labels": _("labels are an object of text: text")})
    return value


def check_taints(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list):
        raise ValidationError({"taints": _("taints are a list of {key, value, effect}")})
    for i, taint in enumerate(value):
        if (
            not isinstance(taint, dict)
            or not isinstance(taint.get("key"), str)
            or taint.get("effect", "NoSchedule") not in TAINT_EFFECTS
        ):
            raise ValidationError(
                {
                    "taints": _(
                        "taints[%(i)s]: give key, optionally value and effect "
                        "(NoSchedule, PreferNoSchedule or NoExecute)"
                    )
                    % {"i": i}
                }
            )
    return value


@transaction.atomic
def update_node(*, actor: Any, node: Node, **changes: Any) -> Node:
    """Change a node's labels and taints (what an operator sets; the rest comes from sync)."""
    _only(changes, NODE_FIELDS)
    if "labels" in changes:
        check_labels(changes["labels"])
    if "taints" in changes:
        check_taints(changes["taints"])
    for name, value in changes.items():
        setattr(node, name, value)
    node.save(update_fields=[*changes, "updated_at"])
    record("node.update", actor=actor, target=node, fields=sorted(changes))
    return node


@transaction.atomic
def update_gpu_device(*, actor: Any, device: GpuDevice, **changes: Any) -> GpuDevice:
    """Change how a GPU is shared (whole, fractional, MIG and its profiles)."""
    _only(changes, GPU_DEVICE_FIELDS)
    return _update(device, actor=actor, **changes)


# --- Queues ------------------------------------------------------------------------------------


def _check_queue(fields: dict[str, Any]) -> None:
    if "weight" in fields and fields["weight"] < 1:
        raise ValidationError({"weight": _("must be at least 1")})
    if "capability" in fields:
        capability = fields["capability"]
        if not isinstance(capability, dict):
            raise ValidationError({"capability": _("must be an object")})
        for key, amount in capability.items():
            if key not in CAPABILITY_KEYS:
                raise ValidationError(
                    {
                        "capability": _("unknown resource %(key)r; use %(keys)s")
                        % {"key": key, "keys": ", ".join(CAPABILITY_KEYS)}
                    }
                )
            if not isinstance(amount, int | float) or amount < 0:
                raise ValidationError(
                    {"capability": _("%(key)s must be a number ≥ 0") % {"key": key}}
                )


def _check_queue_parent(queue: Queue | None, cluster: Cluster, parent: Queue | None) -> None:
    if parent is None:
        return
    if parent.cluster_id != cluster.pk:
        raise ValidationError({"parent": _("must be in the same cluster")})
    node: Queue | None = parent
    while node is not None:  # walking up: a queue cannot sit under itself
        if queue is not None and node.pk == queue.pk:
            raise ValidationError(
                {"parent": _("a queue cannot sit under itself or its descendant")}
            )
        node = node.parent


@transaction.atomic
def create_queue(*, actor: Any, cluster: Cluster, name: str, **fields: Any) -> Queue:
    _check_queue(fields)
    _check_queue_parent(None, cluster, fields.get("parent"))
    return _create(Queue, actor=actor, m2m=("tenants",), cluster=cluster, name=name, **fields)


@transaction.atomic
def update_queue(*, actor: Any, queue: Queue, **changes: Any) -> Queue:
    _check_queue(changes)
    _check_queue_parent(queue, changes.get("cluster") or queue.cluster, changes.get("parent"))
    return _update(queue, actor=actor, m2m=("tenants",), **changes)


@transaction.atomic
def delete_queue(*, actor: Any, queue: Queue) -> None:
    """Refused while something still goes to the queue: it is the cluster's default queue,
    the parent of other queues, or has workloads that have not finished."""
    if queue.name == DEFAULT_QUEUE:
        raise ValidationError(
            _(
                "Queue %(name)s is the cluster's default queue: work that no other queue "
                "takes goes there. It cannot be deleted."
            )
            % {"name": queue.name}
        )
    children = list(queue.children.order_by("name").values_list("name", flat=True))
    if children:
        raise ValidationError(
            _("Queue %(name)s is the parent of %(children)s: move or delete those first.")
            % {"name": queue.name, "children": ", ".join(children)}
        )
    _refuse_if_used(queue, _queue_in_use)
    _delete(queue, actor=actor)


# --- Priority classes --------------------------------------------------------------------------


def _check_priority_value(value: int) -> None:
    low, high = PRIORITY_RANGE
    if not low <= value <= high:
        raise ValidationError({"value": _("must be between -1000000 and 1000000000")})


@transaction.atomic
def create_priority_class(*, actor: Any, name: str, value: int, **fields: Any) -> PriorityClass:
    _check_priority_value(value)
    return _create(PriorityClass, actor=actor, name=name, value=value, **fields)


@transaction.atomic
def update_priority_class(
    *, actor: Any, priority_class: PriorityClass, **changes: Any
) -> PriorityClass:
    if "value" in changes:
        _check_priority_value(changes["value"])
    return _update(priority_class, actor=actor, **changes)


@transaction.atomic
def delete_priority_class(*, actor: Any, priority_class: PriorityClass) -> None:
    """Refused while grants give it or waiting or running workloads have its priority."""
    _refuse_if_used(priority_class, _priority_class_in_use)
    _delete(priority_class, actor=actor)
