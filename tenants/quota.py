"""Hierarchical quota arithmetic, free of Django so it can be reasoned about and typed.

A request is checked against a chain of levels, from the school down to the class. Each
level carries its tenant's limits and current use, and optionally the member's own limits
and use inside that tenant. The check refuses with the *tightest* limit: the one with the
least room left, and among equals the level nearest the class, because that is the one the
person can do something about ("class ML-101: 4 of 4 GPUs in use").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from core.reasons import Reason
from tenants import reasons as R

# The resources a quota limits, with the words used in messages.
RESOURCES: dict[str, str] = {
    "gpus": "GPUs",
    "gpu_memory_mib": "MiB of GPU memory",
    "cpu_cores": "CPU cores",
    "memory_mib": "MiB of memory",
    "environments": "environments",
    "jobs": "jobs",
}
# Limits that apply per member, mapped to the resource they count.
MEMBER_RESOURCES: dict[str, str] = {
    "member_gpus": "gpus",
    "member_environments": "environments",
    "member_jobs": "jobs",
}

Number = Decimal | int


def _fmt(value: Number) -> str:
    text = f"{Decimal(value).normalize():f}"
    return text


@dataclass(frozen=True)
class Request:
    """What one workload needs while it runs."""

    gpus: Decimal = Decimal(0)
    gpu_memory_mib: int = 0
    cpu_cores: Decimal = Decimal(0)
    memory_mib: int = 0
    environments: int = 0
    jobs: int = 0

    def amount(self, resource: str) -> Decimal:
        return Decimal(getattr(self, resource))


@dataclass(frozen=True)
class Level:
    """One tenant of the chain: its limits (None: unlimited) and what is in use now."""

    tenant: str
    kind: str
    limits: Mapping[str, Number | None]
    used: Mapping[str, Number]
    gpu_hours_limit: Number | None = None
    gpu_hours_used: Number = 0
    member_limits: Mapping[str, Number | None] = field(default_factory=dict)
    member_used: Mapping[str, Number] = field(default_factory=dict)
    member_gpu_hours_limit: Number | None = None
    member_gpu_hours_used: Number = 0


@dataclass(frozen=True)
class Refusal:
    """A limit that does not leave room for the request."""

    tenant: str
    kind: str
    resource: str
    used: Decimal
    limit: Decimal
    requested: Decimal
    per_member: bool = False
    depth: int = 0

    @property
    def room(self) -> Decimal:
        return self.limit - self.used

    @property
    def reason(self) -> Reason:
        """Why, as a reason code with its numbers (``tenants.reasons``)."""
        common = {"kind": self.kind, "tenant": self.tenant}
        numbers = {"used": _fmt(self.used), "limit": _fmt(self.limit)}
        if self.resource == "gpu_hours":
            code = R.MEMBER_GPU_HOURS_USED_UP if self.per_member else R.GPU_HOURS_USED_UP
            return code(**common, **numbers)
        code = R.MEMBER_QUOTA_EXHAUSTED if self.per_member else R.QUOTA_EXHAUSTED
        return code(**common, **numbers, what=self.resource, asked=_fmt(self.requested))

    @property
    def message(self) -> str:
        """The reason in English."""
        return self.reason.text()


def refusals(request: Request, chain: Sequence[Level]) -> list[Refusal]:
    """Every limit in the chain that the request would break."""
    found: list[Refusal] = []
    for depth, level in enumerate(chain):
        for resource in RESOURCES:
            want = request.amount(resource)
            limit = level.limits.get(resource)
            if want <= 0 or limit is None:
                continue
            used = Decimal(level.used.get(resource, 0))
            if used + want > Decimal(limit):
                found.append(
                    Refusal(
                        level.tenant, level.kind, resource, used, Decimal(limit), want, depth=depth
                    )
                )
        for member_field, resource in MEMBER_RESOURCES.items():
            want = request.amount(resource)
            limit = level.member_limits.get(member_field)
            if want <= 0 or limit is None:
                continue
            used = Decimal(level.member_used.get(resource, 0))
            if used + want > Decimal(limit):
                found.append(
                    Refusal(
                        level.tenant,
                        level.kind,
                        resource,
                        used,
                        Decimal(limit),
                        want,
                        per_member=True,
                        depth=depth,
                    )
                )
        if request.gpus > 0:
            found.extend(_gpu_hour_refusals(level, depth))
    return found


def _gpu_hour_refusals(level: Level, depth: int) -> Iterable[Refusal]:
    if level.gpu_hours_limit is not None and level.gpu_hours_used >= level.gpu_hours_limit:
        yield Refusal(
            level.tenant,
            level.kind,
            "gpu_hours",
            Decimal(level.gpu_hours_used),
            Decimal(level.gpu_hours_limit),
            Decimal(0),
            depth=depth,
        )
    limit = level.member_gpu_hours_limit
    if limit is not None and level.member_gpu_hours_used >= limit:
        yield Refusal(
            level.tenant,
            level.kind,
            "gpu_hours",
            Decimal(level.member_gpu_hours_used),
            Decimal(limit),
            Decimal(0),
            per_member=True,
            depth=depth,
        )


def tightest(found: Sequence[Refusal]) -> Refusal | None:
    """The refusal to show: least room left, then nearest the class, then per-member."""
    if not found:
        return None
    return min(found, key=lambda r: (r.room, -r.depth, not r.per_member))


def check(request: Request, chain: Sequence[Level]) -> Refusal | None:
    """None when the request fits at every level, else the tightest limit that refuses."""
    return tightest(refusals(request, chain))


def over_use(limits: Mapping[str, Number | None], used: Mapping[str, Number]) -> list[str]:
    """Resources whose use is above the limit (a quota lowered below current use)."""
    return [
        resource
        for resource, limit in limits.items()
        if limit is not None and Decimal(used.get(resource, 0)) > Decimal(limit)
    ]
