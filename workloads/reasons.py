"""Reasons in the reader's language.

Workloads keep their reason in English (the API, logs and audit trail stay one language);
pages and live updates show it translated. Every reason the portal writes has a pattern here;
parts that come from outside (a program's last log line, an API server's message) stay as
they are. Nested reasons (a quota refusal inside "waiting for quota: …") are translated too.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

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
            lambda m: _("waiting for capacity: no node has %(what)s now") % _fill(m),
        ),
        (
            r(r"^waiting for all (?P<n>\d+) workers of the gang to fit \((?P<m>\d+) fit now\)$"),
            lambda m: (
                _("waiting for all %(n)s workers of the gang to fit (%(m)s fit now)") % _fill(m)
            ),
        ),
        (
            r(r"^waiting for the grant's time window \((?P<windows>.+)\)$"),
            lambda m: _("waiting for the grant's time window (%(windows)s)") % _fill(m),
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
            lambda m: _("restarting after a failure (%(why)s): attempt %(a)s of %(b)s") % _fill(m),
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
