"""From Volcano's and Kubernetes' states to the portal's lifecycle, with reasons people read."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from core.reasons import Reason
from scheduling import reasons as R
from scheduling.backends.base import Phase
from scheduling.backends.kubernetes import names, status

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
WORKLOAD = "3f2a9c4e-1b7d-4e5f-8a9b-0c1d2e3f4a5b"
JOB = "q-3f2a9c4e1b7d"


def job(phase: str | None = "Pending", component: str = "job", **status_fields: Any) -> dict:
    obj: dict[str, Any] = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {
            "name": JOB,
            "namespace": "quanta-ml-101",
            "labels": {names.WORKLOAD_ID: WORKLOAD, names.ATTEMPT: "0", names.COMPONENT: component},
            "annotations": {},
        },
        "spec": {"queue": "dl-201", "minAvailable": 2, "maxRetry": 3},
    }
    if phase is not None:
        obj["status"] = {"state": {"phase": phase}, **status_fields}
    return obj


def pod(
    task: str = "master-0",
    phase: str = "Running",
    *,
    ready: bool = True,
    node: str = "gpu-07",
    waiting: dict | None = None,
    terminated: dict | None = None,
    **status_fields: Any,
) -> dict:
    state: dict[str, Any] = {"running": {}}
    if waiting:
        state = {"waiting": waiting}
    if terminated:
        state = {"terminated": terminated}
    return {
        "metadata": {
            "name": f"{JOB}-{task}",
            "labels": {names.WORKLOAD_ID: WORKLOAD, names.ATTEMPT: "0"},
            "creationTimestamp": "2026-11-30T11:59:00Z",
        },
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "quanta/pt:2"}]},
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [{"name": "main", "state": state}],
            **status_fields,
        },
    }


def text(reason: Reason | None) -> str:
    return reason.text() if reason else ""


def observe(obj: dict, **kw: Any) -> tuple[Phase, str, int | None]:
    observation = status.job_observation(obj, now=NOW, **kw)
    assert observation.workload_id == WORKLOAD
    return observation.phase, text(observation.reason), observation.exit_code


UNSCHEDULABLE = {
    "status": {
        "phase": "Pending",
        "conditions": [
            {
                "type": "Unschedulable",
                "status": "True",
                "message": "2/2 tasks in gang unschedulable: 0/8 nodes are available: "
                "8 Insufficient nvidia.com/gpu.",
            }
        ],
    }
}


@pytest.mark.parametrize(
    ("volcano", "kw", "phase", "words"),
    [
        ("Pending", {}, Phase.PENDING, "waiting in queue dl-201"),
        ("Pending", {"podgroup": UNSCHEDULABLE}, Phase.PENDING, "8 Insufficient nvidia.com/gpu"),
        (
            "Pending",
            {"podgroup": {"status": {"phase": "Inqueue"}}},
            Phase.STARTING,
            "admitted by queue dl-201: 0 of 2 pods started",
        ),
        (
            "Running",
            {"pods": [pod(), pod("worker-0", node="gpu-08")]},
            Phase.RUNNING,
            "gpu-07, gpu-08",
        ),
        ("Completing", {}, Phase.RUNNING, "completing"),
        ("Completed", {}, Phase.SUCCEEDED, "completed"),
        ("Aborting", {}, Phase.STOPPED, "aborted on the cluster"),
        ("Aborted", {}, Phase.STOPPED, "aborted on the cluster"),
        ("Terminating", {}, Phase.STOPPED, "terminated on the cluster"),
        ("Terminated", {}, Phase.STOPPED, "terminated on the cluster"),
        ("Failed", {}, Phase.FAILED, "failed"),
    ],
)
def test_each_volcano_phase_maps_to_its_portal_phase_and_reason(
    volcano: str, kw: dict, phase: Phase, words: str
) -> None:
    got, reason, _ = observe(job(volcano), **kw)
    assert got == phase
    assert words in reason


def test_a_job_without_status_yet_is_pending_in_its_queue() -> None:
    assert observe(job(None))[:2] == (Phase.PENDING, "waiting in queue dl-201")


def test_a_restarting_job_says_why_and_which_restart() -> None:
    evicted = pod(phase="Failed", reason="Evicted", message="The node was low on resource: memory.")
    phase, reason, _ = observe(job("Restarting", retryCount=1), pods=[evicted])
    assert phase == Phase.STARTING
    assert reason == (
        "restarting after master-0 was evicted: The node was low on resource: memory. "
        "(restart 1 of 3)"
    )


def test_a_failed_job_gives_the_failed_pods_exit_code() -> None:
    failed = pod("worker-1", "Failed", terminated={"exitCode": 3, "reason": "Error"})
    phase, reason, code = observe(job("Failed", retryCount=2), pods=[pod(), failed])
    assert (phase, code) == (Phase.FAILED, 3)
    assert reason == "failed after 2 restarts: worker-1 exited with code 3"


def test_an_out_of_memory_kill_is_said_in_plain_words() -> None:
    oom = pod("master-0", "Failed", terminated={"exitCode": 137, "reason": "OOMKilled"})
    phase, reason, code = observe(job("Terminated"), pods=[oom])
    assert (phase, code) == (Phase.FAILED, 137)
    assert reason == "master-0 ran out of memory (OOMKilled, exit code 137)"


def test_a_terminated_job_the_portal_stopped_is_stopped_even_with_a_failed_pod() -> None:
    stopped = job("Terminated")
    stopped["metadata"]["annotations"][status.STOP_ANNOTATION] = "2026-11-30T11:00:00Z"
    failed = pod(phase="Failed", terminated={"exitCode": 143, "reason": "Error"})
    assert observe(stopped, pods=[failed])[:2] == (Phase.STOPPED, "stopped")


def test_a_job_being_deleted_is_stopped() -> None:
    deleting = job("Running")
    deleting["metadata"]["deletionTimestamp"] = "2026-11-30T11:00:00Z"
    assert observe(deleting)[:2] == (Phase.STOPPED, "deleted on the cluster")


def test_the_last_failure_seen_explains_a_job_whose_pods_are_gone() -> None:
    remembered = status.PodProblem(R.POD_EXITED(task="worker-2", code=1), exit_code=1)
    phase, reason, code = observe(job("Failed"), last_failure=remembered)
    assert (phase, reason, code) == (Phase.FAILED, "worker-2 exited with code 1", 1)


def test_an_unschedulable_pod_gives_the_schedulers_message() -> None:
    waiting = pod(phase="Pending", ready=False)
    waiting["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/3 nodes are available: 3 node(s) didn't match node affinity.",
        }
    ]
    waiting["status"]["containerStatuses"] = []
    phase, reason, _ = observe(job("Pending"), pods=[waiting])
    assert phase == Phase.PENDING
    assert reason == (
        "waiting for resources: 0/3 nodes are available: 3 node(s) didn't match node affinity."
    )


def test_an_image_that_cannot_be_pulled_says_so_then_fails_after_the_grace() -> None:
    backoff = {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "quanta/pt:2"'}
    stuck = pod(phase="Pending", ready=False, waiting=backoff)
    phase, reason, _ = observe(job("Pending"), pods=[stuck], pull_grace_seconds=300)
    assert phase == Phase.STARTING
    assert reason.startswith("cannot pull the image quanta/pt:2 (ImagePullBackOff)")
    phase, reason, _ = observe(job("Pending"), pods=[stuck], pull_grace_seconds=30)
    assert phase == Phase.FAILED
    assert reason.endswith("gave up after 60 s")


def test_an_invalid_image_name_fails_at_once() -> None:
    bad = pod(phase="Pending", ready=False, waiting={"reason": "InvalidImageName", "message": "x"})
    assert observe(job("Pending"), pods=[bad])[0] == Phase.FAILED


def test_a_namespace_quota_that_refuses_the_pods_is_the_reason_to_wait() -> None:
    refused = {
        "type": "Warning",
        "reason": "FailedCreate",
        "lastTimestamp": "2026-11-30T11:59:30Z",
        "message": 'pods "q-3f2a9c4e1b7d-master-0" is forbidden: exceeded quota: quanta-quota, '
        "requested: requests.nvidia.com/gpu=4, used: requests.nvidia.com/gpu=2, "
        "limited: requests.nvidia.com/gpu=4",
    }
    phase, reason, _ = observe(job("Pending"), events=[refused])
    assert phase == Phase.PENDING
    assert reason.startswith("waiting: the namespace quota is exceeded: quanta-quota, requested")


def test_a_notebook_runs_only_once_its_server_answers() -> None:
    notebook = job("Running", component="notebook")
    phase, reason, _ = observe(notebook, pods=[pod("notebook-0", ready=False)])
    assert (phase, reason) == (Phase.STARTING, "waiting for the server")
    assert observe(notebook, pods=[pod("notebook-0")])[0] == Phase.RUNNING


def deployment(**status_fields: Any) -> dict:
    return {
        "kind": "Deployment",
        "metadata": {
            "name": JOB,
            "labels": {names.WORKLOAD_ID: WORKLOAD, names.ATTEMPT: "0"},
        },
        "spec": {"replicas": 2},
        "status": status_fields,
    }


def test_a_model_server_runs_once_a_replica_is_available() -> None:
    observation = status.deployment_observation(deployment(availableReplicas=1), now=NOW)
    assert (observation.phase, text(observation.reason)) == (
        Phase.RUNNING,
        "serving with 1 of 2 replicas ready",
    )
    assert status.deployment_observation(deployment(), now=NOW).phase == Phase.STARTING


def test_a_model_server_refused_by_the_quota_waits_and_one_past_its_deadline_fails() -> None:
    refused = deployment(
        conditions=[
            {
                "type": "ReplicaFailure",
                "status": "True",
                "message": 'pods "x" is forbidden: exceeded quota: quanta-quota',
            }
        ]
    )
    observation = status.deployment_observation(refused, now=NOW)
    assert observation.phase == Phase.PENDING
    assert "namespace quota is exceeded" in text(observation.reason)
    late = deployment(
        conditions=[
            {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}
        ]
    )
    crash = pod(
        "abc",
        ready=False,
        waiting={"reason": "CrashLoopBackOff"},
        **{"containerStatuses": [
            {
                "name": "main",
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
            }
        ]},
    )  # fmt: skip
    observation = status.deployment_observation(late, pods=[crash], now=NOW)
    assert observation.phase == Phase.FAILED
    words = text(observation.reason)
    assert "keeps crashing" in words and "exited with code 1" in words
