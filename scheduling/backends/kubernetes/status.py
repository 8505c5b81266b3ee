"""From what the cluster says to what the portal shows: Phase plus a reason in plain words.

Pure functions over the objects as the API returns them (dicts): a Volcano Job, its PodGroup,
its pods and the events about it; a Deployment and its pods; or a KServe InferenceService and
its pods. The same functions serve the list-based ``observe`` and the watcher, and are tested
phase by phase without a cluster.

Volcano Job phases (``status.state.phase``) and what they become:

==================  ==========  ===========================================================
Volcano             Phase       reason
==================  ==========  ===========================================================
Pending             PENDING     the PodGroup's or the scheduler's message ("waiting for
                                resources: 0/8 nodes are available: 8 Insufficient …"),
                                a namespace quota that refuses the pods, or "waiting in
                                queue Q"
Pending + PodGroup  STARTING    admitted by the queue, pods being placed and started; image
Inqueue                         pull problems say so (and fail past a grace period)
Running             RUNNING     where it runs (notebooks: once the server answers its probe)
Restarting          STARTING    why (eviction or failure) and which restart of how many
Completing          RUNNING     "completing"
Completed           SUCCEEDED   "completed"
Aborting, Aborted   STOPPED     stopped on the cluster
Terminating,        STOPPED     stopped (by the portal or on the cluster); FAILED instead when
Terminated          or FAILED   a pod failed and nobody asked for a stop (PodFailed →
                                TerminateJob): the failed pod's exit code and reason
Failed              FAILED      the failed pod (exit code, OOMKilled, evicted) and restarts
==================  ==========  ===========================================================
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.reasons import Reason, plain
from scheduling import reasons as R
from scheduling.backends.base import Observation, Phase
from scheduling.backends.kubernetes import names

Obj = Mapping[str, Any]

STOP_ANNOTATION = "quanta.io/stop-requested"
REASON_LIMIT = 480
PULL_PROBLEMS = frozenset({"ImagePullBackOff", "ErrImagePull"})
BAD_IMAGE = frozenset({"InvalidImageName", "ErrImageNeverPull"})
START_PROBLEMS = frozenset(
    {"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}
)
FINISHED_JOB_PHASES = frozenset({"Completed", "Failed", "Terminated", "Aborted"})


@dataclass(frozen=True)
class PodProblem:
    """Something wrong with one pod, in words a student understands."""

    reason: Reason
    permanent: bool = False
    exit_code: int | None = None
    quota: bool = False


# --- keys ---------------------------------------------------------------------------------------


def labels_of(obj: Obj) -> Mapping[str, str]:
    labels = obj.get("metadata", {}).get("labels") or {}
    return labels if isinstance(labels, Mapping) else {}


def annotations_of(obj: Obj) -> Mapping[str, str]:
    annotations = obj.get("metadata", {}).get("annotations") or {}
    return annotations if isinstance(annotations, Mapping) else {}


def workload_id_of(obj: Obj) -> str | None:
    return labels_of(obj).get(names.WORKLOAD_ID)


def attempt_of(obj: Obj) -> int:
    try:
        return int(labels_of(obj).get(names.ATTEMPT, "0"))
    except ValueError:
        return 0


def job_phase(job: Obj) -> str:
    return str((job.get("status") or {}).get("state", {}).get("phase") or "Pending")


def is_finished(primary: Obj) -> bool:
    """Nothing of it runs any more (or soon will not): what ``running()`` leaves out."""
    if primary.get("metadata", {}).get("deletionTimestamp"):
        return True
    return primary.get("kind") == "Job" and job_phase(primary) in FINISHED_JOB_PHASES


# --- Volcano Jobs -------------------------------------------------------------------------------


def job_observation(
    job: Obj,
    *,
    podgroup: Obj | None = None,
    pods: Sequence[Obj] = (),
    events: Sequence[Obj] = (),
    now: dt.datetime | None = None,
    pull_grace_seconds: float = 300,
    last_failure: PodProblem | None = None,
) -> Observation:
    """The portal's view of one Volcano Job (training or notebook)."""
    now = now or dt.datetime.now(dt.UTC)
    workload_id = workload_id_of(job) or ""
    attempt = attempt_of(job)
    meta = job.get("metadata", {})
    status = job.get("status") or {}
    phase = job_phase(job)
    component = labels_of(job).get(names.COMPONENT, "job")
    stop_requested = STOP_ANNOTATION in annotations_of(job)
    job_name = str(meta.get("name", ""))

    def observe(p: Phase, reason: Reason, exit_code: int | None = None) -> Observation:
        return Observation(workload_id, p, reason, exit_code=exit_code, attempt=attempt)

    if meta.get("deletionTimestamp"):
        return observe(Phase.STOPPED, R.DELETED_ON_CLUSTER())
    failure = _first(pod_failure(pod, _task(pod, job_name)) for pod in pods) or last_failure
    retries = int(status.get("retryCount") or 0)
    max_retry = int((job.get("spec") or {}).get("maxRetry") or 3)

    if phase == "Completed":
        return observe(Phase.SUCCEEDED, _completed_words(job), exit_code=0)
    if phase == "Failed":
        message = _short(str(status.get("state", {}).get("message") or ""))
        reason = failure.reason if failure else plain(message) if message else R.FAILED()
        if retries:
            reason = R.FAILED_AFTER_RESTARTS(n=retries, why=reason)
        return observe(Phase.FAILED, reason, failure.exit_code if failure else None)
    if phase in ("Terminating", "Terminated"):
        if failure is not None and not stop_requested:
            return observe(Phase.FAILED, failure.reason, failure.exit_code)
        return observe(Phase.STOPPED, R.STOPPED() if stop_requested else R.TERMINATED_ON_CLUSTER())
    if phase in ("Aborting", "Aborted"):
        return observe(Phase.STOPPED, R.ABORTED_ON_CLUSTER())
    if phase == "Restarting":
        return observe(
            Phase.STARTING,
            R.RESTARTING_AFTER(why=failure.reason, n=retries, most=max_retry)
            if failure
            else R.RESTARTING_AFTER_SOMETHING(n=retries, most=max_retry),
        )
    if phase == "Completing":
        return observe(Phase.RUNNING, R.COMPLETING())
    if phase == "Running":
        if component == "notebook" and not any(is_ready(pod) for pod in pods):
            problem = _first(pod_waiting(pod, _task(pod, job_name), now, 1e12) for pod in pods)
            return observe(Phase.STARTING, problem.reason if problem else R.WAITING_FOR_SERVER())
        return observe(Phase.RUNNING, R.RUNNING_ON(where=_where(pods)))
    # Pending: which of the reasons to wait it is.
    queue = str((job.get("spec") or {}).get("queue") or "default")
    quota = _quota_event(events)
    if quota is not None:
        return observe(Phase.PENDING, quota.reason)
    problem = _first(
        pod_waiting(pod, _task(pod, job_name), now, pull_grace_seconds) for pod in pods
    )
    if problem is not None:
        if problem.permanent:
            return observe(Phase.FAILED, problem.reason)
        return observe(Phase.PENDING if problem.quota else Phase.STARTING, problem.reason)
    unschedulable = _unschedulable(podgroup, pods)
    if unschedulable:
        return observe(Phase.PENDING, R.WAITING_FOR_RESOURCES(why=unschedulable))
    group_phase = str((podgroup or {}).get("status", {}).get("phase") or "")
    if group_phase in ("Inqueue", "Running") or pods:
        started = sum(1 for pod in pods if _pod_phase(pod) == "Running")
        wanted = int((job.get("spec") or {}).get("minAvailable") or 1)
        return observe(
            Phase.STARTING, R.ADMITTED_BY_QUEUE(queue=queue, started=started, wanted=wanted)
        )
    failed_create = _failed_create_event(events)
    if failed_create:
        return observe(Phase.PENDING, R.CANNOT_CREATE_PODS(why=_short(failed_create)))
    return observe(Phase.PENDING, R.WAITING_IN_QUEUE(queue=queue))


