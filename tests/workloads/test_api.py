"""The workloads API as bob (student of class A), alice (his teacher) and charlie (class B)."""

from __future__ import annotations

import pytest

from scheduling.backends.base import Phase
from workloads import reconcile, services
from workloads.choices import State
from workloads.models import Grant, Workload

pytestmark = pytest.mark.django_db


@pytest.fixture
def launched(world, catalog, backend, django_capture_on_commit_callbacks) -> Workload:
    with django_capture_on_commit_callbacks(execute=True):
        workload = services.launch_environment(actor=world.bob, template=catalog.jupyter)
    return workload


def test_a_student_launches_through_the_api_and_sees_it_start(
    world, catalog, backend, api, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = api(world.bob).post(
            "/api/v1/workloads/launch/", {"template": "jupyter", "flavor": "small"}, format="json"
        )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["state"] == "Pending" and body["open_url"] is None
    assert "backend_state" not in body
    detail = api(world.bob).get(f"/api/v1/workloads/{body['id']}/").json()
    assert detail["state"] == "Starting" and detail["reason"] == "starting on gpu-host"


def test_running_notebooks_carry_their_open_url(world, catalog, backend, api, launched) -> None:
    backend.set(launched.pk, Phase.RUNNING)
    reconcile.reconcile(catalog.cluster)
    body = api(world.bob).get(f"/api/v1/workloads/{launched.pk}/").json()
    assert body["open_url"] == f"/nb/{launched.pk}/lab"


def test_an_ungranted_template_gets_a_400(world, catalog, backend, api) -> None:
    response = api(world.charlie).post(
        "/api/v1/workloads/launch/", {"template": "jupyter"}, format="json"
    )
    assert response.status_code == 400 and "template" in response.json()


def test_the_outsider_cannot_see_or_stop_anothers_workload(world, api, launched) -> None:
    client = api(world.charlie)
    assert client.get(f"/api/v1/workloads/{launched.pk}/").status_code == 404
    assert client.post(f"/api/v1/workloads/{launched.pk}/stop/").status_code == 404
    assert client.get(f"/api/v1/workloads/{launched.pk}/logs/").status_code == 404
    assert client.get("/api/v1/workloads/").json()["results"] == []


def test_the_teacher_sees_and_stops_a_students_session(
    world, api, launched, django_capture_on_commit_callbacks
) -> None:
    client = api(world.alice)
    assert [w["owner"] for w in client.get("/api/v1/workloads/").json()["results"]] == ["bob"]
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/api/v1/workloads/{launched.pk}/stop/")
    assert response.status_code == 200
    launched.refresh_from_db()
    assert launched.state == State.STOPPED and launched.reason == "stopped by alice"


def test_stopping_a_finished_workload_gets_a_400(
    world, api, launched, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        api(world.bob).post(f"/api/v1/workloads/{launched.pk}/stop/")
    response = api(world.bob).post(f"/api/v1/workloads/{launched.pk}/stop/")
    assert response.status_code == 400


def test_logs_and_events_are_readable_by_the_owner(world, api, launched) -> None:
    logs = api(world.bob).get(f"/api/v1/workloads/{launched.pk}/logs/?task=0&offset=0")
    assert logs.json()["text"] == "log of task 0\n"
    assert api(world.bob).get(f"/api/v1/workloads/{launched.pk}/logs/?task=5").status_code == 400
    events = api(world.bob).get(f"/api/v1/workloads/{launched.pk}/events/").json()
    assert [e["to_state"] for e in events][-1] == "Starting"


def test_a_distributed_job_is_submitted_with_its_workers(
    world, catalog, backend, api, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = api(world.bob).post(
            "/api/v1/workloads/jobs/",
            {
                "tenant": "ml-101",
                "flavor": "small",
                "command": ["python", "-c", "print(1)"],
                "workers": 2,
                "env": {"EPOCHS": "3"},
            },
            format="json",
        )
    assert response.status_code == 201, response.content
    spec = backend.specs[response.json()["id"]]
    assert spec.workers == 2 and spec.env["EPOCHS"] == "3"


@pytest.mark.parametrize(
    "body",
    [
        {"workers": 0},
        {"workers": 1000},
        {"command": "python 'oops"},
        {"tenant": "dl-201"},
        {"env": {"WORLD_SIZE": "9"}},
    ],
)
def test_bad_jobs_get_a_400_and_nothing_is_created(world, catalog, backend, api, body) -> None:
    payload = {"tenant": "ml-101", "flavor": "small", "command": "python train.py", **body}
    response = api(world.bob).post("/api/v1/workloads/jobs/", payload, format="json")
    assert response.status_code == 400
    assert set(response.json()) & {"workers", "command", "tenant", "env"}
    assert not Workload.objects.exists()


def test_the_app_center_lists_only_what_your_classes_were_granted(
    world, catalog, backend, api
) -> None:
    assert [g["template"] for g in api(world.bob).get("/api/v1/app-center/").json()] == ["jupyter"]
    assert api(world.charlie).get("/api/v1/app-center/").json() == []


def test_a_teacher_grants_to_their_class_but_not_to_another(world, catalog, api) -> None:
    grant = {
        "template": "jupyter",
        "tenant": "ml-101",
        "flavors": ["small"],
        "windows": [{"day": 1, "start": "14:00", "end": "16:00"}],
    }
    created = api(world.alice).post("/api/v1/grants/", grant, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["windows_text"] == "Tue 14:00–16:00"
    other = api(world.alice).post("/api/v1/grants/", grant | {"tenant": "dl-201"}, format="json")
    assert other.status_code == 400
    assert api(world.bob).post("/api/v1/grants/", grant, format="json").status_code == 403
    assert not Grant.objects.filter(tenant=world.class_b).exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"flavors": ["nope"]}, "flavors"),
        ({"windows": [{"day": 9, "start": "14:00", "end": "16:00"}]}, "windows"),
        ({"windows": [{"day": 1, "start": "16:00", "end": "14:00"}]}, "windows"),
        ({"tenant": "cs"}, "tenant"),
    ],
)
def test_a_bad_grant_gets_a_400_naming_the_field(world, catalog, api, change, field) -> None:
    grant = {"template": "jupyter", "tenant": "ml-101", "flavors": ["small"], **change}
    response = api(world.dean).post("/api/v1/grants/", grant, format="json")
    assert response.status_code == 400 and field in response.json()


