"""An emulated Kubernetes API server for the tests: enough REST for the official client.

A ThreadingHTTPServer on 127.0.0.1 that keeps objects in memory and speaks the API's URL
layout (``/api/v1/...``, ``/apis/<group>/<version>/...``), for the kinds the backend uses:

- create (POST), get, list (label and field selectors, ``limit`` / ``continue`` pages served
  from one snapshot), merge patch, replace, delete (with owner-reference garbage collection),
  watch (chunked, newline-delimited events, from a ``resourceVersion``), and pod logs;
- ``resourceVersion`` on every write, 404 / 409 / 410 as the real server answers them, a
  namespace that must exist before objects go in it;
- injectable faults (:class:`Fault`): an error status (with Retry-After), a reset connection,
  a request carried out whose answer is lost, a watch dropped after some events; and
  admission hooks that refuse objects the way webhooks and quotas do;
- ``compact()`` forgets history, so a watch from an older version gets 410 Gone.

Tests (and the fake Volcano controller) change the world directly with ``put`` / ``update`` /
``remove``, which also produce watch events.
"""

from __future__ import annotations

import base64
import copy
import itertools
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

Obj = dict[str, Any]
Admission = Callable[[str, str, Obj], "tuple[int, str, str] | None"]

# plural -> (kind, namespaced)
RESOURCES: dict[str, tuple[str, bool]] = {
    "pods": ("Pod", True),
    "services": ("Service", True),
    "secrets": ("Secret", True),
    "events": ("Event", True),
    "resourcequotas": ("ResourceQuota", True),
    "persistentvolumeclaims": ("PersistentVolumeClaim", True),
    "deployments": ("Deployment", True),
    "horizontalpodautoscalers": ("HorizontalPodAutoscaler", True),
    "networkpolicies": ("NetworkPolicy", True),
    "jobs": ("Job", True),
    "podgroups": ("PodGroup", True),
    "commands": ("Command", True),
    "nodes": ("Node", False),
    "namespaces": ("Namespace", False),
    "queues": ("Queue", False),
    "priorityclasses": ("PriorityClass", False),
    "inferenceservices": ("InferenceService", True),
}
GROUPS = {
    "pods": "", "services": "", "secrets": "", "events": "", "resourcequotas": "",
    "persistentvolumeclaims": "", "nodes": "", "namespaces": "",
    "deployments": "apps/v1", "horizontalpodautoscalers": "autoscaling/v2",
    "networkpolicies": "networking.k8s.io/v1", "priorityclasses": "scheduling.k8s.io/v1",
    "jobs": "batch.volcano.sh/v1alpha1", "podgroups": "scheduling.volcano.sh/v1beta1",
    "queues": "scheduling.volcano.sh/v1beta1", "commands": "bus.volcano.sh/v1alpha1",
    "inferenceservices": "serving.kserve.io/v1beta1",
}  # fmt: skip


@dataclass
class Fault:
    """What goes wrong with the next ``times`` matching requests.

    ``status``: answer with this HTTP status (0: reset the connection, no answer at all).
    ``after``: carry the request out first, then fail (the client never learns it worked).
    ``drop_after``: for watches, stream this many events, then cut the connection.
    """

    method: str = ""  # "" matches any
    path: str = ""  # a regex searched in the path
    status: int = 500
    times: int = 1
    after: bool = False
    retry_after: float | None = None
    message: str = "injected fault"
    watch: bool | None = None  # True: only watches; False: only plain requests
    drop_after: int | None = None
    hits: int = field(default=0, init=False)

    def matches(self, method: str, path: str, watching: bool) -> bool:
        if self.hits >= self.times:
            return False
        if self.method and self.method != method:
            return False
        if self.watch is not None and self.watch != watching:
            return False
        return re.search(self.path, path) is not None


class Gone(Exception):
    pass