# --- Deployments (serving) ----------------------------------------------------------------------


def deployment_observation(
    deployment: Obj,
    *,
    pods: Sequence[Obj] = (),
    now: dt.datetime | None = None,
    pull_grace_seconds: float = 300,
) -> Observation:
    now = now or dt.datetime.now(dt.UTC)
    workload_id = workload_id_of(deployment) or ""
    attempt = attempt_of(deployment)
    meta = deployment.get("metadata", {})
    status = deployment.get("status") or {}

    def observe(p: Phase, reason: Reason) -> Observation:
        return Observation(workload_id, p, reason, attempt=attempt)

    if meta.get("deletionTimestamp"):
        return observe(Phase.STOPPED, R.DELETED_ON_CLUSTER())
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    failure = conditions.get("ReplicaFailure")
    if failure and failure.get("status") == "True":
        message = _short(str(failure.get("message") or ""))
        if "exceeded quota" in message:
            return observe(Phase.PENDING, R.NAMESPACE_QUOTA(detail=message))
        return observe(Phase.PENDING, R.CANNOT_CREATE_PODS(why=message))
    replicas = (deployment.get("spec") or {}).get("replicas")
    wanted = 1 if replicas is None else int(replicas)  # the API's default is 1
    available = int(status.get("availableReplicas") or 0)
    if wanted == 0 and not available:  # a schedule's window closed (KubernetesBackend.scale)
        return observe(Phase.RUNNING, R.SCALED_TO_ZERO())
    if available:
        return observe(Phase.RUNNING, R.SERVING_WITH(available=available, wanted=wanted))
    progressing = conditions.get("Progressing")
    problem = _first(pod_waiting(pod, _name(pod), now, pull_grace_seconds) for pod in pods)
    if progressing and progressing.get("reason") == "ProgressDeadlineExceeded":
        words = problem.reason if problem else plain(_short(str(progressing.get("message") or "")))
        return observe(Phase.FAILED, R.NOT_READY_IN_TIME(why=words))
    if problem is not None:
        return observe(Phase.FAILED if problem.permanent else Phase.STARTING, problem.reason)
    unschedulable = _unschedulable(None, pods)
    if unschedulable:
        return observe(Phase.PENDING, R.WAITING_FOR_RESOURCES(why=unschedulable))
    return observe(Phase.STARTING, R.STARTING_REPLICAS(n=wanted))


