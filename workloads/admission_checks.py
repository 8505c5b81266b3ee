"""Checks that may refuse work before it starts, registered by the layers above workloads.

Billing sits above workloads (it meters them), so workloads cannot ask it whether a payer's
budget still allows a launch. Billing registers a check here from its ``AppConfig.ready``
(as lifecycle listeners and ``workloads.costs`` answers are registered); the launch services
(``launch.launch_environment``, ``launch.submit_job``) refuse a launch with the first reason a
check gives, admission (``admission._screen``) rejects waiting work with it, and the App
Center shows it beside each size it applies to.

A check takes an :class:`Ask` (who pays, what size, who asks) and a ``memo`` dict that lives
for one launch or one admission session, so a check can keep what it computed per payer
there instead of asking the database once per workload of a long line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.reasons import Reason


@dataclass(frozen=True)
class Ask:
    """What is asked for: a start of ``flavor`` paid by the tenant ``payer_tenant_id`` or the
    person ``payer_user_id`` (ids: admission reads them off its line without a query)."""

    payer_tenant_id: int | None
    payer_user_id: int | None
    flavor: Any  # workloads.Flavor
    owner_id: int | None = None

    @classmethod
    def of(cls, workload: Any) -> Ask:
        payer_tenant_id = workload.payer_tenant_id
        if payer_tenant_id is None and workload.payer_user_id is None:
            payer_tenant_id = workload.tenant_id  # work from before payers were stored
        return cls(payer_tenant_id, workload.payer_user_id, workload.flavor, workload.owner_id)

    @classmethod
    def launch(cls, payer: dict[str, Any], flavor: Any, owner: Any) -> Ask:
        """From ``workloads.payer.payer_for``'s fields."""
        tenant, user = payer.get("payer_tenant"), payer.get("payer_user")
        return cls(
            getattr(tenant, "pk", None),
            getattr(user, "pk", None),
            flavor,
            getattr(owner, "pk", None),
        )


Check = Callable[[Ask, dict[str, Any]], "Reason | None"]

_checks: list[Check] = []


def register(check: Check) -> None:
    if check not in _checks:
        _checks.append(check)


def refusal_for(ask: Ask | Any, memo: dict[str, Any] | None = None) -> Reason | None:
    """Why ``ask`` (an :class:`Ask` or a workload) may not start now; None: nothing refuses."""
    if not _checks:
        return None
    if not isinstance(ask, Ask):
        ask = Ask.of(ask)
    memo = {} if memo is None else memo
    for check in _checks:
        reason = check(ask, memo)
        if reason is not None:
            return reason
    return None
