"""The ``kubernetes`` backend: workloads as Volcano Jobs (and model servers: Deployments or
KServe InferenceServices) on a cluster.

What it keeps in ``Handle.state`` is just enough to find the objects again (namespace, names,
attempt) plus a notebook's token; every name derives from the workload id, so even an empty
handle finds its workload (by label). No Django here: the portal passes in everything.

Idempotence: ``submit`` creates the primary object (Job or Deployment) under its derived name;
a 409 means a previous try got there first, and the existing object is adopted once its
``quanta.io/workload-id`` label proves it is ours. Retries of transient errors therefore never
make a second copy. ``stop`` asks Volcano to terminate a Job (a bus Command; the Job stays, as
the record of how it ended, until its TTL) and deletes a Deployment with foreground
propagation; both do nothing to what is already finished or gone.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as dt
import json
import logging
import secrets
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from core.reasons import Reason
from scheduling import reasons as R
from scheduling.backends.base import (
    BackendError,
    Endpoint,
    GpuReading,
    Handle,
    LogChunk,
    NodeInfo,
    Observation,
    Phase,
    WorkloadSpec,
)
from scheduling.backends.kubernetes import client as k
from scheduling.backends.kubernetes import dcgm, manifests, names, status
from scheduling.backends.kubernetes.config import KubernetesConfig
from scheduling.backends.kubernetes.nodes import NodeInventory, inventory
from scheduling.backends.kubernetes.watcher import Watcher, WatchStats

log = logging.getLogger(__name__)

STATE_VERSION = 1
SELECTOR_CHUNK = 50  # workload ids per "in (...)" label selector: keeps URLs short
PRIORITY_CACHE_SECONDS = 60.0
READY_CACHE_SECONDS = 15.0
ACTIVITY_TIMEOUT = 3.0  # seconds a notebook's /api/status may take
ACTIVITY_THREADS = 8
OWNED_MAPS = frozenset({"hard", "capability"})  # ResourceQuota and Queue limits: ours alone


class KubernetesBackend:
    """Runs notebooks, training jobs and model servers on Kubernetes with Volcano."""

    kind = "kubernetes"
    apps: frozenset[str] | None = None  # whatever the template's image runs
    # With ``retries_by: volcano`` Volcano restarts failed jobs itself (up to max_retries): the
    # portal should then not start new attempts of its own.
    restarts_failed_jobs = False

    def __init__(
        self,
        config: KubernetesConfig,
        *,
        kube: k.Kube | None = None,
        now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.config = config
        self._kube = kube
        self.now = now
        self.restarts_failed_jobs = config.retries_by == "volcano"
        # Templates of apps the cluster's images lack are not offered, with the reason.
        self.unavailable: dict[str, Reason] = {}
        if not config.pycharm_in_image:
            self.unavailable["pycharm-desktop"] = R.PYCHARM_NOT_IN_IMAGE()
            self.apps = manifests.NOTEBOOK_APPS - self.unavailable.keys()
        self._priorities: tuple[float, dict[int, str]] = (0.0, {})
        self._ready: dict[str, float] = {}  # workload id -> when its server was last seen ready
        self._urls: dict[str, str] = {}  # model servers: workload id -> the address last seen
        # Notebooks: workload id -> (when /api/status was last read, its last_activity).
        self._activity: dict[str, tuple[float, dt.datetime | None]] = {}
        self._lock = threading.Lock()

    @property
    def kube(self) -> k.Kube:
        """The API client, made at first use: a missing kubeconfig then fails a call (and is
        retried), not the portal's start."""
        with self._lock:
            if self._kube is None:
                try:
                    self._kube = k.Kube(k.api_client(self.config), self.config)
                except Exception as exc:  # the loaders raise many kinds: all mean "no access"
                    raise BackendError(
                        f"cannot load the cluster's credentials: {exc}", transient=True
                    ) from exc
            return self._kube

    # -- the contract ----------------------------------------------------------------------------

    def submit(self, spec: WorkloadSpec) -> Handle:
        """Create the workload's objects (the Job or Deployment first); adopt what a previous
        try created. A later attempt replaces the objects of earlier ones."""
        try:
            objects = manifests.workload_objects(
                spec,
                self.config,
                priority_class=self._priority_class(spec.priority),
                token=secrets.token_urlsafe(32) if spec.kind == "notebook" else "",
            )
        except manifests.ManifestError as exc:
            raise BackendError(str(exc)) from exc
        primary, *rest = objects
        namespace = primary["metadata"]["namespace"]
        if spec.attempt > 0:
            self._retire_earlier_attempts(spec, namespace)
        created = self._create_or_adopt(primary, spec)
        token = ""
        for obj in rest:  # owned by the primary: they go when it goes
            obj["metadata"]["ownerReferences"] = [manifests.owner_reference(created)]
            adopted = self._create_or_adopt(obj, spec)
            if obj["kind"] == "Secret":
                token = _secret_token(adopted) or _secret_token(obj)
        state: dict[str, Any] = {
            "version": STATE_VERSION,
            "kind": spec.kind,
            "namespace": namespace,
            "name": primary["metadata"]["name"],
            "object": primary["kind"],
            "attempt": spec.attempt,
            "uid": created.get("metadata", {}).get("uid", ""),
        }
        if spec.kind == "notebook":
            base = "/" + spec.base_url.strip("/") + "/" if spec.base_url.strip("/") else "/"
            if spec.app in manifests.ROOT_SERVED_APPS:
                base = "/"  # served at the Service's root: the proxy drops /nb/<id>
            state.update(token=token, service=state["name"], base_url=base, app=spec.app)
        if spec.kind == "serving":
            state.update(service=state["name"])
        return Handle(spec.workload_id, state)

    def scale(self, handle: Handle, min_replicas: int, max_replicas: int) -> bool:
        """Set a model server's replica range (a schedule's window opening or closing):
        the InferenceService's ``minReplicas`` / ``maxReplicas``, or the autoscaler's range
        (Deployments: a minimum of 0 scales the Deployment to 0, which also idles its HPA, as
        an HPA cannot go below 1). Writes only what differs; returns whether it wrote. A
        workload that is gone has nothing to scale (False)."""
        state = handle.state
        namespace, name = state.get("namespace"), state.get("name")
        if state.get("kind") != "serving" or not namespace or not name:
            raise BackendError("not a model server on this cluster: nothing to scale")
        low = max(min_replicas, 0)
        high = max(max_replicas, low, 1)
        try:
            if state.get("object") == "InferenceService":
                isvc = self.kube.get(k.INFERENCE_SERVICE, name, namespace)
                predictor = (isvc.get("spec") or {}).get("predictor") or {}
                wanted = {"minReplicas": low, "maxReplicas": high}
                change = {key: v for key, v in wanted.items() if predictor.get(key) != v}
                if change:
                    self.kube.patch(
                        k.INFERENCE_SERVICE, name, {"spec": {"predictor": change}}, namespace
                    )
                return bool(change)
            deployment = self.kube.get(k.DEPLOYMENT, name, namespace)
            replicas = (deployment.get("spec") or {}).get("replicas")
            replicas = 1 if replicas is None else int(replicas)
            written = False
            if low == 0:
                if replicas != 0:
                    self.kube.patch(k.DEPLOYMENT, name, {"spec": {"replicas": 0}}, namespace)
                    written = True
                return written
            hpa = self.kube.get(k.HPA, name, namespace)
            wanted = {"minReplicas": low, "maxReplicas": high}
            have = hpa.get("spec") or {}
            change = {key: v for key, v in wanted.items() if have.get(key) != v}
            if change:
                self.kube.patch(k.HPA, name, {"spec": change}, namespace)
                written = True
            if replicas < low:  # from 0 (the HPA idles there) or below the new minimum
                self.kube.patch(k.DEPLOYMENT, name, {"spec": {"replicas": low}}, namespace)
                written = True
            return written
        except k.NotFound:
            log.info("nothing to scale: %s/%s is not on the cluster", namespace, name)
            return False

    def stop(self, handle: Handle) -> None:
        """Terminate every attempt's Job (or delete the Deployment); idempotent."""
        selector = f"{names.WORKLOAD_ID}={names.label_value(handle.workload_id)}"
        jobs, _ = self.kube.list(k.VOLCANO_JOB, label_selector=selector)
        for job in jobs:
            if status.is_finished(job):
                continue
            self._stop_job(job)
        for kind in self._server_kinds():
            servers, _ = self.kube.list(kind, label_selector=selector)
            for server in servers:
                meta = server["metadata"]
                if not meta.get("deletionTimestamp"):
                    self.kube.delete(kind, meta["name"], meta["namespace"])

    def observe(self, handles: Sequence[Handle]) -> dict[str, Observation]:
        """Each workload's phase, from a few list calls per 50 workloads (not per workload)."""
        observations: dict[str, Observation] = {}
        ids = [handle.workload_id for handle in handles]
        for chunk in _chunks(ids, SELECTOR_CHUNK):
            observations.update(self._observe_chunk(chunk))
        return self._with_activity(handles, observations)

    def _with_activity(
        self, handles: Sequence[Handle], observations: dict[str, Observation]
    ) -> dict[str, Observation]:
        """Running JupyterLab notebooks with the last activity their server reports
        (``/api/status``: kernels, terminals, requests), read at most every
        ``activity_poll_seconds`` per notebook, so idle culling counts from real use
        rather than from the start. A server that does not answer adds nothing."""
        if self.config.activity_poll_seconds <= 0:
            return observations
        now = time.monotonic()
        due = []
        for handle in handles:
            obs = observations.get(handle.workload_id)
            state = handle.state
            if obs is None or obs.phase != Phase.RUNNING or state.get("kind") != "notebook":
                continue
            if state.get("app", "jupyter") != "jupyter" or not state.get("namespace"):
                continue
            read_at, _last = self._activity.get(handle.workload_id, (None, None))
            if read_at is None or now - read_at >= self.config.activity_poll_seconds:
                due.append(handle)
        if due:
            with ThreadPoolExecutor(min(ACTIVITY_THREADS, len(due))) as pool:
                for handle, last in zip(due, pool.map(self._api_status, due), strict=True):
                    _read_at, before = self._activity.get(handle.workload_id, (None, None))
                    self._activity[handle.workload_id] = (now, last or before)
        live = {h.workload_id for h in handles}
        for workload_id in list(self._activity):
            if workload_id not in live:
                del self._activity[workload_id]
        for workload_id, (_read_at, last) in self._activity.items():
            obs = observations.get(workload_id)
            if obs is None or last is None or obs.phase != Phase.RUNNING:
                continue
            if obs.last_activity is None or last > obs.last_activity:
                observations[workload_id] = dataclasses.replace(obs, last_activity=last)
        return observations

    def _api_status(self, handle: Handle) -> dt.datetime | None:
        """JupyterLab's ``last_activity`` from ``/api/status`` on its Service; None when it
        does not answer."""
        state = handle.state
        url = self.config.service_url.format(
            service=state.get("service", state.get("name", "")),
            namespace=state["namespace"],
            port=80,
        )
        url = url.rstrip("/") + state.get("base_url", "/") + "api/status"
        headers = {"Authorization": f"token {state['token']}"} if state.get("token") else {}
        request = urllib.request.Request(url, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=ACTIVITY_TIMEOUT) as response:
                body = json.loads(response.read())
            return _aware(dt.datetime.fromisoformat(str(body["last_activity"])))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def gpu_readings(self) -> tuple[GpuReading, ...]:
        """The DCGM exporter's series (``dcgm``) from the cluster's Prometheus; each device
        held by one of the portal's pods names its workload (the pod's workload-id label).
        ``()`` without a Prometheus, or when it does not answer."""
        series = dcgm.read(
            self.config.prometheus_url,
            node_labels=self.config.prometheus_node_labels,
            timeout=self.config.prometheus_timeout,
        )
        if not series:
            return ()
        owners: dict[tuple[str, str], str] = {}
        if any(s.pod for s in series):
            try:
                pods, _ = self.kube.list(k.POD, label_selector=names.WORKLOAD_ID)
            except BackendError as error:
                log.info("could not list pods to map GPU series to workloads (%s)", error)
                pods = []
            for pod in pods:
                meta = pod.get("metadata", {})
                workload_id = status.workload_id_of(pod)
                if workload_id:
                    owners[(meta.get("namespace", ""), meta.get("name", ""))] = workload_id
        readings = []
        for s in series:
            owner = owners.get((s.namespace, s.pod))
            readings.append(
                GpuReading(
                    node=s.node,
                    index=s.index,
                    utilisation=s.utilisation,
                    memory_used_mib=s.memory_used_mib,
                    workload_ids=(owner,) if owner else (),
                )
            )
        return tuple(readings)

    def endpoint(self, handle: Handle) -> Endpoint | None:
        """The notebook's Service once its server passes its readiness probe; a model
        server's address (the InferenceService's ``status.url`` once Ready, or the Service's
        cluster DNS once a replica is ready), where the portal's gateway forwards
        ``/v2/...``."""
        state = handle.state
        if state.get("kind") == "serving" and state.get("namespace"):
            return self._serving_endpoint(handle)
        if state.get("kind") != "notebook" or not state.get("namespace"):
            return None
        # The proxy asks on every request: a readiness seen in the last seconds is enough.
        seen = self._ready.get(handle.workload_id)
        if seen is None or time.monotonic() - seen > READY_CACHE_SECONDS:
            selector = (
                f"{names.WORKLOAD_ID}={names.label_value(handle.workload_id)},"
                f"{names.ATTEMPT}={state.get('attempt', 0)}"
            )
            pods, _ = self.kube.list(k.POD, namespace=state["namespace"], label_selector=selector)
            if not any(status.is_ready(pod) for pod in pods):
                self._ready.pop(handle.workload_id, None)
                return None
            self._ready[handle.workload_id] = time.monotonic()
        url = self.config.service_url.format(
            service=state["service"], namespace=state["namespace"], port=80
        )
        token = state.get("token")
        headers = {"Authorization": f"token {token}"} if token else {}
        return Endpoint(url=url.rstrip("/") + state.get("base_url", "/"), headers=headers)

    def logs(self, handle: Handle, task: int = 0, offset: int = 0, limit: int = 65536) -> LogChunk:
        """Bytes ``offset`` … ``offset + limit`` of the task's current container log. The API
        has no offsets: the first ``offset + limit`` bytes are read and the head dropped."""
        pods = self._task_pods(handle)
        if not 0 <= task < len(pods):
            return LogChunk(text="", next_offset=offset, tasks=len(pods))
        meta = pods[task]["metadata"]
        offset = max(offset, 0)
        try:
            data = self.kube.pod_log(meta["name"], meta["namespace"], limit_bytes=offset + limit)
        except k.NotFound:
            data = b""
        except k.ApiError as exc:
            if exc.status != 400:  # 400: the container has not started yet
                raise
            data = b""
        chunk = data[offset : offset + limit]
        if len(chunk) == limit:
            chunk = _whole_utf8(chunk) or chunk
        return LogChunk(
            text=chunk.decode("utf-8", errors="replace"),
            next_offset=offset + len(chunk),
            tasks=len(pods),
        )

    def nodes(self) -> tuple[NodeInfo, ...]:
        return tuple(node.node_info() for node in self.inventory())

    def running(self) -> set[str]:
        """Ids of workloads with a Job or model server that still runs (or waits to)."""
        alive: set[str] = set()
        for kind in (k.VOLCANO_JOB, *self._server_kinds()):
            objects, _ = self.kube.list(kind, label_selector=names.MANAGED_SELECTOR)
            for obj in objects:
                workload_id = status.workload_id_of(obj)
                if workload_id and not status.is_finished(obj):
                    alive.add(workload_id)
        return alive

    # -- beyond the contract ---------------------------------------------------------------------

    def inventory(self) -> list[NodeInventory]:
        """Nodes, their GPUs and what the live pods on them request (two paged lists)."""
        node_objects, _ = self.kube.list(k.NODE)
        pods, _ = self.kube.list(
            k.POD, field_selector="status.phase!=Succeeded,status.phase!=Failed"
        )
        return inventory(node_objects, pods, self.config)

    def watch(
        self,
        on_change: Callable[[Observation], None],
        *,
        seconds: float,
        stop: threading.Event | None = None,
    ) -> WatchStats:
        """Call ``on_change`` as workloads change, for ``seconds`` (see watcher.py)."""
        return Watcher(self.kube, self.config, on_change, now=self.now).run(seconds, stop)

    def apply(self, objects: Iterable[Mapping[str, Any]]) -> int:
        """Create each object or merge its desired fields into the existing one, only where
        they differ; returns how many objects were written."""
        written = 0
        for obj in objects:
            kind = k.kind_of(obj)
            meta = obj["metadata"]
            try:
                current = self.kube.get(kind, meta["name"], meta.get("namespace", ""))
            except k.NotFound:
                with contextlib.suppress(k.Conflict):  # someone else just made it
                    self.kube.create(obj)
                    written += 1
                continue
            patch = _difference(obj, current)
            if patch:
                self.kube.patch(kind, meta["name"], patch, meta.get("namespace", ""))
                written += 1
        return written

    def managed(self, kind: k.Kind) -> list[dict[str, Any]]:
        objects, _ = self.kube.list(kind, label_selector=names.MANAGED_SELECTOR)
        return objects

    # -- model servers ---------------------------------------------------------------------------

    def _server_kinds(self) -> tuple[k.Kind, ...]:
        """The primary objects of model servers here (no InferenceServices to list where the
        cluster has no KServe: the API would answer 404)."""
        if self.config.serving == "kserve":
            return (k.DEPLOYMENT, k.INFERENCE_SERVICE)
        return (k.DEPLOYMENT,)

    def _serving_endpoint(self, handle: Handle) -> Endpoint | None:
        state = handle.state
        namespace, name = state["namespace"], state.get("name", "")
        # The gateway asks on every request: an address seen in the last seconds is enough.
        seen = self._ready.get(handle.workload_id)
        url = self._urls.get(handle.workload_id, "")
        if seen is not None and url and time.monotonic() - seen <= READY_CACHE_SECONDS:
            return Endpoint(url=url)
        if state.get("object") == "InferenceService":
            try:
                isvc = self.kube.get(k.INFERENCE_SERVICE, name, namespace)
            except k.NotFound:
                isvc = {}
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (isvc.get("status") or {}).get("conditions") or []
            )
            url = status.endpoint_url(isvc) if ready else ""
        else:
            selector = (
                f"{names.WORKLOAD_ID}={names.label_value(handle.workload_id)},"
                f"{names.ATTEMPT}={state.get('attempt', 0)}"
            )
            pods, _ = self.kube.list(k.POD, namespace=namespace, label_selector=selector)
            url = ""
            if any(status.is_ready(pod) for pod in pods):
                url = self.config.service_url.format(
                    service=state.get("service", name), namespace=namespace, port=80
                )
        if not url:
            self._ready.pop(handle.workload_id, None)
            self._urls.pop(handle.workload_id, None)
            return None
        url = url.rstrip("/")
        self._ready[handle.workload_id] = time.monotonic()
        self._urls[handle.workload_id] = url
        return Endpoint(url=url)

    # -- submitting ------------------------------------------------------------------------------

    def _create_or_adopt(self, obj: dict[str, Any], spec: WorkloadSpec) -> dict[str, Any]:
        kind = k.kind_of(obj)
        meta = obj["metadata"]
        try:
            return self.kube.create(obj)
        except k.Conflict:
            pass
        except k.NotFound as exc:
            if meta.get("namespace") and "namespaces" in str(exc):
                self._create_namespace(spec, meta["namespace"])
                try:
                    return self.kube.create(obj)
                except k.Conflict:
                    pass
            elif kind is k.INFERENCE_SERVICE:
                raise BackendError(
                    "this cluster has no KServe (no InferenceService API): install KServe, or "
                    'set "serving": "deployment" in the cluster\'s settings'
                ) from exc
            else:
                raise
        existing = self.kube.get(kind, meta["name"], meta.get("namespace", ""))
        owner = status.workload_id_of(existing)
        if owner != names.label_value(spec.workload_id):
            raise BackendError(
                f"{kind.kind} {meta['namespace']}/{meta['name']} exists and belongs to "
                f"{'workload ' + owner if owner else 'someone else'}: not adopting it"
            )
        if existing.get("metadata", {}).get("deletionTimestamp"):
            raise BackendError(
                f"{kind.kind} {meta['name']} is still being deleted; trying again shortly",
                transient=True,
            )
        return existing

    def _create_namespace(self, spec: WorkloadSpec, namespace: str) -> None:
        """A tenant's first workload may come before the periodic sync made its namespace."""
        tenant = manifests.TenantSpec(slug=spec.labels.get("quanta.tenant", namespace))
        with contextlib.suppress(k.Conflict):
            self.kube.create(manifests.tenant_namespace(tenant, self.config))

    def _retire_earlier_attempts(self, spec: WorkloadSpec, namespace: str) -> None:
        selector = f"{names.WORKLOAD_ID}={names.label_value(spec.workload_id)}"
        for kind in (k.VOLCANO_JOB, *self._server_kinds()):
            objects, _ = self.kube.list(kind, namespace=namespace, label_selector=selector)
            for obj in objects:
                if status.attempt_of(obj) >= spec.attempt:
                    continue
                if (
                    self.restarts_failed_jobs
                    and kind is k.VOLCANO_JOB
                    and status.job_phase(obj) == "Failed"
                ):
                    # Volcano already spent the retries: another attempt would multiply them.
                    observed = status.job_observation(obj, now=self.now())
                    raise BackendError(
                        observed.reason.text() if observed.reason else "failed after its retries"
                    )
                self.kube.delete(kind, obj["metadata"]["name"], namespace)

    def _priority_class(self, priority: int) -> str:
        """The cluster's Quanta PriorityClass with this value ("" for 0: the default)."""
        if not priority:
            return ""
        fetched, by_value = self._priorities
        if time.monotonic() - fetched > PRIORITY_CACHE_SECONDS:
            classes, _ = self.kube.list(k.PRIORITY_CLASS, label_selector=names.MANAGED_SELECTOR)
            by_value = {int(c.get("value", 0)): c["metadata"]["name"] for c in classes}
            self._priorities = (time.monotonic(), by_value)
        name = by_value.get(priority)
        if name is None:
            raise BackendError(
                f"no Quanta PriorityClass with value {priority} on the cluster; "
                "the cluster sync creates one per portal priority class"
            )
        return name

    # -- stopping --------------------------------------------------------------------------------

    def _stop_job(self, job: dict[str, Any]) -> None:
        meta = job["metadata"]
        stamp = self.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            job = (
                self.kube.patch(
                    k.VOLCANO_JOB,
                    meta["name"],
                    {"metadata": {"annotations": {status.STOP_ANNOTATION: stamp}}},
                    meta["namespace"],
                )
                or job
            )
        except k.NotFound:
            return
        if self.config.stop_with == "delete":
            self.kube.delete(k.VOLCANO_JOB, meta["name"], meta["namespace"])
            return
        try:
            self.kube.create(manifests.stop_command(job))
        except k.Conflict:
            pass  # already asked
        except k.NotFound as exc:
            if "namespaces" in str(exc):
                return
            # No bus Commands on this cluster (or the Job just went): delete instead.
            log.info("no Volcano Command for %s (%s); deleting it", meta["name"], exc)
            self.kube.delete(k.VOLCANO_JOB, meta["name"], meta["namespace"])

    # -- observing -------------------------------------------------------------------------------

    def _observe_chunk(self, ids: list[str]) -> dict[str, Observation]:
        values = ",".join(names.label_value(i) for i in ids)
        selector = f"{names.WORKLOAD_ID} in ({values})"
        jobs, _ = self.kube.list(k.VOLCANO_JOB, label_selector=selector)
        deployments, _ = self.kube.list(k.DEPLOYMENT, label_selector=selector)
        isvcs: list[dict[str, Any]] = []
        if self.config.serving == "kserve":
            isvcs, _ = self.kube.list(k.INFERENCE_SERVICE, label_selector=selector)
        pods, _ = self.kube.list(k.POD, label_selector=selector)
        groups: list[dict[str, Any]] = []
        if jobs:
            groups, _ = self.kube.list(k.PODGROUP, label_selector=selector)
        by_id: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
        for kind, objects in (
            ("job", jobs),
            ("deployment", deployments),
            ("isvc", isvcs),
            ("pod", pods),
        ):
            for obj in objects:
                by_id[status.workload_id_of(obj) or ""][kind].append(obj)
        for group in groups:
            by_id[status.workload_id_of(group) or ""]["podgroup"].append(group)
        now = self.now()
        grace = self.config.image_pull_grace_seconds
        observations: dict[str, Observation] = {}
        for workload_id in ids:
            found = by_id.get(names.label_value(workload_id), {})
            if found.get("job"):
                job = max(found["job"], key=status.attempt_of)
                attempt = status.attempt_of(job)
                mine = [p for p in found.get("pod", []) if status.attempt_of(p) == attempt]
                own = [g for g in found.get("podgroup", []) if status.attempt_of(g) == attempt]
                events = self._events_if_stuck(job, mine)
                observation = status.job_observation(
                    job, podgroup=own[0] if own else None, pods=mine, events=events, now=now,
                    pull_grace_seconds=grace,
                )  # fmt: skip
            elif found.get("isvc"):
                isvc = max(found["isvc"], key=status.attempt_of)
                attempt = status.attempt_of(isvc)
                mine = [p for p in found.get("pod", []) if status.attempt_of(p) == attempt]
                observation = status.inference_service_observation(
                    isvc, pods=mine, now=now, pull_grace_seconds=grace
                )
            elif found.get("deployment"):
                deployment = max(found["deployment"], key=status.attempt_of)
                observation = status.deployment_observation(
                    deployment, pods=found.get("pod", []), now=now, pull_grace_seconds=grace
                )
            else:
                observation = Observation(workload_id, Phase.UNKNOWN, R.NOT_ON_CLUSTER())
            observations[workload_id] = observation
        return observations

    def _events_if_stuck(
        self, job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        """A pending Job without pods may be refused them (a namespace quota): only the Job's
        events say so, and only then are they worth a call."""
        if pods or status.job_phase(job) != "Pending":
            return []
        meta = job["metadata"]
        events, _ = self.kube.list(
            k.EVENT,
            namespace=meta["namespace"],
            field_selector=f"involvedObject.name={meta['name']}",
        )
        return events

    def _task_pods(self, handle: Handle) -> list[dict[str, Any]]:
        """The current attempt's pods in task order: master (or ps), then workers by index."""
        selector = f"{names.WORKLOAD_ID}={names.label_value(handle.workload_id)}"
        pods, _ = self.kube.list(k.POD, label_selector=selector)
        if not pods:
            return []
        attempt = max(status.attempt_of(p) for p in pods)
        current = [p for p in pods if status.attempt_of(p) == attempt]
        return sorted(current, key=_task_order)


def _task_order(pod: Mapping[str, Any]) -> tuple[int, int, str]:
    name = str(pod["metadata"]["name"])
    stem, _, index = name.rpartition("-")
    role = stem.rpartition("-")[2]
    rank = {"master": 0, "ps": 0, "notebook": 0, "worker": 1}.get(role, 2)
    return (rank, int(index) if index.isdigit() else 0, name)


def _secret_token(secret: Mapping[str, Any]) -> str:
    value = (secret.get("data") or {}).get(manifests.TOKEN_KEY)
    if not value:
        return ""
    try:
        return base64.b64decode(value).decode()
    except ValueError:
        return ""


def _difference(desired: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that makes ``current`` carry what ``desired`` says (and nothing for
    fields the desired object does not mention: the API server's defaults stay)."""
    patch: dict[str, Any] = {}
    for key, value in desired.items():
        if key in ("apiVersion", "kind", "status"):
            continue
        if key == "metadata":
            meta = {
                part: value[part]
                for part in ("labels", "annotations")
                if part in value
                and any((current.get("metadata", {}).get(part) or {}).get(k) != v
                        for k, v in value[part].items())
            }  # fmt: skip
            if meta:
                patch["metadata"] = meta
            continue
        have = current.get(key)
        if isinstance(value, Mapping) and isinstance(have, Mapping):
            inner = _difference(value, have)
            if key in OWNED_MAPS:  # limits the portal removed must go on the cluster too
                inner.update({gone: None for gone in have if gone not in value})
            if inner:
                patch[key] = inner
        elif have != value:
            patch[key] = value
    return patch


def _aware(at: dt.datetime) -> dt.datetime:
    return at if at.tzinfo else at.replace(tzinfo=dt.UTC)


def _chunks(items: list[str], size: int) -> Iterable[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _whole_utf8(data: bytes) -> bytes:
    """Drop a UTF-8 sequence cut off at the end of a chunk; the next read starts with it."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:
            continue
        needed = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
        return data if back >= needed else data[:-back]
    return data
