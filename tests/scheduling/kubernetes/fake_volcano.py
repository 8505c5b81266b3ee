"""A fake Volcano job controller and kubelet on top of the emulated API server.

Enough of Volcano's behaviour for the backend contract: a Job gets a PodGroup and one pod per
task replica (``<job>-<task>-<index>``), each pod runs its container's command as a real local
process (so exit codes and logs are real), and the Job's phase follows its pods and policies:
TaskCompleted → CompleteJob, PodFailed → RestartJob (bounded by maxRetry) or TerminateJob, and
bus Commands (TerminateJob). Not a scheduler: every pod lands on one node at once.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

from tests.scheduling.kubernetes.emulator import ApiServer, Obj

FINISHED = frozenset({"Completed", "Failed", "Terminated", "Aborted"})


class FakeVolcano:
    def __init__(self, api: ApiServer, *, node: str = "node-1") -> None:
        self.api = api
        self.node = node
        self.events: queue.Queue[tuple[str, str, Obj]] = queue.Queue()
        self.processes: dict[tuple[str, str], subprocess.Popen[bytes]] = {}
        self.workdir = Path(tempfile.mkdtemp(prefix="fake-volcano-"))
        self.stopping = threading.Event()
        self.lock = threading.RLock()
        api.listeners.append(self._notify)
        self.thread = threading.Thread(target=self._loop, name="fake-volcano", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=5)
        with self.lock:
            for process in self.processes.values():
                _kill(process)
            self.processes.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- the loop ----------------------------------------------------------------------------------

    def _notify(self, event: str, plural: str, obj: Obj) -> None:
        if plural in ("jobs", "commands") and event in ("ADDED", "DELETED"):
            self.events.put((event, plural, obj))

    def _loop(self) -> None:
        while not self.stopping.is_set():
            try:
                event, plural, obj = self.events.get(timeout=0.02)
            except queue.Empty:
                self._poll()
                continue
            with self.lock:
                if plural == "jobs" and event == "ADDED" and not obj.get("status"):
                    self._start(obj)
                elif plural == "jobs" and event == "DELETED":
                    self._forget(obj)
                elif plural == "commands" and event == "ADDED":
                    self._command(obj)
            self._poll()

    # -- jobs --------------------------------------------------------------------------------------

    def _start(self, job: Obj) -> None:
        meta = job["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        self.api.put(
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "metadata": {
                    "name": f"{name}-{meta['uid']}",
                    "namespace": namespace,
                    "labels": dict(meta.get("labels", {})),
                    "ownerReferences": [_owner(job)],
                },
                "spec": {"minMember": job["spec"].get("minAvailable", 1)},
                "status": {"phase": "Inqueue"},
            }
        )
        self._set_phase(namespace, name, "Pending")
        self._make_pods(job)
        self._set_phase(namespace, name, "Running")

    def _make_pods(self, job: Obj) -> None:
        meta = job["metadata"]
        for task in job["spec"]["tasks"]:
            for index in range(task.get("replicas", 1)):
                template = task["template"]
                pod_name = f"{meta['name']}-{task['name']}-{index}"
                spec = dict(template["spec"])
                spec["nodeName"] = self.node
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": pod_name,
                        "namespace": meta["namespace"],
                        "labels": dict(template.get("metadata", {}).get("labels", {})),
                        "annotations": {
                            "volcano.sh/job-name": meta["name"],
                            "volcano.sh/task-spec": task["name"],
                        },
                        "ownerReferences": [_owner(job)],
                    },
                    "spec": spec,
                    "status": {"phase": "Pending"},
                }
                self.api.put(pod)
                self._run(pod, spec["containers"][0])

    def _run(self, pod: Obj, container: Obj) -> None:
        meta = pod["metadata"]
        argv = list(container.get("command") or []) + list(container.get("args") or [])
        log = self.workdir / f"{meta['namespace']}-{meta['name']}.log"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
        env.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
        with open(log, "wb") as output:
            process = subprocess.Popen(
                argv,
                cwd=self.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes[(meta["namespace"], meta["name"])] = process

        def running(obj: Obj) -> None:
            obj["status"] = {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [
                    {"name": container["name"], "ready": True, "state": {"running": {}}}
                ],
            }

        self.api.update("pods", meta["namespace"], meta["name"], running)

    def _poll(self) -> None:
        with self.lock:
            for key, process in list(self.processes.items()):
                if key not in self.processes:  # killed by a sibling's end in this round
                    continue
                namespace, pod_name = key
                log = self.workdir / f"{namespace}-{pod_name}.log"
                # Poll before reading: a process that exits between a read and the poll would
                # otherwise be finished with the log as it was before its last write.
                code = process.poll()
                with contextlib.suppress(FileNotFoundError):
                    self.api.logs[key] = log.read_bytes()
                if code is None:
                    continue
                del self.processes[key]
                self._finished(namespace, pod_name, code)

    def _finished(self, namespace: str, pod_name: str, code: int) -> None:
        if code < 0:  # killed by a signal: a container's exit code is 128 + signal
            code = 128 - code

        def ended(obj: Obj) -> None:
            name = obj["spec"]["containers"][0]["name"]
            obj["status"] = {
                "phase": "Succeeded" if code == 0 else "Failed",
                "containerStatuses": [
                    {
                        "name": name,
                        "ready": False,
                        "state": {
                            "terminated": {
                                "exitCode": code,
                                "reason": "Completed" if code == 0 else "Error",
                            }
                        },
                    }
                ],
            }

        try:
            pod = self.api.update("pods", namespace, pod_name, ended)
        except KeyError:  # deleted meanwhile (the Job went)
            return
        job_name = pod["metadata"]["annotations"]["volcano.sh/job-name"]
        task_name = pod["metadata"]["annotations"]["volcano.sh/task-spec"]
        job = self.api.get("jobs", namespace, job_name)
        if job is None or job.get("status", {}).get("state", {}).get("phase") in FINISHED:
            return
        task = next(t for t in job["spec"]["tasks"] if t["name"] == task_name)
        event = "PodFailed" if code else "TaskCompleted"
        action = _action(task, job, event)
        pods = self.api.all("pods", namespace)
        mine = [
            p for p in pods if p["metadata"]["annotations"].get("volcano.sh/job-name") == job_name
        ]
        if code and action == "RestartJob":
            retries = int(job.get("status", {}).get("retryCount", 0)) + 1
            self._kill_pods(mine, keep_finished=False)
            if retries >= int(job["spec"].get("maxRetry", 3)):
                self._set_phase(namespace, job_name, "Failed", retryCount=retries)
                return
            self._set_phase(namespace, job_name, "Restarting", retryCount=retries)
            self._make_pods(job)
            self._set_phase(namespace, job_name, "Running")
            return
        if code and action == "TerminateJob":
            self._kill_pods(mine, keep_finished=True)
            self._set_phase(namespace, job_name, "Terminated")
            return
        if not code and action == "CompleteJob":
            siblings = [
                p for p in mine if p["metadata"]["annotations"]["volcano.sh/task-spec"] == task_name
            ]
            if all(p["status"].get("phase") == "Succeeded" for p in siblings):
                self._kill_pods(mine, keep_finished=True)
                self._set_phase(namespace, job_name, "Completed", succeeded=len(siblings))
            return
        phases = [p["status"].get("phase") for p in mine]
        if all(p in ("Succeeded", "Failed") for p in phases):
            failed = phases.count("Failed")
            self._set_phase(
                namespace, job_name, "Failed" if failed else "Completed",
                succeeded=phases.count("Succeeded"), failed=failed,
            )  # fmt: skip

    def _kill_pods(self, pods: list[Obj], *, keep_finished: bool) -> None:
        for pod in pods:
            meta = pod["metadata"]
            key = (meta["namespace"], meta["name"])
            process = self.processes.pop(key, None)
            if process is not None:
                _kill(process)
            if keep_finished and pod["status"].get("phase") in ("Succeeded", "Failed"):
                continue
            if process is None and keep_finished:
                continue
            self.api.remove("pods", meta["namespace"], meta["name"])

    def _forget(self, job: Obj) -> None:
        for key in [k for k in self.processes if k[1].startswith(job["metadata"]["name"] + "-")]:
            _kill(self.processes.pop(key))

    def _command(self, command: Obj) -> None:
        namespace = command["metadata"]["namespace"]
        target = command.get("target", {}).get("name", "")
        job = self.api.get("jobs", namespace, target)
        if job is not None and command.get("action") == "TerminateJob":
            phase = job.get("status", {}).get("state", {}).get("phase")
            if phase not in FINISHED:
                pods = [
                    p
                    for p in self.api.all("pods", namespace)
                    if p["metadata"]["annotations"].get("volcano.sh/job-name") == target
                ]
                self._kill_pods(pods, keep_finished=True)
                self._set_phase(namespace, target, "Terminated")
        self.api.remove("commands", namespace, command["metadata"]["name"])

    def _set_phase(self, namespace: str, name: str, phase: str, **counts: Any) -> None:
        def change(obj: Obj) -> None:
            status = obj.setdefault("status", {})
            status["state"] = {"phase": phase}
            status.update(counts)

        with contextlib.suppress(KeyError):  # deleted meanwhile
            self.api.update("jobs", namespace, name, change)


def _action(task: Obj, job: Obj, event: str) -> str:
    for policies in (task.get("policies") or [], job["spec"].get("policies") or []):
        for policy in policies:
            if policy.get("event") == event:
                return str(policy.get("action", ""))
    return ""


def _owner(job: Obj) -> Obj:
    meta = job["metadata"]
    return {
        "apiVersion": job["apiVersion"],
        "kind": job["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
    }


def _kill(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)
