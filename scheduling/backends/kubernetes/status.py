"""From what the cluster says to what the portal shows: Phase plus a reason in plain words.

Pure functions over the objects as the API returns them (dicts): a Volcano Job, its PodGroup,
its pods and the events about it; or a Deployment and its pods. The same functions serve the
list-based ``observe`` and the watcher, and are tested phase by phase without a cluster.

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

    text: str
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

    def observe(p: Phase, reason: str, exit_code: int | None = None) -> Observation:
        return Observation(workload_id, p, _short(reason), exit_code=exit_code, attempt=attempt)

    if meta.get("deletionTimestamp"):
        return observe(Phase.STOPPED, "deleted on the cluster")
    failure = _first(pod_failure(pod, _task(pod, job_name)) for pod in pods) or last_failure
    retries = int(status.get("retryCount") or 0)
    max_retry = int((job.get("spec") or {}).get("maxRetry") or 3)

    if phase == "Completed":
        return observe(Phase.SUCCEEDED, _completed_words(job), exit_code=0)
    if phase == "Failed":
        reason = failure.text if failure else str(status.get("state", {}).get("message") or "")
        reason = reason or "failed"
        if retries:
            reason = f"failed after {retries} restart{'s' if retries != 1 else ''}: {reason}"
        return observe(Phase.FAILED, reason, failure.exit_code if failure else None)
    if phase in ("Terminating", "Terminated"):
        if failure is not None and not stop_requested:
            return observe(Phase.FAILED, failure.text, failure.exit_code)
        return observe(Phase.STOPPED, "stopped" if stop_requested else "terminated on the cluster")
    if phase in ("Aborting", "Aborted"):
        return observe(Phase.STOPPED, "aborted on the cluster")
    if phase == "Restarting":
        why = f"after {failure.text}" if failure else "after an eviction or a failure"
        return observe(Phase.STARTING, f"restarting {why} (restart {retries} of {max_retry})")
    if phase == "Completing":
        return observe(Phase.RUNNING, "completing")
    if phase == "Running":
        if component == "notebook" and not any(is_ready(pod) for pod in pods):
            problem = _first(pod_waiting(pod, _task(pod, job_name), now, 1e12) for pod in pods)
            return observe(Phase.STARTING, problem.text if problem else "waiting for the server")
        return observe(Phase.RUNNING, "running on " + _where(pods))
    # Pending: which of the reasons to wait it is.
    queue = str((job.get("spec") or {}).get("queue") or "default")
    quota = _quota_event(events)
    if quota is not None:
        return observe(Phase.PENDING, quota.text)
    problem = _first(
        pod_waiting(pod, _task(pod, job_name), now, pull_grace_seconds) for pod in pods
    )
    if problem is not None:
        if problem.permanent:
            return observe(Phase.FAILED, problem.text)
        return observe(Phase.PENDING if problem.quota else Phase.STARTING, problem.text)
    unschedulable = _unschedulable(podgroup, pods)
    if unschedulable:
        return observe(Phase.PENDING, f"waiting for resources: {unschedulable}")
    group_phase = str((podgroup or {}).get("status", {}).get("phase") or "")
    if group_phase in ("Inqueue", "Running") or pods:
        started = sum(1 for pod in pods if _pod_phase(pod) == "Running")
        wanted = int((job.get("spec") or {}).get("minAvailable") or 1)
        return observe(
            Phase.STARTING, f"admitted by queue {queue}: {started} of {wanted} pods started"
        )
    failed_create = _failed_create_event(events)
    if failed_create:
        return observe(Phase.PENDING, f"the cluster cannot create its pods: {failed_create}")
    return observe(Phase.PENDING, f"waiting in queue {queue}")


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

    def observe(p: Phase, reason: str) -> Observation:
        return Observation(workload_id, p, _short(reason), attempt=attempt)

    if meta.get("deletionTimestamp"):
        return observe(Phase.STOPPED, "deleted on the cluster")
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    failure = conditions.get("ReplicaFailure")
    if failure and failure.get("status") == "True":
        message = str(failure.get("message") or "")
        if "exceeded quota" in message:
            return observe(Phase.PENDING, "waiting: the namespace quota is exceeded: " + message)
        return observe(Phase.PENDING, "the cluster cannot create its pods: " + message)
    wanted = int((deployment.get("spec") or {}).get("replicas") or 1)
    available = int(status.get("availableReplicas") or 0)
    if available:
        return observe(Phase.RUNNING, f"serving with {available} of {wanted} replicas ready")
    progressing = conditions.get("Progressing")
    problem = _first(pod_waiting(pod, _name(pod), now, pull_grace_seconds) for pod in pods)
    if progressing and progressing.get("reason") == "ProgressDeadlineExceeded":
        words = problem.text if problem else str(progressing.get("message") or "")
        return observe(Phase.FAILED, "did not become ready in time: " + words)
    if problem is not None:
        return observe(Phase.FAILED if problem.permanent else Phase.STARTING, problem.text)
    unschedulable = _unschedulable(None, pods)
    if unschedulable:
        return observe(Phase.PENDING, f"waiting for resources: {unschedulable}")
    return observe(Phase.STARTING, f"starting {wanted} replica{'s' if wanted != 1 else ''}")


# --- pods ---------------------------------------------------------------------------------------


def pod_failure(pod: Obj, task: str) -> PodProblem | None:
    """How a pod failed, if it did: evicted, out of memory, or a non-zero exit."""
    status = pod.get("status") or {}
    if status.get("reason") == "Evicted":
        message = str(status.get("message") or "").strip()
        return PodProblem(f"{task} was evicted" + (f": {message}" if message else ""))
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
                text = f"{task} ran out of memory (OOMKilled, exit code {code})"
            elif ended.get("signal"):
                text = f"{task} was killed by signal {ended['signal']} (exit code {code})"
            else:
                text = f"{task} exited with code {code}"
            if detail:
                text += f": {detail.splitlines()[-1][:200]}"
            return PodProblem(text, exit_code=code)
    if status.get("phase") == "Failed":
        message = str(status.get("message") or status.get("reason") or "").strip()
        return PodProblem(f"{task} failed" + (f": {message}" if message else ""))
    return None


def pod_waiting(pod: Obj, task: str, now: dt.datetime, grace: float) -> PodProblem | None:
    """Why a pod's container does not start (image, configuration, crash loop)."""
    status = pod.get("status") or {}
    images = {c.get("name"): c.get("image") for c in (pod.get("spec") or {}).get("containers", [])}
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        message = str(waiting.get("message") or "").strip()
        image = images.get(container.get("name")) or container.get("image") or "?"
        if reason in BAD_IMAGE:
            return PodProblem(f"the image {image} cannot be used ({reason}): {message}", True)
        if reason in PULL_PROBLEMS:
            age = _age(pod, now)
            text = f"cannot pull the image {image} ({reason})" + (f": {message}" if message else "")
            if age is not None and age > grace:
                return PodProblem(f"{text}; gave up after {int(age)} s", permanent=True)
            return PodProblem(text)
        if reason in START_PROBLEMS:
            return PodProblem(f"{task} cannot start ({reason}): {message}", permanent=False)
        if reason == "CrashLoopBackOff":
            failure = pod_failure(pod, task)
            return PodProblem(
                f"{task} keeps crashing" + (f": {failure.text}" if failure else ""),
                exit_code=failure.exit_code if failure else None,
            )
    return None


