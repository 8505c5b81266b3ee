"""/metrics: scraped and parsed as Prometheus parses it, after a launch and a stop; and who may
scrape (the token, the allow-list, this host only by default)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.utils import timezone
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from billing.models import UsageInterval
from portal import metrics
from portal.asgi import application
from scheduling.backends.base import Phase
from scheduling.models import Cluster, GpuDevice, Node
from tests.marks import requires_redis
from tests.portal.test_live import channel_layer, connect, live_test  # noqa: F401 (fixture)
from tests.workloads import conftest as workload_fixtures
from workloads import reconcile
from workloads import services as workload_services
from workloads.choices import State

pytestmark = pytest.mark.django_db

# The workload tests' catalog (a lab cluster with two A100s), fake backend and ``run``.
backend = workload_fixtures.backend
catalog = workload_fixtures.catalog
run = workload_fixtures.run

LOCAL = {"REMOTE_ADDR": "127.0.0.1"}


def scrape(client: Any, **extra: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape from this host, by name and labels."""
    response = client.get("/metrics", **{**LOCAL, **extra})
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def counted(name: str, **labels: str) -> float:
    """A process metric's value now (0 before its first observation)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


def launch(world: Any, catalog: Any, run: Any, flavor: Any) -> Any:
    return run(
        workload_services.launch_environment,
        actor=world.bob,
        template=catalog.jupyter,
        flavor=flavor,
    )


def test_a_scrape_after_a_launch_and_a_stop_shows_the_domain(
    client, world, catalog, backend, run
) -> None:
    sessions = counted("quanta_admission_session_duration_seconds_count", cluster="lab")
    reached = counted(
        "quanta_workload_launch_to_running_seconds_count", cluster="lab", kind="notebook"
    )

    whole = launch(world, catalog, run, catalog.gpu)
    half = launch(world, catalog, run, catalog.half)
    waiting = launch(world, catalog, run, catalog.gpu)  # half a GPU is left: it queues
    assert (whole.state, half.state, waiting.state) == (State.STARTING,) * 2 + (State.QUEUED,)
    backend.set(whole.pk, Phase.RUNNING, last_activity=timezone.now())
    run(reconcile.reconcile, catalog.cluster)

    s = scrape(client)
    a100 = {"cluster": "lab", "model": "A100"}
    assert value(s, "quanta_gpus", **a100) == 2
    assert value(s, "quanta_gpus_allocated", **a100) == 1.5
    assert value(s, "quanta_gpus_free", **a100) == 0.5
    assert value(s, "quanta_gpus_stranded", **a100) == 0.5
    assert value(s, "quanta_gpus_allocated_idle", **a100) == 0  # active just now
    assert value(s, "quanta_workloads", cluster="lab", state="Running", kind="notebook") == 1
    assert value(s, "quanta_workloads", cluster="lab", state="Starting", kind="notebook") == 1
    assert value(s, "quanta_workloads", cluster="lab", state="Queued", kind="notebook") == 1
    assert value(s, "quanta_workloads", cluster="lab", state="Running", kind="job") == 0
    assert value(s, "quanta_queue_depth", cluster="lab", queue="default") == 1
    assert 0 <= value(s, "quanta_queue_oldest_wait_seconds", cluster="lab", queue="default") < 60
    assert value(s, "quanta_nodes", cluster="lab") == 1
    assert value(s, "quanta_nodes_not_reporting", cluster="lab") == 0
    assert 0 <= value(s, "quanta_billing_settlement_lag_seconds") < 60
    assert value(s, "quanta_live_connections") >= 0
    # Observed as it happened: admission ran for each launch, one workload reached Running.
    assert (
        value(s, "quanta_admission_session_duration_seconds_count", cluster="lab") >= sessions + 3
    )
    assert (
        value(s, "quanta_workload_launch_to_running_seconds_count", cluster="lab", kind="notebook")
        == reached + 1
    )

    run(workload_services.stop, actor=world.bob, workload=whole)
    run(reconcile.reconcile, catalog.cluster)  # the backend confirms: the GPU is given back
    run(reconcile.reconcile, catalog.cluster)
    whole.refresh_from_db()
    waiting.refresh_from_db()
    assert whole.state == State.STOPPED
    s = scrape(client)
    assert value(s, "quanta_workloads", cluster="lab", state="Running", kind="notebook") == 0
    assert value(s, "quanta_workloads", cluster="lab", state="Stopping", kind="notebook") == 0
    assert value(s, "quanta_gpus_allocated", **a100) == 0.5 + (waiting.state == State.STARTING)
    assert value(s, "quanta_queue_depth", cluster="lab", queue="default") == (
        waiting.state == State.QUEUED
    )
    assert (
        value(s, "quanta_workload_launch_to_running_seconds_count", cluster="lab", kind="notebook")
        == reached + 1  # a stop is no new Running
    )
    # The request metrics saw the first scrape, by the URL pattern's name.
    assert value(s, "quanta_http_requests_total", method="GET", status="200", view="metrics") >= 1


def test_a_gpu_held_without_activity_and_a_settlement_behind_show(
    client, world, catalog, backend, run
) -> None:
    whole = launch(world, catalog, run, catalog.gpu)
    backend.set(whole.pk, Phase.RUNNING, last_activity=timezone.now() - dt.timedelta(hours=2))
    run(reconcile.reconcile, catalog.cluster)
    UsageInterval.objects.filter(workload=whole).update(
        settled_until=timezone.now() - dt.timedelta(hours=1)
    )
    s = scrape(client)
    assert value(s, "quanta_gpus_allocated_idle", cluster="lab", model="A100") == 1
    assert 3590 < value(s, "quanta_billing_settlement_lag_seconds") < 3700


def test_a_queue_of_the_class_and_a_node_gone_are_counted(client, world, catalog, run) -> None:
    queue = catalog.cluster.queues.create(name="teaching")
    queue.tenants.add(world.dept)  # class A's parent: its work waits in "teaching"
    catalog.node.cordoned = True  # nothing can start
    catalog.node.save()
    Node.objects.create(
        cluster=catalog.cluster, name="old", cpu_milli=1, memory_mib=1, gone_at=timezone.now()
    )
    launch(world, catalog, run, catalog.small)
    s = scrape(client)
    assert value(s, "quanta_queue_depth", cluster="lab", queue="teaching") == 1
    assert value(s, "quanta_queue_depth", cluster="lab", queue="default") == 0
    assert value(s, "quanta_nodes_cordoned", cluster="lab") == 1
    assert value(s, "quanta_nodes_not_reporting", cluster="lab") == 1


def test_the_domain_costs_the_same_few_queries_however_large(
    world, catalog, run, django_assert_num_queries
) -> None:
    with django_assert_num_queries(9):
        first = list(metrics.DomainCollector().collect())
    other = Cluster.objects.create(name="Farm", slug="farm", backend="simulated")
    for n in range(5):
        node = Node.objects.create(cluster=other, name=f"n{n}", cpu_milli=8000, memory_mib=8192)
        GpuDevice.objects.create(node=node, index=0, model="V100", memory_mib=16384)
    other.queues.create(name="research").tenants.add(world.class_b)
    for flavor in (catalog.small, catalog.gpu, catalog.half):
        launch(world, catalog, run, flavor)
    with django_assert_num_queries(9):
        second = list(metrics.DomainCollector().collect())
    assert sum(len(f.samples) for f in second) > sum(len(f.samples) for f in first)


# -- who may scrape ------------------------------------------------------------------------------


def test_only_this_host_may_scrape_when_nothing_is_set(client, world, settings) -> None:
    settings.METRICS_TOKEN, settings.METRICS_ALLOW = "", []
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="::1").status_code == 200
    refused = client.get("/metrics", REMOTE_ADDR="10.1.2.3")
    assert refused.status_code == 403 and b"quanta_" not in refused.content
    # Through a reverse proxy on this host the address says nothing: refused.
    proxied = client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.9")
    assert proxied.status_code == 403


def test_signing_in_gives_no_metrics(client, world, settings) -> None:
    settings.METRICS_TOKEN, settings.METRICS_ALLOW = "", []
    client.force_login(world.root)  # even a superuser, from outside
    refused = client.get("/metrics", REMOTE_ADDR="10.1.2.3")
    assert refused.status_code == 403 and b"quanta_gpus" not in refused.content


def test_the_token_is_asked_for_and_checked(client, world, settings) -> None:
    settings.METRICS_TOKEN, settings.METRICS_ALLOW = "s3cret-scrape", []
    missing = client.get("/metrics", REMOTE_ADDR="10.1.2.3")
    assert missing.status_code == 401 and missing["WWW-Authenticate"].startswith("Bearer")
    assert b"quanta_" not in missing.content
    wrong = client.get("/metrics", REMOTE_ADDR="10.1.2.3", HTTP_AUTHORIZATION="Bearer nope")
    assert wrong.status_code == 401
    # With a token, this host is no longer let in without it.
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 401
    right = client.get(
        "/metrics", REMOTE_ADDR="10.1.2.3", HTTP_AUTHORIZATION="Bearer s3cret-scrape"
    )
    assert right.status_code == 200 and b"quanta_gpus" in right.content


def test_the_allow_list_admits_its_networks_only(client, world, settings) -> None:
    settings.METRICS_TOKEN, settings.METRICS_ALLOW = "", ["10.0.0.0/8", "2001:db8::/32"]
    assert client.get("/metrics", REMOTE_ADDR="10.20.30.40").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="2001:db8::5").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="192.168.1.1").status_code == 403
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 403
    settings.METRICS_TOKEN = "s3cret-scrape"  # both: either admits
    assert client.get("/metrics", REMOTE_ADDR="10.20.30.40").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="192.168.1.1").status_code == 401


def test_the_celery_queues_are_read_from_the_broker(settings, monkeypatch) -> None:
    import redis

    class Pipeline:
        def __init__(self) -> None:
            self.names: list[str] = []

        def llen(self, name: str) -> None:
            self.names.append(name)

        def execute(self) -> list[int]:
            return [{"default": 7, "cluster": 2}.get(n, 0) for n in self.names]

    class Client:
        def pipeline(self, transaction: bool) -> Pipeline:
            return Pipeline()

        def close(self) -> None:
            pass

    monkeypatch.setattr(redis.Redis, "from_url", classmethod(lambda cls, url, **kw: Client()))
    settings.REDIS_URL = "redis://broker.invalid:6379/0"
    families = {f.name: f for f in metrics.DomainCollector().collect()}
    lengths = {s.labels["queue"]: s.value for s in families["quanta_celery_queue_length"].samples}
    assert lengths == {"default": 7, "cluster": 2, "watch": 0}
    assert families["quanta_celery_broker_up"].samples[0].value == 1


def test_a_broker_that_does_not_answer_is_reported_not_raised(settings) -> None:
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    families = {f.name: f for f in metrics.DomainCollector().collect()}
    assert families["quanta_celery_broker_up"].samples[0].value == 0
    assert "quanta_celery_queue_length" not in families


@live_test
async def test_live_connections_are_counted_while_open(world: Any) -> None:
    before = counted("quanta_live_connections")
    ws = await connect(world.bob)
    assert counted("quanta_live_connections") == before + 1
    await ws.disconnect()
    assert counted("quanta_live_connections") == before
    refused = WebsocketCommunicator(application, "/ws/live/", headers=[(b"host", b"localhost")])
    assert not (await refused.connect(timeout=5))[0]
    assert counted("quanta_live_connections") == before  # never accepted: never counted


def test_with_a_multiprocess_directory_the_processes_values_add_up(tmp_path) -> None:
    """PROMETHEUS_MULTIPROC_DIR: what another process observed (a Celery worker's admission
    sessions) is in this process's scrape."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "DEBUG": "true"}
    env["DATA_DIR"] = str(tmp_path / "data")
    observe = (
        "from core.metrics import ADMISSION_SECONDS as A; A.labels(cluster='far').observe(0.2)"
    )
    subprocess.run([sys.executable, "-c", observe], cwd=root, env=env, check=True, timeout=60)
    scrape_it = (
        "import django; django.setup();"
        "from django.test import RequestFactory; from portal.metrics import metrics_view;"
        "r = RequestFactory().get('/metrics', REMOTE_ADDR='127.0.0.1');"
        "import portal.metrics as m; m.DomainCollector.collect = lambda self: iter(());"
        "print(metrics_view(r).content.decode())"
    )
    env["DJANGO_SETTINGS_MODULE"] = "portal.settings"
    out = subprocess.run(
        [sys.executable, "-c", scrape_it],
        cwd=root,
        env=env,
        check=True,
        timeout=120,
        capture_output=True,
        text=True,
    ).stdout
    assert 'quanta_admission_session_duration_seconds_count{cluster="far"} 1.0' in out


@requires_redis
def test_the_celery_queue_lengths_are_read_from_real_redis(settings, monkeypatch) -> None:
    import uuid

    import redis

    queue = f"quanta-test-{uuid.uuid4().hex[:8]}"  # a queue of its own: no worker takes it
    monkeypatch.setattr(metrics, "CELERY_QUEUES", (queue,))
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        client.rpush(queue, "a", "b", "c")
        families = {f.name: f for f in metrics.DomainCollector().collect()}
    finally:
        client.delete(queue)
        client.close()
    [sample] = families["quanta_celery_queue_length"].samples
    assert (sample.labels, sample.value) == ({"queue": queue}, 3)
