"""The teachers' and TAs' pages, by topic: ``views`` (thin), ``forms``, ``queries`` (reads).

Changes go through ``workloads.grants``, ``workloads.services`` and ``tenants.services``.
``workloads.teaching_urls`` mounts the views re-exported here.
"""

from workloads.teaching.forms import (
    GrantForm,
    MemberForm,
    WindowForm,
    WindowFormSet,
    describe_flavor,
)
from workloads.teaching.queries import TEACHING_KINDS, held_gpu_hours
from workloads.teaching.views import (
    add_member,
    classes,
    dashboard,
    grant_delete,
    grant_edit,
    grant_new,
    remove_member,
    stop_session,
)

__all__ = [
    "TEACHING_KINDS",
    "GrantForm",
    "MemberForm",
    "WindowForm",
    "WindowFormSet",
    "add_member",
    "classes",
    "dashboard",
    "describe_flavor",
    "grant_delete",
    "grant_edit",
    "grant_new",
    "held_gpu_hours",
    "remove_member",
    "stop_session",
]