def _unschedulable(podgroup: Obj | None, pods: Sequence[Obj]) -> str:
    """The scheduler's own words on why the gang (or a pod) does not fit."""
    for condition in (podgroup or {}).get("status", {}).get("conditions") or []:
        if condition.get("type") == "Unschedulable" and condition.get("status") == "True":
            return str(condition.get("message") or condition.get("reason") or "unschedulable")
    for pod in pods:
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if (
                condition.get("type") == "PodScheduled"
                and condition.get("status") == "False"
                and condition.get("reason") == "Unschedulable"
            ):
                return str(condition.get("message") or "no node fits")
    return ""


def _quota_event(events: Sequence[Obj]) -> PodProblem | None:
    for event in _newest_first(events):
        message = str(event.get("message") or "")
        if "exceeded quota" in message:
            detail = message.split("exceeded quota:")[-1].strip()
            return PodProblem(f"waiting: the namespace quota is exceeded: {detail}", quota=True)
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


def _completed_words(job: Obj) -> str:
    succeeded = int((job.get("status") or {}).get("succeeded") or 0)
    return (
        f"completed ({succeeded} task{'s' if succeeded != 1 else ''} succeeded)"
        if succeeded
        else "completed"
    )


def _where(pods: Sequence[Obj]) -> str:
    nodes = sorted({str(n) for p in pods if (n := (p.get("spec") or {}).get("nodeName"))})
    if not nodes:
        return "the cluster"
    if len(nodes) <= 3:
        return ", ".join(nodes)
    return f"{len(nodes)} nodes ({', '.join(nodes[:3])}, …)"


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
