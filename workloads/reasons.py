"""The reasons the workloads layer writes, and how stored reasons are read back.

A workload (and each of its events) keeps its reason as a code with parameters
(``reason_code``, ``reason_params``) beside the English text (``reason``: the API, logs and
audit trail stay one language). Pages and live updates render it from the code in the reader's
language (:func:`render_for`). The codes of the layers below are in ``tenants/reasons.py`` and
``scheduling/reasons.py``; the ones written here (lifecycle, admission, culling, extensions,
grant expiry) are below, in today's English wording. A row written before codes existed has no
code and is shown in English as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.reasons import Reason, define, gettext_noop, params_from_json, plain
from scheduling import reasons as scheduling_reasons
from scheduling.reasons import FAILED, FINISHED, RUNNING
from tenants import reasons as tenant_reasons
from workloads.choices import WEEKDAYS

__all__ = ["FAILED", "FINISHED", "RUNNING", "Reason", "reason_of", "render_for", "stored"]

# Imported for their codes: every code a stored reason may carry is registered once this
# module is.
_LAYERS = (scheduling_reasons, tenant_reasons)

# workloads.choices.WEEKDAYS, as grant windows name them (Django's catalog has them too).
DAY_WORDS = {
    "Mon": gettext_noop("Mon"),
    "Tue": gettext_noop("Tue"),
    "Wed": gettext_noop("Wed"),
    "Thu": gettext_noop("Thu"),
    "Fri": gettext_noop("Fri"),
    "Sat": gettext_noop("Sat"),
    "Sun": gettext_noop("Sun"),
}
# workloads.choices.AppKind labels, by value.
APP_WORDS = {
    "jupyter": gettext_noop("JupyterLab"),
    "vscode": gettext_noop("VS Code"),
    "pycharm-desktop": gettext_noop("PyCharm (desktop)"),
    "desktop": gettext_noop("Desktop"),
    "tensorboard": gettext_noop("TensorBoard"),
    "terminal": gettext_noop("Terminal"),
}

# --- admission (workloads.admission) -----------------------------------------------------------

WAITING_FOR_QUOTA = define("waiting_for_quota", gettext_noop("waiting for quota: %(why)s"))
WAITING_FOR_WINDOW = define(
    "waiting_for_window", gettext_noop("waiting for the grant's time window (%(windows)s)")
)
WINDOW = define("window", gettext_noop("%(day)s %(start)s–%(end)s"), words={"day": DAY_WORDS})
NEEDS_KUBERNETES = define(
    "needs_kubernetes",
    gettext_noop(
        "%(app)s needs a Kubernetes cluster; %(cluster)s runs JupyterLab, terminals and TensorBoard"
    ),
    words={"app": APP_WORDS},
)
GRANT_FOR_EXPIRED = define(
    "grant_for_expired", gettext_noop("the grant for %(template)s expired on %(date)s")
)
STARTING_ON = define("starting_on", gettext_noop("starting on %(nodes)s"))
WAITING = define("waiting", gettext_noop("waiting: %(why)s"))
QUEUE_CLOSED = define("queue_closed", gettext_noop("queue %(queue)s is closed"))
WAITING_FOR_PREEMPTED = define(
    "waiting_for_preempted", gettext_noop("waiting for preempted work to stop")
)
WAITING_FOR_TURN = define("waiting_for_turn", gettext_noop("waiting for its turn"))
PREEMPTED = define("preempted", gettext_noop("preempted by higher-priority work in the same queue"))
RECLAIMED = define(
    "reclaimed", gettext_noop("reclaimed: another queue is below its fair share of the cluster")
)

# --- the lifecycle (workloads.services) --------------------------------------------------------

LAUNCHED = define("launched", gettext_noop("launched %(template)s with %(flavor)s"))
SUBMITTED = define("submitted", gettext_noop("submitted: %(command)s"))
DEPLOYED = define("deployed", gettext_noop("deployed %(model)s with %(flavor)s"))
STOPPED_BY_PORTAL = define("stopped_by_portal", gettext_noop("stopped by the portal"))
STOPPED_BY = define("stopped_by", gettext_noop("stopped by %(who)s"))
EXTENDED_UNTIL = define("extended_until", gettext_noop("extended until %(time)s"))
STOPPED_OUTSIDE = define("stopped_outside", gettext_noop("stopped outside the portal"))
LOST = define("lost", gettext_noop("lost: the cluster no longer knows this workload"))
RESTARTING_AFTER_FAILURE = define(
    "restarting_after_failure",
    gettext_noop("restarting after a failure (%(why)s): attempt %(a)s of %(b)s"),
)
NO_GPU_HERE = define(
    "no_gpu_here",
    gettext_noop("this cluster has no %(what)sGPU: GPU sizes cannot run here until one is added"),
)
MAX_DURATION = define("max_duration", gettext_noop("reached its maximum duration (%(n)s minutes)"))
IDLE_FOR = define("idle_for", gettext_noop("idle for %(n)s minutes"))
IDLE_WARNING = define("idle_warning", gettext_noop("idle: stops in %(n)s minutes unless used"))
GPU_IDLE_WARNING = define(
    "gpu_idle_warning",
    gettext_noop(
        "%(name)s: its GPU has been below %(percent)s %% busy for %(n)s minutes; it stops in "
        "%(grace)s minutes unless you keep it"
    ),
)
GPU_IDLE_FOR = define(
    "gpu_idle_for",
    gettext_noop("stopped: its GPU stayed below %(percent)s %% busy for %(n)s minutes"),
)
GPU_KEPT = define("gpu_kept", gettext_noop("kept: the GPU idle time starts again"))
GRANT_EXPIRED = define("grant_expired", gettext_noop("the grant expired on %(date)s"))


def windows(grant_windows: Any) -> list[Reason]:
    """A grant's weekly windows ({day, start, end}) as reasons ("Tue 14:00–16:00")."""
    return [WINDOW(day=WEEKDAYS[w["day"]], start=w["start"], end=w["end"]) for w in grant_windows]


def stopped_by(actor: Any) -> Reason:
    """Who stopped a workload: a person by name, else the portal."""
    who = getattr(actor, "username", None)
    return STOPPED_BY(who=who) if who else STOPPED_BY_PORTAL()


# --- reading back ------------------------------------------------------------------------------


def stored(reason: Reason | str | None) -> tuple[str, dict[str, Any], str]:
    """``(reason_code, reason_params, reason)`` to store; a plain str is code ``text``."""
    if reason is None or reason == "":
        return "", {}, ""
    if isinstance(reason, str):
        reason = plain(reason)
    data = reason.to_json()
    return data["code"], data["params"], reason.text()[:500]


def reason_of(item: Any) -> Reason | None:
    """The reason of a workload, an event or an API item (a dict): from its code and
    parameters; a row without a code (written before codes) as its English text."""
    if isinstance(item, Reason):
        return item
    if isinstance(item, Mapping):
        code, params, text = item.get("reason_code"), item.get("reason_params"), item.get("reason")
    else:
        code = getattr(item, "reason_code", "")
        params = getattr(item, "reason_params", None)
        text = getattr(item, "reason", "")
    if code:
        return Reason(str(code), params_from_json(params or {}))
    if text:
        return plain(str(text))
    return None


def render_for(item: Any, language: str | None = None) -> str:
    """``item``'s reason in ``language`` (default: the active one); "" when it has none."""
    reason = reason_of(item)
    if reason is None:
        return ""
    return reason.render() if language is None else reason.render_in(language)