# KServe says a model cannot be loaded (or its spec is wrong) in modelStatus; a revision that
# cannot start says so in the Ready condition.
MODEL_FAILURES = frozenset({"BlockedByFailedLoad", "InvalidSpec"})
FAILED_READY_REASONS = frozenset({"RevisionFailed", "InvalidSpec"})


def inference_service_observation(
    isvc: Obj,
    *,
    pods: Sequence[Obj] = (),
    now: dt.datetime | None = None,
    pull_grace_seconds: float = 300,
) -> Observation:
    """A KServe InferenceService: Running once its Ready condition is True (with how many of
    its pods are ready: none, scaled to zero, is still serving: the next request starts one);
    Failed when KServe says the model does not load or the revision cannot start (its own
    message as the reason); else Pending while the pods wait for room, Starting meanwhile."""
    now = now or dt.datetime.now(dt.UTC)
    workload_id = workload_id_of(isvc) or ""
    attempt = attempt_of(isvc)
    status = isvc.get("status") or {}

    def observe(p: Phase, reason: Reason) -> Observation:
        return Observation(workload_id, p, reason, attempt=attempt)

    if isvc.get("metadata", {}).get("deletionTimestamp"):
        return observe(Phase.STOPPED, R.DELETED_ON_CLUSTER())
    predictor = (isvc.get("spec") or {}).get("predictor") or {}
    wanted = int(predictor.get("minReplicas") or 0)
    available = sum(1 for pod in pods if is_ready(pod))
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    ready = conditions.get("Ready") or {}
    model = status.get("modelStatus") or {}
    failure = model.get("lastFailureInfo") or {}
    # Ready first: a new revision that fails to load while the previous one serves still
    # serves (KServe keeps the traffic on it).
    if ready.get("status") == "True":
        if not available and not wanted:
            return observe(Phase.RUNNING, R.SCALED_TO_ZERO())
        return observe(
            Phase.RUNNING, R.SERVING_WITH(available=available, wanted=max(wanted, available))
        )
    if model.get("transitionStatus") in MODEL_FAILURES or failure.get("reason"):
        words = failure.get("message") or ready.get("message") or failure.get("reason")
        return observe(
            Phase.FAILED, R.MODEL_FAILED(why=_short(str(words or model["transitionStatus"])))
        )
    problem = _first(pod_waiting(pod, _name(pod), now, pull_grace_seconds) for pod in pods)
    if problem is not None:
        return observe(Phase.FAILED if problem.permanent else Phase.STARTING, problem.reason)
    unschedulable = _unschedulable(None, pods)
    if unschedulable:  # Knative may call that a failed revision too: it is waiting
        return observe(Phase.PENDING, R.WAITING_FOR_RESOURCES(why=unschedulable))
    if ready.get("status") == "False" and ready.get("reason") in FAILED_READY_REASONS:
        words = str(ready.get("message") or ready.get("reason"))
        return observe(Phase.FAILED, R.MODEL_FAILED(why=_short(words)))
    return observe(Phase.STARTING, R.STARTING_REPLICAS(n=max(wanted, 1)))


