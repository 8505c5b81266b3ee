"""Model serving end to end on the local backend: bob's job trains a small scikit-learn model,
its output becomes a model version, bob deploys it, and the gateway answers v2 inference with
the model's prediction; replicas follow the load (1 → 2 → 1), scale to zero and start cold on
the next request; keys, sessions, rate limits and bad bodies get the answers the issue asks
for, and charlie (another class) learns nothing. Needs the serving interpreter (make apps)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import io
import json
import os
import re
import shutil
import sys
import tempfile
import time
import types
import zipfile
from pathlib import Path
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import HttpCommunicator
from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from core.models import AuditEvent
from portal.asgi import application
from scheduling import serving as scheduling_serving
from scheduling.backends import gpus, registry
from scheduling.inventory import sync_backend_nodes
from scheduling.models import Cluster
from tests.workloads.conftest import wait_for
from workloads import autoscale, gateway, model_registry, services, serving
from workloads.choices import State
from workloads.models import AppTemplate, Flavor, Grant, Image, ServingEndpoint, Workload

SERVING_PYTHON = Path(django_settings.SERVING_PYTHON)
needs_serving = pytest.mark.skipif(
    not SERVING_PYTHON.exists(), reason=f"no serving interpreter at {SERVING_PYTHON} (make apps)"
)

TRAIN = """
import json, os
from sklearn.linear_model import LogisticRegression
import joblib
X = [[x / 10] for x in range(20)]
y = [0] * 10 + [1] * 10
model = LogisticRegression().fit(X, y)
os.makedirs("out", exist_ok=True)
joblib.dump(model, "out/model.joblib")
json.dump({"accuracy": model.score(X, y)}, open("out/metrics.json", "w"))
"""

SLOW_MODEL = """
import time
class Model:
    def __init__(self, model_dir):
        self.model_dir = model_dir
    def predict(self, rows):
        time.sleep(0.4)
        return [sum(row) for row in rows.tolist()]
