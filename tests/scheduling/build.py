"""Small builders so each test states only what matters to it."""

from __future__ import annotations

from typing import Any

from scheduling.core.model import Job, Node, TaskRequest


def node(
    name: str,
    gpus: int = 0,
    model: str = "V100M16",
    cpu: int = 64_000,
    mem: int = 256_000,
    **kw: Any,
) -> Node:
    return Node(name, cpu, mem, gpus, model if gpus else "", **kw)


def task(
    name: str = "t",
    gpus: int = 0,
    milli: int = 1000,
    cpu: int = 1000,
    mem: int = 1000,
    models: str = "",
    **kw: Any,
) -> TaskRequest:
    return TaskRequest(
        name,
        cpu,
        mem,
        gpus,
        milli if gpus else 0,
        frozenset(m for m in models.split("|") if m),
        **kw,
    )


def job(
    name: str,
    tasks: int = 1,
    min_available: int | None = None,
    queue: str = "default",
    priority: int = 0,
    order: int = 0,
    **task_kw: Any,
) -> Job:
    members = tuple(task(f"{name}-{i}", **task_kw) for i in range(tasks))
    return Job(name, members, queue, priority, min_available or tasks, order)