def endpoint_url(isvc: Obj) -> str:
    """Where an InferenceService answers: ``status.url``, else its cluster-local address."""
    status = isvc.get("status") or {}
    return str(status.get("url") or (status.get("address") or {}).get("url") or "")


# --- pods ---------------------------------------------------------------------------------------


def pod_failure(pod: Obj, task: str) -> PodProblem | None:
    """How a pod failed, if it did: evicted, out of memory, or a non-zero exit."""
    status = pod.get("status") or {}
    if status.get("reason") == "Evicted":
        message = _short(str(status.get("message") or "").strip())
        return PodProblem(_detailed(R.POD_EVICTED(task=task), message))
    for container in status.get("containerStatuses") or []:
        for state_key in ("state", "lastState"):
            ended = (container.get(state_key) or {}).get("terminated")
            if not ended:
                continue
            code = int(ended.get("exitCode") or 0)
            if code == 0 and ended.get("reason") != "OOMKilled":
                continue
            detail = str(ended.get("message") or "").strip()
            if ended.get("reason") == "OOMKilled":
                reason = R.POD_OOM(task=task, code=code)
            elif ended.get("signal"):
                reason = R.POD_KILLED(task=task, signal=str(ended["signal"]), code=code)
            else:
                reason = R.POD_EXITED(task=task, code=code)
            last = " ".join(detail.splitlines()[-1][:200].split()) if detail else ""
            return PodProblem(_detailed(reason, last), exit_code=code)
    if status.get("phase") == "Failed":
        message = _short(str(status.get("message") or status.get("reason") or "").strip())
        return PodProblem(_detailed(R.POD_FAILED(task=task), message))
    return None


def pod_waiting(pod: Obj, task: str, now: dt.datetime, grace: float) -> PodProblem | None:
    """Why a pod's container does not start (image, configuration, crash loop)."""
    status = pod.get("status") or {}
    images = {c.get("name"): c.get("image") for c in (pod.get("spec") or {}).get("containers", [])}
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        message = _short(str(waiting.get("message") or "").strip())
        image = str(images.get(container.get("name")) or container.get("image") or "?")
        if reason in BAD_IMAGE:
            return PodProblem(R.BAD_IMAGE(image=image, why=reason, message=message), True)
        if reason in PULL_PROBLEMS:
            age = _age(pod, now)
            pull = _detailed(R.CANNOT_PULL(image=image, why=reason), message)
            if age is not None and age > grace:
                return PodProblem(R.GAVE_UP_AFTER(reason=pull, n=int(age)), permanent=True)
            return PodProblem(pull)
        if reason in START_PROBLEMS:
            return PodProblem(
                R.CANNOT_START(task=task, why=reason, message=message), permanent=False
            )
        if reason == "CrashLoopBackOff":
            failure = pod_failure(pod, task)
            crashing = R.KEEPS_CRASHING(task=task)
            return PodProblem(
                R.WITH_DETAIL(reason=crashing, detail=failure.reason) if failure else crashing,
                exit_code=failure.exit_code if failure else None,
            )
    return None


