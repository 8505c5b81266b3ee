"""Who may ssh into which workload, and the audit rows of the SSH gateway. Sync (database):
the gateway calls these from its worker threads.

The user name of an SSH login names the workload: its name, its id, or the first 8 hex
characters of its id (as the pages show it). It is looked up among the RUNNING workloads the
key's owner may control (the notebook proxy's rule: the owner, and the staff of its class
where ``SSH_STAFF_ACCESS`` allows). Whatever fails (no such key, no such workload, someone
else's, a stopped one), the client learns only that it was refused.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from core.audit import record
from tenants.models import SshKey
from tenants.services import touch_ssh_key
from workloads.activity import record_activity
from workloads.choices import State
from workloads.models import Workload
from workloads.permissions import can_control, visible_workloads

logger = logging.getLogger(__name__)

SHORT_ID = re.compile(r"^[0-9a-f]{8,32}$")


@dataclass(frozen=True)
class Resolved:
    """The outcome of a login attempt: ``workload`` when it may go in; else ``choices``
    (several of the owner's workloads share the name) or nothing."""

    key: SshKey | None
    workload: Workload | None = None
    choices: tuple[Workload, ...] = ()


def key_for(fingerprint: str) -> SshKey | None:
    return (
        SshKey.objects.select_related("user")
        .filter(fingerprint=fingerprint, user__is_active=True)
        .first()
    )


def may_ssh(user: Any, workload: Workload) -> bool:
    """The proxy's rule (``can_control``); the staff of the class only where
    ``SSH_STAFF_ACCESS`` is on."""
    if workload.owner_id == user.pk:
        return True
    return bool(settings.SSH_STAFF_ACCESS) and can_control(user, workload)


def matches(workload: Workload, username: str) -> bool:
    wid = str(workload.pk)
    if username in (workload.name, wid, wid.replace("-", "")):
        return True
    short = username.lower()
    return bool(SHORT_ID.match(short)) and wid.replace("-", "").startswith(short)


def resolve(fingerprint: str, username: str) -> Resolved:
    """The key with ``fingerprint`` and the workload ``username`` names, if it may go in."""
    key = key_for(fingerprint)
    if key is None:
        return Resolved(None)
    user = key.user
    running = (
        Workload.objects.select_related("tenant", "cluster", "owner")
        .filter(visible_workloads(user), state=State.RUNNING)
        .order_by("created_at")
    )
    exact = [w for w in running if str(w.pk) == username and may_ssh(user, w)]
    found = exact or [w for w in running if matches(w, username) and may_ssh(user, w)]
    if len(found) > 1:  # staff: their own workload before their students' of the same name
        found = [w for w in found if w.owner_id == user.pk] or found
    if len(found) == 1:
        return Resolved(key, found[0])
    return Resolved(key, None, tuple(found))


def ambiguous_message(choices: tuple[Workload, ...], username: str) -> str:
    lines = [
        f"More than one of your running workloads matches {username!r}; "
        "use its id as the user name instead:"
    ]
    for workload in choices[:20]:
        lines.append(f"  ssh {str(workload.pk)[:8]}@…   ({workload.name}, {workload.owner})")
    return "\r\n".join(lines) + "\r\n"


def still_running(workload_id: Any) -> bool:
    return Workload.objects.filter(pk=workload_id, state=State.RUNNING).exists()


def signed_in(key: SshKey, workload: Workload, client: str) -> None:
    touch_ssh_key(key)
    record_activity(workload.pk)
    record(
        "ssh.login",
        actor=key.user,
        target=workload,
        tenant=workload.tenant,
        client=client,
        fingerprint=key.fingerprint,
        key=key.name,
    )


def refused(key: SshKey, username: str, client: str, why: str) -> None:
    """A known key that may not go where it asked: an audit row (the client is told nothing)."""
    record(
        "ssh.refused",
        actor=key.user,
        target=key,
        client=client,
        fingerprint=key.fingerprint,
        username=username[:100],
        why=why,
    )


def _session_row(
    action: str, key: SshKey, workload: Workload, client: str, what: str, **details: Any
) -> None:
    record(
        action,
        actor=key.user,
        target=workload,
        tenant=workload.tenant,
        client=client,
        fingerprint=key.fingerprint,
        what=what,
        **details,
    )


def session_started(
    key: SshKey, workload: Workload, client: str, what: str, **details: Any
) -> None:
    _session_row("ssh.session", key, workload, client, what, **details)


def session_ended(key: SshKey, workload: Workload, client: str, what: str, **details: Any) -> None:
    _session_row("ssh.session_end", key, workload, client, what, **details)


def used(workload_id: Any) -> None:
    record_activity(workload_id)