def test_only_superusers_change_the_catalog(world, catalog, api) -> None:
    flavor = {"name": "tiny", "slug": "tiny", "cpu_milli": 250, "memory_mib": 512}
    assert api(world.dean).post("/api/v1/flavors/", flavor, format="json").status_code == 403
    assert api(world.root).post("/api/v1/flavors/", flavor, format="json").status_code == 201
    both = flavor | {"slug": "both", "gpus": 1, "gpu_milli": 500}
    assert api(world.root).post("/api/v1/flavors/", both, format="json").status_code == 400
    assert api(world.bob).get("/api/v1/flavors/").status_code == 200


def test_the_workload_list_uses_a_bounded_number_of_queries(
    world,
    catalog,
    backend,
    api,
    launched,
    django_assert_max_num_queries,
    django_capture_on_commit_callbacks,
) -> None:
    for _ in range(2):
        with django_capture_on_commit_callbacks(execute=True):
            services.launch_environment(actor=world.bob, template=catalog.jupyter)
    with django_assert_max_num_queries(8):
        assert len(api(world.alice).get("/api/v1/workloads/").json()["results"]) == 3


def test_a_job_over_the_quota_gets_a_400_with_the_quota_reason(
    world, catalog, backend, api
) -> None:
    world.quota(world.class_a, gpus=1)
    payload = {"tenant": "ml-101", "flavor": "gpu", "command": "python train.py", "workers": 2}
    response = api(world.bob).post("/api/v1/workloads/jobs/", payload, format="json")
    assert response.status_code == 400
    assert "your quota allows 1 more GPUs" in response.json()["workers"][0]
    assert not Workload.objects.exists()