"""


def infer_body(values: list[float]) -> bytes:
    return json.dumps(
        {"inputs": [{"name": "x", "shape": [len(values), 1], "datatype": "FP64", "data": values}]}
    ).encode()


def cookie_for(user: Any) -> str:
    client = Client()
    client.force_login(user)
    name = django_settings.SESSION_COOKIE_NAME
    return f"{name}={client.cookies[name].value}"


async def call(
    method: str, path: str, *, key: str = "", cookie: str = "", body: bytes = b""
) -> dict[str, Any]:
    headers = [(b"host", b"localhost")]
    if key:
        headers.append((b"authorization", f"Bearer {key}".encode()))
    if cookie:
        headers.append((b"cookie", cookie.encode()))
    if body:
        headers.append((b"content-type", b"application/json"))
    communicator = HttpCommunicator(application, method, path, body=body, headers=headers)
    response = await communicator.get_response(timeout=90)
    await communicator.wait(timeout=5)
    return response


class Lab:
    """This host as a cluster, a job template and a model-server template granted to class A."""

    def __init__(self, world: Any) -> None:
        self.cluster = Cluster.objects.create(
            name="This host", slug="host", backend="local", is_default=True,
            config={"cpu_overcommit": 4},
        )  # fmt: skip
        sync_backend_nodes(self.cluster)
        image = Image.objects.create(name="Python", slug="py")
        self.flavor = Flavor.objects.create(
            name="small", slug="small", cpu_milli=500, memory_mib=1024
        )
        for kind in ("terminal", "model-server"):
            template = AppTemplate.objects.create(
                name=kind, slug=kind, kind=kind, image=image, default_flavor=self.flavor
            )
            template.allowed_flavors.set([self.flavor])
            grant = Grant.objects.create(template=template, tenant=world.class_a, member_limit=4)
            grant.flavors.set([self.flavor])


def train_and_register(world: Any, lab: Lab) -> Any:
    job = services.submit_job(
        actor=world.bob,
        tenant=world.class_a,
        flavor=lab.flavor,
        command=[str(SERVING_PYTHON), "-c", TRAIN],
        name="train",
    )
    job = wait_for(lab.cluster, job, State.SUCCEEDED, 120)
    model = model_registry.create_model(actor=world.bob, name="Iris-ish")
    return model_registry.register_from_job(
        actor=world.bob, model=model, job=job, path="out", framework="sklearn"
    )


def upload_custom(world: Any, source: str, name: str) -> Any:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        bundle.writestr("model.py", source)
    buffer.seek(0)
    model = model_registry.create_model(actor=world.bob, name=name)
    return model_registry.register_upload(
        actor=world.bob, model=model, archive=buffer, filename="m.zip", framework="custom"
    )


def running(lab: Lab, endpoint: ServingEndpoint) -> ServingEndpoint:
    assert endpoint.workload is not None
    wait_for(lab.cluster, endpoint.workload, State.RUNNING, 90)
    return ServingEndpoint.objects.select_related("workload", "version__model").get(pk=endpoint.pk)


def stop_all(lab: Lab) -> None:
    for workload in Workload.objects.filter(state__in=[State.RUNNING, State.STARTING]):
        services.stop(actor=None, workload=workload)
    for workload in Workload.objects.filter(state=State.STOPPING):
        with contextlib.suppress(AssertionError):
            wait_for(lab.cluster, workload, State.STOPPED, 30)


@pytest.fixture
def lab_settings(settings: Any) -> Any:
    # Short: the replicas' UNIX sockets live under DATA_DIR (at most 107 bytes of path).
    data = Path(tempfile.mkdtemp(prefix="qs-", dir="/tmp"))
    settings.DATA_DIR = data
    settings.MODELS_DIR = data / "models"
    settings.REDIS_URL = ""
    registry.forget()
    gateway.forget()
    autoscale.forget()
    yield settings
    registry.forget()
    gateway.forget()
    autoscale.forget()
    shutil.rmtree(data, ignore_errors=True)


@needs_serving
@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_a_trained_model_is_registered_deployed_and_answers_through_the_gateway(
    world: Any, lab_settings: Any
) -> None:
    lab = await database_sync_to_async(Lab)(world)
    try:
        version = await database_sync_to_async(train_and_register)(world, lab)
        assert version.number == 1 and version.metrics == {"accuracy": 1.0}
        assert version.source_job.name == "train"
        # The version is a copy: what the job's folder holds later does not change it.
        assert (Path(lab_settings.MODELS_DIR) / version.path / "model.joblib").is_file()

        endpoint = await database_sync_to_async(serving.deploy)(
            actor=world.bob, version=version, flavor=lab.flavor, name="iris"
        )
        endpoint = await database_sync_to_async(running)(lab, endpoint)
        _key, secret = await database_sync_to_async(serving.create_key)(
            actor=world.bob, endpoint=endpoint
        )
        infer = f"/serve/iris/v2/models/{endpoint.model_name}/infer"

        answer = await call("POST", infer, key=secret, body=infer_body([0.0, 1.9]))
        assert answer["status"] == 200, answer["body"]
        outputs = json.loads(answer["body"])["outputs"]
        assert outputs[0]["data"] == [0, 1]

        ready = await call("GET", "/serve/iris/v2/health/ready", key=secret)
        assert ready["status"] == 200

        # bob's session works too; charlie's, a wrong key, no key and an unknown endpoint
        # all get the same 401.
        bob = await database_sync_to_async(cookie_for)(world.bob)
        assert (await call("POST", infer, cookie=bob, body=infer_body([1.5])))["status"] == 200
        charlie = await database_sync_to_async(cookie_for)(world.charlie)
        refusals = [
            await call("POST", infer, cookie=charlie, body=infer_body([1.5])),
            await call("POST", infer, key="qsk_wrong", body=infer_body([1.5])),
            await call("POST", infer, body=infer_body([1.5])),
            await call("POST", "/serve/nothing-here/v2/health/ready", key=secret),
        ]
        assert {r["status"] for r in refusals} == {401}
        assert len({r["body"] for r in refusals}) == 1

        bad = await call("POST", infer, key=secret, body=b'{"instances": [[1]]}')
        assert bad["status"] == 400 and b"inputs" in bad["body"]
        assert (await call("POST", infer, key=secret, body=b"not json"))["status"] == 400

        await database_sync_to_async(ServingEndpoint.objects.filter(pk=endpoint.pk).update)(
            rate_limit=3
        )
        gateway.forget()
        statuses = [
            (await call("POST", infer, key=secret, body=infer_body([1.0])))["status"]
            for _ in range(6)
        ]
        assert statuses[0] == 200 and 429 in statuses
        limited = await call("POST", infer, key=secret, body=infer_body([1.0]))
        assert limited["status"] == 429
        assert any(name == b"retry-after" for name, _v in limited["headers"])
    finally:
        gateway.forget()  # the autoscaler's loop ends with this test's event loop
        await database_sync_to_async(stop_all)(lab)


@needs_serving
@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_replicas_follow_the_load_up_and_down_then_to_zero_and_a_cold_start(
    world: Any, lab_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(autoscale, "SCALE_DOWN_QUIET_S", 0.5)
    monkeypatch.setattr(gateway, "TICK_S", 3600)  # the test ticks itself
    lab = await database_sync_to_async(Lab)(world)
    try:
        version = await database_sync_to_async(upload_custom)(world, SLOW_MODEL, "slow")
        endpoint = await database_sync_to_async(serving.deploy)(
            actor=world.bob, version=version, flavor=lab.flavor, name="slow",
            min_replicas=0, max_replicas=2, target_concurrency=1, scale_to_zero_after_s=10,
        )  # fmt: skip
        endpoint = await database_sync_to_async(running)(lab, endpoint)
        _key, secret = await database_sync_to_async(serving.create_key)(
            actor=world.bob, endpoint=endpoint
        )
        infer = f"/serve/slow/v2/models/{endpoint.model_name}/infer"
        backend = registry.get_backend(lab.cluster)
        handle = await database_sync_to_async(lambda: gateway.handle_for(endpoint.workload))()

        def replicas() -> Any:
            return backend.replicas(handle)  # type: ignore[attr-defined]

        assert replicas().desired == 1

        async def load() -> list[int]:
            answers = await asyncio.gather(
                *(call("POST", infer, key=secret, body=infer_body([2.0])) for _ in range(4))
            )
            return [a["status"] for a in answers]

        burst = asyncio.ensure_future(load())
        await asyncio.sleep(0.25)  # the requests are in flight
        await gateway.tick()
        assert await burst == [200] * 4
        assert replicas().desired == 2
        deadline = time.monotonic() + 30
        while len(replicas().ready) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert len(replicas().ready) == 2

        # Quiet: one step down after the quiet period, not below one while recently used.
        await asyncio.sleep(2.1)
        await gateway.tick()
        await asyncio.sleep(0.6)
        await gateway.tick()
        assert replicas().desired == 1

        # Idle past scale_to_zero_after_s with min 0: to zero; the next request starts one.
        stats = autoscale.stats_for(endpoint.pk)
        stats.last_request = time.time() - 11
        await gateway.tick()
        assert replicas().desired == 0
        started = time.monotonic()
        cold = await call("POST", infer, key=secret, body=infer_body([3.0]))
        assert cold["status"] == 200, cold["body"]
        assert json.loads(cold["body"])["outputs"][0]["data"] == [3.0]
        assert time.monotonic() - started < django_settings.SERVING_COLD_START_SECONDS
        assert replicas().desired == 1
    finally:
        gateway.forget()  # the autoscaler's loop ends with this test's event loop
        await database_sync_to_async(stop_all)(lab)


@needs_serving
@pytest.mark.django_db(transaction=True)
def test_a_model_whose_files_do_not_load_ends_failed_with_the_servers_error(
    world: Any, lab_settings: Any
) -> None:
    lab = Lab(world)
    version = upload_custom(world, "raise RuntimeError('weights are corrupt')\n", "broken")
    endpoint = serving.deploy(actor=world.bob, version=version, flavor=lab.flavor, name="broken")
    assert endpoint.workload is not None
    workload = wait_for(lab.cluster, endpoint.workload, State.FAILED, 60)
    assert "weights are corrupt" in workload.reason


@pytest.mark.django_db
def test_deploying_needs_a_model_server_grant_and_a_visible_version(
    world: Any, lab_settings: Any
) -> None:
    lab = Lab(world)
    version = upload_custom(world, SLOW_MODEL, "bobs")
    # charlie (class B) sees neither the model nor a grant.
    with pytest.raises(ValidationError) as refused:
        serving.deploy(actor=world.charlie, version=version, flavor=lab.flavor)
    assert "version" in refused.value.message_dict
    with pytest.raises(ValidationError) as bad:
        serving.deploy(
            actor=world.bob, version=version, flavor=lab.flavor, min_replicas=3, max_replicas=2
        )
    assert "min_replicas" in bad.value.message_dict
    with pytest.raises(ValidationError) as bad_schedule:
        serving.deploy(
            actor=world.bob, version=version, flavor=lab.flavor,
            schedule=[{"start": "25:00", "end": "08:00", "min_replicas": 1}],
        )  # fmt: skip
    assert "schedule" in bad_schedule.value.message_dict


def test_the_autoscaler_scales_up_at_once_down_after_quiet_and_to_zero_when_idle() -> None:
    base = {"target": 2, "minimum": 0, "maximum": 4, "zero_after_s": 60, "quiet_s": 10}
    assert autoscale.decide(current=1, peak_in_flight=5, idle_s=0, below_for_s=0, **base) == 3
    assert autoscale.decide(current=3, peak_in_flight=1, idle_s=0, below_for_s=3, **base) == 3
    assert autoscale.decide(current=3, peak_in_flight=1, idle_s=0, below_for_s=11, **base) == 2
    assert autoscale.decide(current=1, peak_in_flight=0, idle_s=30, below_for_s=30, **base) == 1
    assert autoscale.decide(current=1, peak_in_flight=0, idle_s=61, below_for_s=61, **base) == 0
    assert autoscale.decide(current=0, peak_in_flight=1, idle_s=0, below_for_s=0, **base) == 1
    # A schedule's minimum holds replicas however idle.
    day = {**base, "minimum": 2}
    assert autoscale.decide(current=2, peak_in_flight=0, idle_s=999, below_for_s=999, **day) == 2
    assert autoscale.decide(current=9, peak_in_flight=99, idle_s=0, below_for_s=0, **base) == 4


@pytest.mark.django_db
def test_pages_show_endpoints_to_their_owner_teacher_and_admin_and_404_to_others(
    world: Any, lab_settings: Any
) -> None:
    lab = Lab(world)
    version = upload_custom(world, SLOW_MODEL, "pages")
    client = Client()
    client.force_login(world.bob)
    # Deploy from the model's page; a bad schedule is a form error (400), not a 500.
    page = f"/models/{version.model.slug}/"
    form = {
        "form": "deploy", "version": "latest", "name": "pages-ep", "flavor": lab.flavor.pk,
        "min_replicas": 1, "max_replicas": 2, "target_concurrency": 2,
        "scale_to_zero_after_s": 300, "rate_limit": 10,
    }  # fmt: skip
    bad = client.post(page, {**form, "schedule": '[{"start": "8am"}]'})
    assert bad.status_code == 400 and b"08:00" in bad.content
    response = client.post(page, form)
    assert response.status_code == 302 and response["Location"] == "/endpoints/pages-ep/"
    assert b"Try it" in client.get("/endpoints/pages-ep/").content
    endpoint = ServingEndpoint.objects.get(slug="pages-ep")
    assert client.get(f"/workloads/{endpoint.workload_id}/").status_code == 200
    page_of = "/endpoints/pages-ep/"
    made = client.post(page_of, {"action": "key", "name": "laptop"})
    shown = re.search(rb'id="new-key">(qsk_[^<]+)<', made.content)
    assert made.status_code == 200 and shown  # the key, once, on this answer
    assert shown[1] not in client.get(page_of).content
    assert client.post(page_of, {"action": "revoke", "key": "x"}).status_code == 200
    key = endpoint.keys.get()
    client.post(page_of, {"action": "revoke", "key": str(key.pk)})
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert client.get("/endpoints/pages-ep/stats/").json()["replicas"]["desired"] == 0

    for who, seen in [(world.alice, True), (world.root, True), (world.charlie, False)]:
        other = Client()
        other.force_login(who)
        assert other.get("/endpoints/pages-ep/").status_code == (200 if seen else 404)
        assert (b"pages-ep" in other.get("/endpoints/").content) is seen
    outsider = Client()
    outsider.force_login(world.charlie)
    assert outsider.get(page).status_code == 404  # a private model
    assert outsider.post("/endpoints/pages-ep/stop/").status_code == 404


@pytest.mark.django_db
def test_the_api_registers_versions_moves_aliases_and_hides_what_one_may_not_see(
    world: Any, lab_settings: Any
) -> None:
    lab = Lab(world)
    api = APIClient()
    api.force_authenticate(world.bob)
    assert api.post("/api/v1/models/", {"name": "Net"}, format="json").status_code == 201
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        bundle.writestr("model.py", SLOW_MODEL)
    buffer.seek(0)
    buffer.name = "net.zip"
    for _ in range(2):
        buffer.seek(0)
        made = api.post(
            "/api/v1/models/net/versions/", {"framework": "custom", "file": buffer},
            format="multipart",
        )  # fmt: skip
        assert made.status_code == 201, made.content
    moved = api.post("/api/v1/models/net/aliases/", {"name": "production", "version": 1})
    assert moved.json()["aliases"] == {"latest": 2, "production": 1}
    assert api.post("/api/v1/models/net/versions/", {"framework": "onnx"}).status_code == 400
    deployed = api.post(
        "/api/v1/endpoints/",
        {"model": "net", "version": "production", "flavor": lab.flavor.slug, "slug": "net-ep"},
        format="json",
    )
    assert deployed.status_code == 201, deployed.content
    assert deployed.json()["version"] == 1
    key = api.post("/api/v1/endpoints/net-ep/keys/", {"name": "ci"}, format="json").json()
    assert key["key"].startswith("qsk_")
    assert "key" not in api.get("/api/v1/endpoints/net-ep/keys/").json()[0]

    charlie = APIClient()
    charlie.force_authenticate(world.charlie)
    assert charlie.get("/api/v1/models/net/").status_code == 404
    assert charlie.get("/api/v1/endpoints/net-ep/").status_code == 404
    assert charlie.post("/api/v1/endpoints/net-ep/keys/", {}).status_code == 404
    assert (
        charlie.post(
            "/api/v1/endpoints/", {"model": "net", "flavor": lab.flavor.slug}, format="json"
        ).status_code
        == 400
    )
    audit = list(AuditEvent.objects.values_list("action", flat=True))
    assert "model.alias" in audit and "endpoint.key.create" in audit


@pytest.mark.asyncio
@pytest.mark.parametrize("shared", [False, True], ids=["in-process", "redis"])
async def test_the_rate_limit_takes_a_burst_of_its_rate_then_refuses_with_a_wait(
    settings: Any, shared: bool
) -> None:
    url = os.environ.get("REDIS_URL", "")
    if shared and not url:
        pytest.skip("REDIS_URL is not set")
    settings.REDIS_URL = url if shared else ""
    gateway.forget()
    monkey_id = int(time.time() * 1000) % 1_000_000_000  # a bucket of its own in Redis
    waits = [await gateway.take_token(monkey_id, 5) for _ in range(6)]
    assert waits[:5] == [0.0] * 5
    assert 0 < waits[5] <= 0.2 + 1e-6
    gateway._redis = None  # the next test's loop gets its own client


@needs_serving
@pytest.mark.django_db(transaction=True)
def test_a_schedule_holds_replicas_inside_its_window_and_idle_ones_go_to_zero_outside(
    world: Any, lab_settings: Any
) -> None:
    lab = Lab(world)
    version = upload_custom(world, SLOW_MODEL, "by-day")
    all_day = [{"days": list(range(7)), "start": "00:00", "end": "23:59", "min_replicas": 2}]
    endpoint = serving.deploy(
        actor=world.bob, version=version, flavor=lab.flavor, name="by-day",
        min_replicas=0, max_replicas=2, scale_to_zero_after_s=10, schedule=all_day,
    )  # fmt: skip
    try:
        endpoint = running(lab, endpoint)
        backend = registry.get_backend(lab.cluster)
        handle = gateway.handle_for(endpoint.workload)
        now = timezone.now().replace(hour=12)  # inside the window, whatever the clock says
        assert autoscale.apply_schedules(now) == 1
        assert backend.replicas(handle).desired == 2  # type: ignore[attr-defined]
        # Night (no window) and idle past scale_to_zero_after_s: to zero.
        ServingEndpoint.objects.filter(pk=endpoint.pk).update(
            schedule=[], last_request_at=now - dt.timedelta(minutes=5)
        )
        assert autoscale.apply_schedules(now) == 1
        assert backend.replicas(handle).desired == 0  # type: ignore[attr-defined]
        assert autoscale.apply_schedules(now) == 0  # nothing left to change
    finally:
        stop_all(lab)


def test_with_a_gpu_target_the_utilisation_adds_replicas_where_it_is_known() -> None:
    base = {"target": 8, "minimum": 1, "maximum": 4, "zero_after_s": 60, "idle_s": 0}
    # Few requests in flight, but the GPUs are at 90 % against a 45 % target: twice as many.
    assert (
        autoscale.decide(
            current=2, peak_in_flight=2, below_for_s=0, gpu_utilisation=90, target_gpu=45, **base
        )
        == 4
    )
    # Unknown utilisation (no NVML): requests alone decide.
    assert (
        autoscale.decide(
            current=2,
            peak_in_flight=2,
            below_for_s=0,
            gpu_utilisation=None,
            target_gpu=45,
            **base,
        )
        == 2
    )
    # Low utilisation and few requests: one step down after the quiet period.
    assert (
        autoscale.decide(
            current=3, peak_in_flight=1, below_for_s=30, gpu_utilisation=10, target_gpu=45, **base
        )
        == 2
    )


def test_gpu_utilisation_is_read_from_nvml_and_unknown_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=[40, 80][h]),
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert gpus.utilisation([0, 1]) == 60
    assert gpus.utilisation([]) is None

    def broken() -> None:
        raise OSError("no driver")

    monkeypatch.setattr(fake, "nvmlInit", broken)
    assert gpus.utilisation([0]) is None


@pytest.mark.django_db
def test_the_kubernetes_schedule_task_learns_the_running_endpoints_from_workloads(
    world: Any, lab_settings: Any
) -> None:
    lab = Lab(world)
    version = upload_custom(world, SLOW_MODEL, "listed")
    endpoint = serving.deploy(
        actor=world.bob, version=version, flavor=lab.flavor, name="listed",
        schedule=[{"days": [0], "start": "08:00", "end": "22:00", "min_replicas": 1}],
    )  # fmt: skip
    assert endpoint.workload is not None
    assert scheduling_serving.serving_targets() == []  # Pending: it holds nothing yet
    Workload.objects.filter(pk=endpoint.workload.pk).update(state=State.RUNNING)
    (target,) = scheduling_serving.serving_targets() or []
    assert target.handle.workload_id == str(endpoint.workload.pk)
    assert target.serving.model_name == "listed" and len(target.serving.schedule) == 1