class ApiServer:
    """The store and its HTTP face. Use as a context manager (or ``start`` / ``close``)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.objects: dict[tuple[str, str, str], Obj] = {}  # (plural, namespace, name)
        self.version = itertools.count(1000)
        self.rv = 999
        self.history: list[tuple[int, str, str, Obj]] = []  # (rv, plural, type, object)
        self.compacted = 0  # watching from a version below this answers 410 Gone
        self.faults: list[Fault] = []
        self.admission: list[Admission] = []
        self.requests: list[tuple[str, str]] = []  # (method, path?query)
        self.logs: dict[tuple[str, str], bytes] = {}
        self.listeners: list[Callable[[str, str, Obj], None]] = []
        self.deletes: list[tuple[str, str, str, str]] = []  # (plural, ns, name, propagation)
        self.snapshots: dict[str, tuple[int, list[Obj]]] = {}
        self.check_namespaces = True
        self.closed = False
        self.generation = 0  # drop_watches() bumps it: open watches are cut
        self.open_watches = 0
        self.httpd: ThreadingHTTPServer | None = None
        for name in ("default", "kube-system"):
            self.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    # -- running ---------------------------------------------------------------------------------

    def start(self) -> ApiServer:
        server = self

        class Handler(_Handler):
            api = server

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    @property
    def url(self) -> str:
        assert self.httpd is not None
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- direct access (tests and controllers) ---------------------------------------------------

    def put(self, obj: Mapping[str, Any]) -> Obj:
        """Create or replace without HTTP (and without admission or faults)."""
        obj = copy.deepcopy(dict(obj))
        plural = _plural_of(obj)
        with self.cond:
            meta = obj.setdefault("metadata", {})
            key = (plural, meta.get("namespace", ""), meta["name"])
            existing = self.objects.get(key)
            _stamp(meta, existing)
            meta["resourceVersion"] = self._next()
            self.objects[key] = obj
            self._record(plural, "MODIFIED" if existing else "ADDED", obj)
        return copy.deepcopy(obj)

    def update(self, plural: str, namespace: str, name: str, change: Callable[[Obj], None]) -> Obj:
        """Change an object in place (``change`` mutates it), as a controller would."""
        with self.cond:
            obj = self.objects[(plural, namespace, name)]
            change(obj)
            obj["metadata"]["resourceVersion"] = self._next()
            self._record(plural, "MODIFIED", obj)
            return copy.deepcopy(obj)

    def remove(self, plural: str, namespace: str, name: str, *, cascade: bool = True) -> bool:
        with self.cond:
            return self._delete(plural, namespace, name, cascade=cascade)

    def get(self, plural: str, namespace: str, name: str) -> Obj | None:
        with self.cond:
            obj = self.objects.get((plural, namespace, name))
            return copy.deepcopy(obj) if obj else None

    def all(self, plural: str, namespace: str | None = None) -> list[Obj]:
        with self.cond:
            return [
                copy.deepcopy(o)
                for (p, ns, _), o in sorted(self.objects.items())
                if p == plural and (namespace is None or ns == namespace)
            ]

    def drop_watches(self) -> None:
        """Cut every open watch connection (as a load balancer or an API server restart
        would); call with ``cond`` held to change the world before anyone reconnects."""
        with self.cond:
            self.generation += 1
            self.cond.notify_all()

    def compact(self) -> None:
        """Forget every event so far: watches from any version seen until now get 410."""
        with self.cond:
            self.compacted = self.rv + 1

    def fail(self, **fault: Any) -> Fault:
        made = Fault(**fault)
        with self.cond:
            self.faults.append(made)
        return made

    def wait_for_watches(self, count: int, timeout: float = 10.0) -> None:
        """Until ``count`` watches are open (a watcher has listed and is following)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.open_watches < count:
                if not self.cond.wait(max(deadline - time.monotonic(), 0)):
                    raise TimeoutError(f"{self.open_watches} of {count} watches open")

    def posts(self, plural: str) -> int:
        return sum(1 for m, p in self.requests if m == "POST" and urlsplit(p).path.endswith(plural))

    # -- the store -------------------------------------------------------------------------------

    def _next(self) -> str:
        self.rv = next(self.version)
        return str(self.rv)

    def _record(self, plural: str, kind: str, obj: Obj) -> None:
        self.history.append((self.rv, plural, kind, copy.deepcopy(obj)))
        self.cond.notify_all()
        for listener in self.listeners:
            listener(kind, plural, copy.deepcopy(obj))

    def _delete(self, plural: str, namespace: str, name: str, *, cascade: bool) -> bool:
        obj = self.objects.pop((plural, namespace, name), None)
        if obj is None:
            return False
        obj["metadata"]["resourceVersion"] = self._next()
        self._record(plural, "DELETED", obj)
        if cascade:
            uid = obj["metadata"].get("uid")
            owned = [
                key
                for key, other in self.objects.items()
                if any(
                    ref.get("uid") == uid for ref in other["metadata"].get("ownerReferences", [])
                )
            ]
            for key in owned:
                self._delete(*key, cascade=True)
        return True

    # -- REST ------------------------------------------------------------------------------------

    def fault_for(self, method: str, path: str, watching: bool) -> Fault | None:
        with self.cond:
            for fault in self.faults:
                if fault.matches(method, path, watching):
                    fault.hits += 1
                    return fault
        return None

    def create(self, plural: str, namespace: str, body: Obj) -> tuple[int, Obj]:
        kind, namespaced = RESOURCES[plural]
        meta = body.setdefault("metadata", {})
        name = meta.get("name")
        if not name:
            return 422, _status(422, "Invalid", f"{kind}: metadata.name: Required value")
        if namespaced:
            meta["namespace"] = namespace
        for admit in self.admission:
            refusal = admit("CREATE", plural, body)
            if refusal:
                code, reason, message = refusal
                return code, _status(code, reason, message, name=name, kind=plural)
        with self.cond:
            if (
                namespaced
                and self.check_namespaces
                and ("namespaces", "", namespace) not in self.objects
            ):
                return 404, _status(
                    404, "NotFound", f'namespaces "{namespace}" not found',
                    name=namespace, kind="namespaces",
                )  # fmt: skip
            key = (plural, namespace if namespaced else "", name)
            if key in self.objects:
                return 409, _status(
                    409, "AlreadyExists", f'{plural} "{name}" already exists',
                    name=name, kind=plural,
                )  # fmt: skip
            _stamp(meta, None)
            meta["resourceVersion"] = self._next()
            self.objects[key] = body
            self._record(plural, "ADDED", body)
            return 201, copy.deepcopy(body)

    def read(self, plural: str, namespace: str, name: str) -> tuple[int, Obj]:
        with self.cond:
            obj = self.objects.get((plural, namespace, name))
            if obj is None:
                return 404, _not_found(plural, name)
            return 200, copy.deepcopy(obj)

    def patch(self, plural: str, namespace: str, name: str, body: Obj) -> tuple[int, Obj]:
        with self.cond:
            obj = self.objects.get((plural, namespace, name))
            if obj is None:
                return 404, _not_found(plural, name)
            merged = _merge(copy.deepcopy(obj), body)
            for admit in self.admission:
                refusal = admit("UPDATE", plural, merged)
                if refusal:
                    code, reason, message = refusal
                    return code, _status(code, reason, message, name=name, kind=plural)
            merged["metadata"]["resourceVersion"] = self._next()
            self.objects[(plural, namespace, name)] = merged
            self._record(plural, "MODIFIED", merged)
            return 200, copy.deepcopy(merged)

    def delete(self, plural: str, namespace: str, name: str, propagation: str) -> tuple[int, Obj]:
        with self.cond:
            self.deletes.append((plural, namespace, name, propagation))
            if not self._delete(plural, namespace, name, cascade=propagation != "Orphan"):
                return 404, _not_found(plural, name)
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}

    def list(self, plural: str, namespace: str, query: Mapping[str, str]) -> tuple[int, Obj]:
        kind, _ = RESOURCES[plural]
        token = query.get("continue", "")
        limit = int(query.get("limit") or 0)
        with self.cond:
            if token:
                if token not in self.snapshots:
                    return 410, _status(410, "Expired", "the continue token has expired")
                version, items = self.snapshots.pop(token)
            else:
                version = self.rv
                selector = _selector(query.get("labelSelector", ""))
                fields = _field_selector(query.get("fieldSelector", ""))
                items = [
                    copy.deepcopy(obj)
                    for (p, ns, _), obj in sorted(self.objects.items())
                    if p == plural
                    and (not namespace or ns == namespace)
                    and selector(obj)
                    and fields(obj)
                ]
            metadata: Obj = {"resourceVersion": str(version)}
            if limit and len(items) > limit:
                following = uuid.uuid4().hex
                self.snapshots[following] = (version, items[limit:])
                items = items[:limit]
                metadata["continue"] = following
        api_version = GROUPS[plural] or "v1"
        return 200, {
            "kind": f"{kind}List",
            "apiVersion": api_version,
            "metadata": metadata,
            "items": items,
        }

    def watch(
        self, plural: str, namespace: str, query: Mapping[str, str], fault: Fault | None
    ) -> Iterator[Obj | None]:
        """Events as dicts; ``None`` means "cut the connection here"."""
        since = query.get("resourceVersion", "")
        timeout = float(query.get("timeoutSeconds") or 30)
        selector = _selector(query.get("labelSelector", ""))
        deadline = time.monotonic() + timeout
        sent = 0
        with self.cond:
            generation = self.generation
            if since and since != "0" and int(since) < self.compacted:
                yield {
                    "type": "ERROR",
                    "object": _status(410, "Expired", f"too old resource version: {since}"),
                }
                return
            if since and since != "0":
                position = next(
                    (i for i, entry in enumerate(self.history) if entry[0] > int(since)),
                    len(self.history),
                )
                backlog: list[Obj] = []
            else:
                position = len(self.history)
                backlog = [
                    {"type": "ADDED", "object": copy.deepcopy(obj)}
                    for (p, ns, _), obj in sorted(self.objects.items())
                    if p == plural and (not namespace or ns == namespace) and selector(obj)
                ]
        yield from backlog
        while True:
            with self.cond:
                while (
                    position >= len(self.history)
                    and not self.closed
                    and generation == self.generation
                ):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return
                    self.cond.wait(min(remaining, 0.5))
                if generation != self.generation:
                    yield None
                    return
                if self.closed:
                    return
                entry = self.history[position]
                position += 1
            _, entry_plural, kind, obj = entry
            if entry_plural != plural:
                continue
            meta = obj.get("metadata", {})
            if namespace and meta.get("namespace") != namespace:
                continue
            if not selector(obj):
                continue
            if fault is not None and fault.drop_after is not None and sent >= fault.drop_after:
                yield None
                return
            sent += 1
            yield {"type": kind, "object": obj}


