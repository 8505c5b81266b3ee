"""Who pays for a workload: the one rule, applied at launch and stored on the workload
(``payer_tenant`` or ``payer_user``), so billing never has to guess later.

A grant names its payer (``Grant.payer``): the grant's class or project (the default), another
project or group the teacher manages (``Grant.payer_tenant``), or the person who launches.
"""

from __future__ import annotations

from typing import Any

from workloads.choices import PayerKind
from workloads.models import Grant


def payer_for(grant: Grant | None, owner: Any) -> dict[str, Any]:
    """The payer fields of a workload launched by ``owner`` from ``grant``."""
    if grant is None:
        return {"payer_tenant": None, "payer_user": owner}
    if grant.payer == PayerKind.PERSON:
        return {"payer_tenant": None, "payer_user": owner}
    if grant.payer == PayerKind.TENANT and grant.payer_tenant_id is not None:
        return {"payer_tenant": grant.payer_tenant, "payer_user": None}
    return {"payer_tenant": grant.tenant, "payer_user": None}