def _unschedulable(podgroup: Obj | None, pods: Sequence[Obj]) -> Reason | None:
    """The scheduler's own words on why the gang (or a pod) does not fit."""
    for condition in (podgroup or {}).get("status", {}).get("conditions") or []:
        if condition.get("type") == "Unschedulable" and condition.get("status") == "True":
            words = str(condition.get("message") or condition.get("reason") or "")
            return plain(_short(words)) if words else R.UNSCHEDULABLE()
    for pod in pods:
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if (
                condition.get("type") == "PodScheduled"
                and condition.get("status") == "False"
                and condition.get("reason") == "Unschedulable"
            ):
                words = str(condition.get("message") or "")
                return plain(_short(words)) if words else R.NO_NODE_FITS()
    return None


def _quota_event(events: Sequence[Obj]) -> PodProblem | None:
    for event in _newest_first(events):
        message = str(event.get("message") or "")
        if "exceeded quota" in message:
            detail = message.split("exceeded quota:")[-1].strip()
            return PodProblem(R.NAMESPACE_QUOTA(detail=_short(detail)), quota=True)
    return None


def _failed_create_event(events: Sequence[Obj]) -> str:
    for event in _newest_first(events):
        reason = str(event.get("reason", ""))
        if event.get("type") == "Warning" and reason.startswith("FailedCreate"):
            return str(event.get("message") or event.get("reason"))
    return ""


def _newest_first(events: Sequence[Obj]) -> list[Obj]:
    def when(event: Obj) -> str:
        return str(event.get("lastTimestamp") or event.get("eventTime") or "")

    return sorted(events, key=when, reverse=True)


def _completed_words(job: Obj) -> Reason:
    succeeded = int((job.get("status") or {}).get("succeeded") or 0)
    return R.COMPLETED_TASKS(n=succeeded) if succeeded else R.COMPLETED()


def _where(pods: Sequence[Obj]) -> str | Reason:
    nodes = sorted({str(n) for p in pods if (n := (p.get("spec") or {}).get("nodeName"))})
    if not nodes:
        return R.THE_CLUSTER()
    if len(nodes) <= 3:
        return ", ".join(nodes)
    return R.SOME_NODES(n=len(nodes), first=", ".join(nodes[:3]))


def _detailed(reason: Reason, detail: str) -> Reason:
    """``reason: detail`` when there are words from outside to add."""
    return R.WITH_DETAIL(reason=reason, detail=detail) if detail else reason


def is_ready(pod: Obj) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def _pod_phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def _task(pod: Obj, job_name: str) -> str:
    """Volcano names pods ``<job>-<task>-<index>``: "worker-2" is what a person knows."""
    name = _name(pod)
    prefix = job_name + "-"
    return name[len(prefix) :] if job_name and name.startswith(prefix) else name


def _name(pod: Obj) -> str:
    return str(pod.get("metadata", {}).get("name", "pod"))


def _age(obj: Obj, now: dt.datetime) -> float | None:
    created = obj.get("metadata", {}).get("creationTimestamp")
    if not isinstance(created, str):
        return None
    try:
        when = dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (now - when).total_seconds()


def _first(problems: Iterable[PodProblem | None]) -> PodProblem | None:
    for problem in problems:
        if problem is not None:
            return problem
    return None


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= REASON_LIMIT else text[: REASON_LIMIT - 1] + "…"