class _Handler(BaseHTTPRequestHandler):
    api: ApiServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body leave at once: no 40 ms delayed ACKs

    def log_message(self, format: str, *args: Any) -> None:  # quiet tests
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        self.api.requests.append((method, self.path))
        watching = method == "GET" and query.get("watch") in ("true", "1", "True")
        fault = self.api.fault_for(method, url.path, watching)
        if fault is not None and fault.drop_after is None and not fault.after:
            self._fail(fault)
            return
        try:
            route = _route(url.path)
        except KeyError:
            self._json(404, _status(404, "NotFound", f"the server could not find {url.path}"))
            return
        plural, namespace, name, sub = route
        body = json.loads(raw) if raw else {}
        if watching:
            self._watch(plural, namespace, query, fault)
            return
        code, payload = self._dispatch(method, plural, namespace, name, sub, body, query)
        if fault is not None and fault.after:
            self._fail(fault)
            return
        if isinstance(payload, bytes):
            self._send(code, payload, "text/plain")
        else:
            self._json(code, payload)

    def _dispatch(
        self,
        method: str,
        plural: str,
        namespace: str,
        name: str,
        sub: str,
        body: Obj,
        query: Mapping[str, str],
    ) -> tuple[int, Obj | bytes]:
        if sub == "log" and method == "GET":
            pod = self.api.get("pods", namespace, name)
            if pod is None:
                return 404, _not_found("pods", name)
            data = self.api.logs.get((namespace, name), b"")
            limit = int(query.get("limitBytes") or 0)
            return 200, data[:limit] if limit else data
        if method == "GET":
            if name:
                return self.api.read(plural, namespace, name)
            return self.api.list(plural, namespace, query)
        if method == "POST":
            return self.api.create(plural, namespace, body)
        if method in ("PATCH", "PUT"):
            if method == "PATCH" and "json-patch" in (self.headers.get("Content-Type") or ""):
                return 415, _status(415, "UnsupportedMediaType", "json-patch is not emulated")
            if method == "PUT":
                code, current = self.api.read(plural, namespace, name)
                if code != 200:
                    return code, current
                body = {**{k: None for k in current if k not in body}, **body}
            return self.api.patch(plural, namespace, name, body)
        if method == "DELETE":
            propagation = query.get("propagationPolicy") or body.get("propagationPolicy") or ""
            return self.api.delete(plural, namespace, name, propagation)
        return 405, _status(405, "MethodNotAllowed", method)

    def _watch(
        self, plural: str, namespace: str, query: Mapping[str, str], fault: Fault | None
    ) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with self.api.cond:
            self.api.open_watches += 1
            self.api.cond.notify_all()
        try:
            for event in self.api.watch(plural, namespace, query, fault):
                if event is None:
                    self._reset()
                    return
                data = json.dumps(event).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            return
        finally:
            with self.api.cond:
                self.api.open_watches -= 1
        self.close_connection = True

    def _fail(self, fault: Fault) -> None:
        if fault.status == 0:
            self._reset()
            return
        payload = json.dumps(_status(fault.status, "InjectedFault", fault.message)).encode()
        self.send_response(fault.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        if fault.retry_after is not None:
            self.send_header("Retry-After", str(fault.retry_after))
        self.end_headers()
        self.wfile.write(payload)

    def _reset(self) -> None:
        """Cut the connection with a TCP reset: the client sees a broken connection."""
        self.close_connection = True
        try:
            self.connection.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
            self.connection.close()
        except OSError:
            pass

    def _json(self, code: int, payload: Obj) -> None:
        self._send(code, json.dumps(payload).encode(), "application/json")

    def _send(self, code: int, data: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


# --- helpers ------------------------------------------------------------------------------------


def _route(path: str) -> tuple[str, str, str, str]:
    """(plural, namespace, name, subresource) of an API path."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        rest = parts[2:]
    elif parts and parts[0] == "apis" and len(parts) >= 3:
        rest = parts[3:]
    else:
        raise KeyError(path)
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, plural = rest[1], rest[2]
        name = rest[3] if len(rest) > 3 else ""
        sub = rest[4] if len(rest) > 4 else ""
    else:
        namespace, plural = "", rest[0]
        name = rest[1] if len(rest) > 1 else ""
        sub = ""
    if plural not in RESOURCES:
        raise KeyError(path)
    return plural, namespace, name, sub


def _plural_of(obj: Mapping[str, Any]) -> str:
    for plural, (kind, _) in RESOURCES.items():
        if kind == obj["kind"] and (GROUPS[plural] or "v1") == obj["apiVersion"]:
            return plural
    raise KeyError(f"{obj['apiVersion']} {obj['kind']}")


def _stamp(meta: Obj, existing: Obj | None) -> None:
    if existing is not None:
        meta.setdefault("uid", existing["metadata"]["uid"])
        meta.setdefault("creationTimestamp", existing["metadata"]["creationTimestamp"])
        return
    meta.setdefault("uid", str(uuid.uuid4()))
    meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    meta.setdefault("generation", 1)


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = _merge(target.get(key), value)
    return target


def _status(code: int, reason: str, message: str, *, name: str = "", kind: str = "") -> Obj:
    status: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if name or kind:
        status["details"] = {"name": name, "kind": kind}
    return status


def _not_found(plural: str, name: str) -> Obj:
    return _status(404, "NotFound", f'{plural} "{name}" not found', name=name, kind=plural)


_REQUIREMENT = re.compile(
    r"^\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9_./-]+)\s*"
    r"(?:(?P<op>==|!=|=|\s+in\s+|\s+notin\s+)\s*(?P<value>\(.*\)|[A-Za-z0-9_.-]*))?\s*$"
)


def _selector(text: str) -> Callable[[Obj], bool]:
    """A label selector: ``k=v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``, ``!k``."""
    requirements: list[Callable[[Mapping[str, str]], bool]] = []
    for part in _split(text):
        match = _REQUIREMENT.match(part)
        if not match:
            raise ValueError(f"bad selector {part!r}")
        key, op, value, negate = (
            match["key"],
            (match["op"] or "").strip(),
            match["value"],
            match["neg"],
        )
        if not op:
            requirements.append(
                (lambda k: lambda labels: k not in labels)(key)
                if negate
                else (lambda k: lambda labels: k in labels)(key)
            )
            continue
        values = {v.strip() for v in value.strip("()").split(",")} if value else {""}
        if op in ("=", "=="):
            requirements.append((lambda k, vs: lambda labels: labels.get(k) in vs)(key, values))
        elif op == "!=":
            requirements.append((lambda k, vs: lambda labels: labels.get(k) not in vs)(key, values))
        elif op == "in":
            requirements.append((lambda k, vs: lambda labels: labels.get(k) in vs)(key, values))
        else:
            requirements.append(
                (lambda k, vs: lambda labels: k not in labels or labels[k] not in vs)(key, values)
            )

    def matches(obj: Obj) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(requirement(labels) for requirement in requirements)

    return matches


def _field_selector(text: str) -> Callable[[Obj], bool]:
    checks: list[tuple[list[str], str, bool]] = []
    for part in _split(text):
        if "!=" in part:
            path, value = part.split("!=", 1)
            checks.append((path.strip().split("."), value.strip(), False))
        else:
            path, value = part.replace("==", "=").split("=", 1)
            checks.append((path.strip().split("."), value.strip(), True))

    def matches(obj: Obj) -> bool:
        for path, value, equal in checks:
            current: Any = obj
            for step in path:
                current = current.get(step) if isinstance(current, dict) else None
            if (str(current if current is not None else "") == value) != equal:
                return False
        return True

    return matches


def _split(text: str) -> Iterable[str]:
    """Split on commas outside parentheses."""
    depth, start = 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            if text[start:i].strip():
                yield text[start:i]
            start = i + 1
    if text[start:].strip():
        yield text[start:]


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()
