"""Names and labels of the objects Quanta makes on a cluster.

Every name derives from the workload id (and attempt), so a second create of the same
workload hits 409 on the same name and adopts what is there: submit is idempotent without
any bookkeeping of our own. Every object carries ``app.kubernetes.io/managed-by=quanta`` and,
for workloads, ``quanta.io/workload-id``: that is how the backend finds, verifies and watches
its objects, and how the inventory tells Quanta's pods from everyone else's.
"""

from __future__ import annotations

import hashlib
import re
import uuid

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "quanta"
COMPONENT = "app.kubernetes.io/component"  # "job", "notebook" or "serving"
APP_NAME = "app.kubernetes.io/name"  # the template kind: "jupyter", "vscode", "command", …
WORKLOAD_ID = "quanta.io/workload-id"
ATTEMPT = "quanta.io/attempt"
TENANT = "quanta.io/tenant"
QUEUE = "quanta.io/queue"
OWNER = "quanta.io/owner"  # an annotation: usernames need not be valid label values

MANAGED_SELECTOR = f"{MANAGED_BY}={MANAGER}"

# The portal's spec labels ("quanta.workload-id", "quanta.tenant") become quanta.io/ keys.
SPEC_LABEL_PREFIX = "quanta."

_NOT_DNS = re.compile(r"[^a-z0-9-]+")
_NOT_LABEL = re.compile(r"[^A-Za-z0-9_.-]+")
_EDGES = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")


def workload_name(workload_id: str, attempt: int = 0) -> str:
    """``q-`` + the first 12 hex digits of the UUID (``-<attempt>`` after the first attempt):
    short enough for pod and service names built on it, DNS-1123 safe."""
    try:
        digits = uuid.UUID(workload_id).hex[:12]
    except ValueError:
        digits = hashlib.sha256(workload_id.encode()).hexdigest()[:12]
    return f"q-{digits}" if attempt <= 0 else f"q-{digits}-{attempt}"


def dns_label(text: str, max_length: int = 63) -> str:
    """``text`` as a DNS-1123 label (lowercase alphanumerics and '-'); a name cut to fit keeps
    a hash of the whole so that two long names stay apart."""
    label = _NOT_DNS.sub("-", text.lower()).strip("-") or "x"
    if len(label) <= max_length:
        return label
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{label[: max_length - 9].rstrip('-')}-{digest}"


def label_value(text: str) -> str:
    """``text`` as a label value: at most 63 of [A-Za-z0-9_.-], alphanumeric at both ends."""
    value = _EDGES.sub("", _NOT_LABEL.sub("-", text))
    if len(value) <= 63:
        return value
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return _EDGES.sub("", value[:54]) + "-" + digest


def tenant_namespace(prefix: str, tenant_slug: str) -> str:
    return dns_label(prefix + tenant_slug)


def queue_name(name: str) -> str:
    return dns_label(name, 253)


def priority_class_name(name: str) -> str:
    return dns_label(f"quanta-{name}", 253)
