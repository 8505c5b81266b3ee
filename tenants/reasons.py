"""The reasons the quota arithmetic (``tenants.quota``) gives: which limit refuses."""

from __future__ import annotations

from core.reasons import define, gettext_noop

# The resource words of tenants.quota.RESOURCES, by resource key.
RESOURCE_WORDS = {
    "gpus": gettext_noop("GPUs"),
    "gpu_memory_mib": gettext_noop("MiB of GPU memory"),
    "cpu_cores": gettext_noop("CPU cores"),
    "memory_mib": gettext_noop("MiB of memory"),
    "environments": gettext_noop("environments"),
    "jobs": gettext_noop("jobs"),
}
# Tenant kinds (tenants.choices.TenantKind values), as refusals name them.
KIND_WORDS = {
    "organisation": gettext_noop("organisation"),
    "department": gettext_noop("department"),
    "class": gettext_noop("class"),
    "project": gettext_noop("project"),
}
_WORDS = {"kind": KIND_WORDS, "what": RESOURCE_WORDS}

QUOTA_EXHAUSTED = define(
    "quota_exhausted",
    gettext_noop(
        "%(kind)s %(tenant)s: %(used)s of %(limit)s %(what)s in use (asked for %(asked)s)"
    ),
    words=_WORDS,
)
MEMBER_QUOTA_EXHAUSTED = define(
    "member_quota_exhausted",
    gettext_noop(
        "%(kind)s %(tenant)s: you use %(used)s of your %(limit)s %(what)s (asked for %(asked)s)"
    ),
    words=_WORDS,
)
GPU_HOURS_USED_UP = define(
    "gpu_hours_used_up",
    gettext_noop(
        "%(kind)s %(tenant)s: GPU-hours for this term are used up (%(used)s of %(limit)s)"
    ),
    words={"kind": KIND_WORDS},
)
MEMBER_GPU_HOURS_USED_UP = define(
    "member_gpu_hours_used_up",
    gettext_noop(
        "%(kind)s %(tenant)s: your GPU-hours for this term are used up (%(used)s of %(limit)s)"
    ),
    words={"kind": KIND_WORDS},
)
