"""Reasons in the reader's language.

Workloads keep their reason in English (the API, logs and audit trail stay one language);
pages and live updates show it translated. Every reason the portal writes has a pattern here;
parts that come from outside (a program's last log line, an API server's message) stay as
they are. Nested reasons (a quota refusal inside "waiting for quota: …") are translated too.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from django.utils.dates import WEEKDAYS_ABBR
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop, ngettext

from workloads.choices import WEEKDAYS

# The resource words of tenants.quota.RESOURCES, as they appear in refusals.
_RESOURCE_WORDS = {
    "GPUs": gettext_noop("GPUs"),
    "MiB of GPU memory": gettext_noop("MiB of GPU memory"),
    "CPU cores": gettext_noop("CPU cores"),
    "MiB of memory": gettext_noop("MiB of memory"),
    "environments": gettext_noop("environments"),
    "jobs": gettext_noop("jobs"),
}
_KINDS = {
    "organisation": gettext_noop("organisation"),
    "department": gettext_noop("department"),
    "class": gettext_noop("class"),
    "project": gettext_noop("project"),
}

Rule = tuple[re.Pattern[str], Callable[[re.Match[str]], str]]


def _kind(word: str) -> str:
    return _(_KINDS.get(word, word))


def _word(word: str) -> str:
    return _(_RESOURCE_WORDS.get(word, word))


_DAY = re.compile(r"\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun)\b")


def _days(text: str) -> str:
    """Weekday abbreviations (workloads.windows.describe) in the reader's language."""
    return _DAY.sub(lambda m: str(WEEKDAYS_ABBR[WEEKDAYS.index(m[1])]), text)


_FREE_GPUS = re.compile(r"^(?P<n>\d+) free (?P<models>.*?) *GPUs?$")
_GPU_SHARE = re.compile(
    r"^a (?P<models>.+ )?GPU with (?P<pct>[\d.]+)% compute and (?P<mib>\d+) MiB free$"
)
_CPU_MEMORY = re.compile(r"^(?P<cores>[\d.]+) CPU cores and (?P<mib>\d+) MiB of memory free$")


def _capacity(what: str) -> str:
    """What no node has free (scheduling.placement), in the reader's language."""
    if m := _FREE_GPUS.match(what):
        models = f"{m['models']} " if m["models"] else ""
        return ngettext(
            "%(n)s free %(models)sGPU", "%(n)s free %(models)sGPUs", int(m["n"])
        ) % _fill(m, models=models)
    if m := _GPU_SHARE.match(what):
        return _("a %(models)sGPU with %(pct)s%% compute and %(mib)s MiB free") % _fill(m)
    if m := _CPU_MEMORY.match(what):
        return _("%(cores)s CPU cores and %(mib)s MiB of memory free") % _fill(m)
    return what


