"""The Kubernetes culling bug: a notebook on Kubernetes reported no activity, so idle culling
counted from its start and stopped notebooks in use. Now the backend reads JupyterLab's own
``/api/status`` (``last_activity``) and the proxy's traffic counts as everywhere: a notebook
in use past the idle timeout is not culled; an idle one is.

The API server is the emulated one; JupyterLab is a small real HTTP server at the address the
cluster's ``service_url`` gives the notebook's Service."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.utils import timezone

from scheduling.backends import registry
from scheduling.backends.base import Handle, Phase
from scheduling.backends.kubernetes import KubernetesBackend, manifests
from scheduling.models import Cluster
from tests.conftest import World
from tests.scheduling.kubernetes.conftest import NAMESPACE, spec
from tests.scheduling.kubernetes.emulator import ApiServer
from workloads import reconcile, services
from workloads.activity import record_activity
from workloads.choices import State
from workloads.models import AppTemplate, Flavor, Image, Workload


class FakeJupyter:
    """Answers ``<base_url>api/status`` with the ``last_activity`` a test sets (None: 503),
    and remembers the Authorization headers it was sent."""

    def __init__(self) -> None:
        self.last_activity: dict[str, dt.datetime | None] = {}  # base url -> activity
        self.tokens: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake.tokens.append(self.headers.get("Authorization", ""))
                base = self.path.removesuffix("api/status")
                at = fake.last_activity.get(base)
                if not self.path.endswith("/api/status") or at is None:
                    self.send_response(503)
                    self.end_headers()
                    return
                body = json.dumps(
                    {"started": "2026-01-01T00:00:00Z", "last_activity": at.isoformat()}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def jupyter() -> Iterator[FakeJupyter]:
    fake = FakeJupyter()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def running_notebook(api: ApiServer, name: str, labels: dict[str, str]) -> None:
    """The notebook's Volcano Job Running, its pod Running and Ready."""

    def change(job: dict[str, Any]) -> None:
        job.setdefault("status", {})["state"] = {"phase": "Running"}
        job["status"]["running"] = 1

    api.update("jobs", NAMESPACE, name, change)
    api.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{name}-notebook-0", "namespace": NAMESPACE, "labels": labels},
            "spec": {"nodeName": "gpu-01", "containers": [{"name": "main", "image": "x"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }
    )


# --- the backend --------------------------------------------------------------------------------


def test_a_running_notebook_reports_the_activity_its_server_reports(
    api: ApiServer, make_backend: Callable[..., KubernetesBackend], jupyter: FakeJupyter
) -> None:
    backend = make_backend(service_url=jupyter.url, activity_poll_seconds=60)
    workload = spec("notebook")
    handle = backend.submit(workload)
    running_notebook(api, handle.state["name"], manifests.workload_labels(workload, "notebook"))
    used = dt.datetime(2026, 3, 2, 10, 15, tzinfo=dt.UTC)
    jupyter.last_activity[f"/nb/{workload.workload_id}/"] = used
    observation = backend.observe([handle])[workload.workload_id]
    assert observation.phase == Phase.RUNNING
    assert observation.last_activity == used
    assert jupyter.tokens == [f"token {handle.state['token']}"]
    # Read again only after activity_poll_seconds: the next observe reuses what it read.
    jupyter.last_activity[f"/nb/{workload.workload_id}/"] = used + dt.timedelta(minutes=5)
    assert backend.observe([handle])[workload.workload_id].last_activity == used
    assert len(jupyter.tokens) == 1


def test_a_server_that_does_not_answer_adds_no_activity(
    api: ApiServer, make_backend: Callable[..., KubernetesBackend], jupyter: FakeJupyter
) -> None:
    backend = make_backend(service_url=jupyter.url, activity_poll_seconds=0.001)
    workload = spec("notebook")
    handle = backend.submit(workload)
    running_notebook(api, handle.state["name"], manifests.workload_labels(workload, "notebook"))
    observation = backend.observe([handle])[workload.workload_id]
    assert observation.phase == Phase.RUNNING and observation.last_activity is None


def test_jobs_and_other_apps_are_not_polled(
    api: ApiServer, make_backend: Callable[..., KubernetesBackend], jupyter: FakeJupyter
) -> None:
    backend = make_backend(service_url=jupyter.url)
    job = spec("job")
    handle = backend.submit(job)

    def change(obj: dict[str, Any]) -> None:
        obj["status"] = {"state": {"phase": "Running"}}

    api.update("jobs", NAMESPACE, handle.state["name"], change)
    assert backend.observe([handle])[job.workload_id].phase == Phase.RUNNING
    vscode = spec("notebook", app="vscode")
    code = backend.submit(vscode)
    running_notebook(api, code.state["name"], manifests.workload_labels(vscode, "notebook"))
    backend.observe([code])
    assert jupyter.tokens == []


# --- culling, through the portal ---------------------------------------------------------------


@pytest.fixture
def cluster(api: ApiServer, jupyter: FakeJupyter) -> Iterator[Cluster]:
    cluster = Cluster.objects.create(
        name="Campus",
        slug="campus",
        backend="kubernetes",
        config={
            "host": api.url,
            "backoff_seconds": 0.01,
            "max_backoff_seconds": 0.02,
            "retries": 2,
            "service_url": jupyter.url,
            "activity_poll_seconds": 0.001,
        },
    )
    registry.forget()
    yield cluster
    registry.forget()


@pytest.fixture
def notebook(world: World, cluster: Cluster, api: ApiServer) -> Callable[[], Workload]:
    """A JupyterLab of bob's on the cluster, Running for two hours with an idle timeout of
    60 minutes: the case the bug culled whether or not it was in use."""
    image = Image.objects.create(name="PyTorch", slug="pt", registry_ref="quanta/pytorch:2.13")
    flavor = Flavor.objects.create(name="cpu", slug="cpu", cpu_milli=1000, memory_mib=2048)
    template = AppTemplate.objects.create(
        name="JupyterLab", slug="jupyter", kind="jupyter", image=image, default_flavor=flavor
    )

    def make() -> Workload:
        workload = Workload.objects.create(
            kind="notebook",
            name="lab",
            owner=world.bob,
            tenant=world.class_a,
            cluster=cluster,
            flavor=flavor,
            image=image,
            template=template,
            state=State.STARTING,
            idle_timeout_minutes=60,
        )
        reconcile.submit(str(workload.pk))
        workload.refresh_from_db()
        job = next(
            j
            for j in api.all("jobs")
            if j["metadata"]["labels"]["quanta.io/workload-id"] == str(workload.pk)
        )
        running_notebook(api, job["metadata"]["name"], job["metadata"]["labels"])
        Workload.objects.filter(pk=workload.pk).update(
            state=State.RUNNING, started_at=timezone.now() - dt.timedelta(hours=2)
        )
        workload.refresh_from_db()
        return workload

    return make


pytestmark_db = pytest.mark.django_db


@pytestmark_db
def test_a_kubernetes_notebook_in_use_is_not_culled_and_an_idle_one_is(
    cluster: Cluster, notebook: Callable[[], Workload], jupyter: FakeJupyter, run_cull: Any
) -> None:
    in_use, idle = notebook(), notebook()
    now = timezone.now()
    jupyter.last_activity[in_use.backend_state["base_url"]] = now - dt.timedelta(minutes=3)
    jupyter.last_activity[idle.backend_state["base_url"]] = now - dt.timedelta(minutes=95)
    reconcile.reconcile(cluster)
    in_use.refresh_from_db()
    assert in_use.last_activity_at == now - dt.timedelta(minutes=3)
    stopped = run_cull()
    assert stopped == [str(idle.pk)]
    in_use.refresh_from_db()
    idle.refresh_from_db()
    assert in_use.state == State.RUNNING
    assert idle.state == State.STOPPING and idle.reason == "idle for 60 minutes"


@pytestmark_db
def test_traffic_through_the_proxy_keeps_a_kubernetes_notebook(
    cluster: Cluster, notebook: Callable[[], Workload], jupyter: FakeJupyter, run_cull: Any
) -> None:
    """A notebook whose server does not answer /api/status (or reports old activity) is
    kept by the requests and WebSocket messages the proxy passes to it."""
    used = notebook()
    jupyter.last_activity[used.backend_state["base_url"]] = timezone.now() - dt.timedelta(hours=2)
    from django.core.cache import cache

    cache.clear()
    assert record_activity(used.pk)  # what the proxy calls as traffic passes
    reconcile.reconcile(cluster)  # the server's older report does not undo it
    assert run_cull() == []
    used.refresh_from_db()
    assert used.state == State.RUNNING


@pytest.fixture
def run_cull(django_capture_on_commit_callbacks: Any) -> Callable[[], list[str]]:
    def call() -> list[str]:
        with django_capture_on_commit_callbacks(execute=True):
            return services.cull()

    return call


def test_handles_without_a_namespace_are_skipped(
    make_backend: Callable[..., KubernetesBackend], jupyter: FakeJupyter
) -> None:
    backend = make_backend(service_url=jupyter.url)
    workload_id = "9c8a3d4e-0000-4000-8000-000000000002"
    observation = backend.observe([Handle(workload_id, {"kind": "notebook"})])[workload_id]
    assert observation.phase == Phase.UNKNOWN and jupyter.tokens == []