def _rules() -> list[Rule]:
    r = re.compile
    return [
        (
            r(r"^waiting for quota: (?P<inner>.+)$"),
            lambda m: _("waiting for quota: %(why)s") % {"why": translate(m["inner"])},
        ),
        (
            r(
                r"^(?P<kind>\w+) (?P<tenant>.+): (?P<used>[\d.]+) of (?P<limit>[\d.]+) "
                r"(?P<what>.+) in use \(asked for (?P<asked>[\d.]+)\)$"
            ),
            lambda m: (
                _(
                    "%(kind)s %(tenant)s: %(used)s of %(limit)s %(what)s in use "
                    "(asked for %(asked)s)"
                )
                % _fill(m, what=_word(m["what"]), kind=_kind(m["kind"]))
            ),
        ),
        (
            r(
                r"^(?P<kind>\w+) (?P<tenant>.+): you use (?P<used>[\d.]+) "
                r"of your (?P<limit>[\d.]+) (?P<what>.+) \(asked for (?P<asked>[\d.]+)\)$"
            ),
            lambda m: (
                _(
                    "%(kind)s %(tenant)s: you use %(used)s of your %(limit)s %(what)s "
                    "(asked for %(asked)s)"
                )
                % _fill(m, what=_word(m["what"]), kind=_kind(m["kind"]))
            ),
        ),
        (
            r(
                r"^(?P<kind>\w+) (?P<tenant>.+): (?P<your>your )?GPU-hours for this term are used "
                r"up \((?P<used>[\d.]+) of (?P<limit>[\d.]+)\)$"
            ),
            lambda m: (
                (
                    _(
                        "%(kind)s %(tenant)s: your GPU-hours for this term are used up "
                        "(%(used)s of %(limit)s)"
                    )
                    if m["your"]
                    else _(
                        "%(kind)s %(tenant)s: GPU-hours for this term are used up "
                        "(%(used)s of %(limit)s)"
                    )
                )
                % _fill(m, kind=_kind(m["kind"]))
            ),
        ),
        (
            r(r"^waiting for capacity: this cluster has no (?P<what>.*)GPU right now$"),
            lambda m: (
                _("waiting for capacity: this cluster has no %(what)sGPU right now") % _fill(m)
            ),
        ),
        (
            r(r"^waiting for capacity: no node has (?P<what>.+) now$"),
            lambda m: (
                _("waiting for capacity: no node has %(what)s now")
                % _fill(m, what=_capacity(m["what"]))
            ),
        ),
        (
            r(r"^waiting for all (?P<n>\d+) workers of the gang to fit \((?P<m>\d+) fit now\)$"),
            lambda m: (
                _("waiting for all %(n)s workers of the gang to fit (%(m)s fit now)") % _fill(m)
            ),
        ),
        (
            r(r"^waiting for the grant's time window \((?P<windows>.+)\)$"),
            lambda m: (
                _("waiting for the grant's time window (%(windows)s)")
                % _fill(m, windows=_days(m["windows"]))
            ),
        ),
        (
            r(
                r"^bigger than any node: asks (?P<n>[\d.]+) CPU cores, the largest node has "
                r"(?P<m>[\d.]+)$"
            ),
            lambda m: (
                _("bigger than any node: asks %(n)s CPU cores, the largest node has %(m)s")
                % _fill(m)
            ),
        ),
        (
            r(
                r"^bigger than any node: asks (?P<n>\d+) MiB of memory, the largest node has "
                r"(?P<m>\d+)$"
            ),
            lambda m: (
                _("bigger than any node: asks %(n)s MiB of memory, the largest node has %(m)s")
                % _fill(m)
            ),
        ),
        (
            r(r"^bigger than any node: asks (?P<n>\d+) GPUs on one node, the most is (?P<m>\d+)$"),
            lambda m: (
                _("bigger than any node: asks %(n)s GPUs on one node, the most is %(m)s") % _fill(m)
            ),
        ),
        (
            r(
                r"^(?P<app>.+) needs a Kubernetes cluster; (?P<cluster>.+) runs JupyterLab, "
                r"terminals and TensorBoard$"
            ),
            lambda m: (
                _(
                    "%(app)s needs a Kubernetes cluster; %(cluster)s runs JupyterLab, "
                    "terminals and TensorBoard"
                )
                % _fill(m)
            ),
        ),
        (
            r(r"^the grant for (?P<template>.+) expired on (?P<date>[\d-]+)$"),
            lambda m: _("the grant for %(template)s expired on %(date)s") % _fill(m),
        ),
        (
            r(r"^the grant expired on (?P<date>[\d-]+)$"),
            lambda m: _("the grant expired on %(date)s") % _fill(m),
        ),
        (r(r"^starting on (?P<nodes>.+)$"), lambda m: _("starting on %(nodes)s") % _fill(m)),
        (r(r"^stopped by the portal$"), lambda m: _("stopped by the portal")),
        (r(r"^stopped by (?P<who>.+)$"), lambda m: _("stopped by %(who)s") % _fill(m)),
        (r(r"^idle for (?P<n>\d+) minutes$"), lambda m: _("idle for %(n)s minutes") % _fill(m)),
        (
            r(r"^idle: stops in (?P<n>\d+) minutes unless used$"),
            lambda m: _("idle: stops in %(n)s minutes unless used") % _fill(m),
        ),
        (
            r(r"^reached its maximum duration \((?P<n>\d+) minutes\)$"),
            lambda m: _("reached its maximum duration (%(n)s minutes)") % _fill(m),
        ),
        (
            r(r"^launched (?P<template>.+) with (?P<flavor>.+)$"),
            lambda m: _("launched %(template)s with %(flavor)s") % _fill(m),
        ),
        (r(r"^submitted: (?P<command>.+)$"), lambda m: _("submitted: %(command)s") % _fill(m)),
        (
            r(r"^extended until (?P<time>[\d:]+)$"),
            lambda m: _("extended until %(time)s") % _fill(m),
        ),
        (
            r(r"^restarting after a failure \((?P<why>.+)\): attempt (?P<a>\d+) of (?P<b>\d+)$"),
            lambda m: (
                _("restarting after a failure (%(why)s): attempt %(a)s of %(b)s")
                % _fill(m, why=translate(m["why"]))
            ),
        ),
        (
            r(r"^running on (?P<where>.+) \(simulated\)$"),
            lambda m: _("running on %(where)s (simulated)") % _fill(m),
        ),
        (
            r(r"^finished after (?P<n>[\d.]+) simulated minutes$"),
            lambda m: _("finished after %(n)s simulated minutes") % _fill(m),
        ),
        (
            r(r"^worker (?P<n>\d+) exited with code (?P<code>-?\d+)(?P<rest>.*)$"),
            lambda m: _("worker %(n)s exited with code %(code)s") % m.groupdict() + m["rest"],
        ),
        # The local backend's outcomes (scheduling.backends.local); a program's last log line
        # after ": " stays as it is.
        (
            r(
                r"^worker (?P<n>\d+) was killed by (?P<signal>\w+) \(exit code (?P<code>-?\d+)\)"
                r"(?P<rest>.*)$"
            ),
            lambda m: (
                _("worker %(n)s was killed by %(signal)s (exit code %(code)s)") % _fill(m)
                + m["rest"]
            ),
        ),
        (
            r(r"^worker (?P<n>\d+) disappeared without an exit code(?P<rest>.*)$"),
            lambda m: _("worker %(n)s disappeared without an exit code") % _fill(m) + m["rest"],
        ),
        (
            r(r"^all (?P<n>\d+) workers exited with code 0$"),
            lambda m: _("all %(n)s workers exited with code 0") % _fill(m),
        ),
        (r(r"^exited with code 0$"), lambda m: _("exited with code 0")),
        (
            r(r"^only (?P<n>\d+) of (?P<m>\d+) tasks were started$"),
            lambda m: _("only %(n)s of %(m)s tasks were started") % _fill(m),
        ),
        (
            r(r"^(?P<app>[A-Z][\w-]*) shut itself down \(exit code 0\)$"),
            lambda m: _("%(app)s shut itself down (exit code 0)") % _fill(m),
        ),
        (
            r(r"^(?P<app>[A-Z][\w-]*) exited with code (?P<code>-?\d+)(?P<rest>.*)$"),
            lambda m: _("%(app)s exited with code %(code)s") % _fill(m) + m["rest"],
        ),
        (
            r(
                r"^(?P<app>[A-Z][\w-]*) was killed by (?P<signal>\w+) \(exit code (?P<code>-?\d+)\)"
                r"(?P<rest>.*)$"
            ),
            lambda m: (
                _("%(app)s was killed by %(signal)s (exit code %(code)s)") % _fill(m) + m["rest"]
            ),
        ),
        (
            r(r"^(?P<app>[A-Z][\w-]*) disappeared without an exit code(?P<rest>.*)$"),
            lambda m: _("%(app)s disappeared without an exit code") % _fill(m) + m["rest"],
        ),
        (r(r"^stopped on request$"), lambda m: _("stopped on request")),
        (
            r(r"^stopping: waiting for the processes to exit$"),
            lambda m: _("stopping: waiting for the processes to exit"),
        ),
        (
            r(r"^waiting for the server to answer$"),
            lambda m: _("waiting for the server to answer"),
        ),
        (r(r"^no such workload on this host$"), lambda m: _("no such workload on this host")),
        (
            r(r"^failed after (?P<n>\d+) restarts?: (?P<why>.+)$"),
            lambda m: (
                ngettext(
                    "failed after %(n)s restart: %(why)s",
                    "failed after %(n)s restarts: %(why)s",
                    int(m["n"]),
                )
                % _fill(m, why=translate(m["why"]))
            ),
        ),
        # Placement (scheduling.placement) and the scheduling session (workloads.admission).
        (r(r"^this cluster has no nodes$"), lambda m: _("this cluster has no nodes")),
        (
            r(
                r"^bigger than any GPU: asks (?P<n>\d+) MiB of GPU memory, the largest GPU has "
                r"(?P<m>\d+)$"
            ),
            lambda m: (
                _("bigger than any GPU: asks %(n)s MiB of GPU memory, the largest GPU has %(m)s")
                % _fill(m)
            ),
        ),
        (
            r(r"^waiting for preempted work to stop$"),
            lambda m: _("waiting for preempted work to stop"),
        ),
        (r(r"^waiting for its turn$"), lambda m: _("waiting for its turn")),
        (
            r(r"^queue (?P<queue>.+): capability reached$"),
            lambda m: _("queue %(queue)s: capability reached") % _fill(m),
        ),
        (
            r(r"^queue (?P<queue>.+): at its deserved share$"),
            lambda m: _("queue %(queue)s: at its deserved share") % _fill(m),
        ),
        (
            r(r"^queue (?P<queue>.+) is closed$"),
            lambda m: _("queue %(queue)s is closed") % _fill(m),
        ),
        (
            r(r"^cluster full: not enough idle resources to admit$"),
            lambda m: _("cluster full: not enough idle resources to admit"),
        ),
        (
            r(r"^gang: not all (?P<n>\d+) tasks needed to start fit at once$"),
            lambda m: _("gang: not all %(n)s tasks needed to start fit at once") % _fill(m),
        ),
        (r(r"^not admitted yet$"), lambda m: _("not admitted yet")),
        (
            r(r"^(?P<verb>preempted|reclaimed) for job (?P<job>.+)$"),
            lambda m: (
                (
                    _("preempted for job %(job)s")
                    if m["verb"] == "preempted"
                    else _("reclaimed for job %(job)s")
                )
                % _fill(m)
            ),
        ),
        (
            r(r"^no queue named (?P<queue>.+)$"),
            lambda m: _("no queue named %(queue)s") % _fill(m),
        ),
        (
            r(r"^waiting: (?P<inner>.+)$"),
            lambda m: _("waiting: %(why)s") % {"why": translate(m["inner"])},
        ),
        (
            r(r"^lost: the cluster no longer knows this workload$"),
            lambda m: _("lost: the cluster no longer knows this workload"),
        ),
        (r(r"^stopped outside the portal$"), lambda m: _("stopped outside the portal")),
        (r(r"^stopped \(simulated\)$"), lambda m: _("stopped (simulated)")),
        (r(r"^running$"), lambda m: _("running")),
        (r(r"^finished$"), lambda m: _("finished")),
        (r(r"^failed$"), lambda m: _("failed")),
    ]


def _fill(match: re.Match[str], **override: str) -> dict[str, str]:
    return {**{k: v or "" for k, v in match.groupdict().items()}, **override}


_compiled: list[Rule] | None = None


def translate(reason: str) -> str:
    """``reason`` in the active language (unchanged if no pattern knows it)."""
    global _compiled
    if _compiled is None:
        _compiled = _rules()
    for pattern, render in _compiled:
        match = pattern.match(reason)
        if match:
            return render(match)
    return reason
