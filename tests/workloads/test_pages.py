"""The minimal workload pages: App Center, launch, list, detail, stop, job form."""

from __future__ import annotations

import re

import pytest

from scheduling.models import GpuDevice
from workloads.choices import State
from workloads.models import Workload

pytestmark = pytest.mark.django_db


@pytest.fixture
def signed_in(client):
    def as_user(user):
        client.force_login(user)
        return client

    return as_user


def test_the_app_center_shows_what_was_granted(world, catalog, signed_in) -> None:
    assert "JupyterLab" in signed_in(world.bob).get("/apps/").content.decode()
    assert "JupyterLab" not in signed_in(world.charlie).get("/apps/").content.decode()


def test_launching_from_the_app_center_opens_the_workload_page(
    world, catalog, backend, signed_in, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in(world.bob).post("/apps/jupyter/launch/", {"flavor": catalog.small.pk})
    workload = Workload.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/workloads/{workload.pk}/"
    page = signed_in(world.bob).get(response["Location"]).content.decode()
    assert "Starting" in page and "starting on gpu-host" in page


def test_an_ungranted_launch_says_why_and_creates_nothing(world, catalog, signed_in) -> None:
    response = signed_in(world.charlie).post(
        "/apps/jupyter/launch/", {"flavor": catalog.small.pk}, follow=True
    )
    assert "is not granted to you" in response.content.decode()
    assert not Workload.objects.exists()


def test_the_outsider_cannot_open_or_stop_the_workload_page(
    world, catalog, backend, signed_in, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        signed_in(world.bob).post("/apps/jupyter/launch/", {"flavor": catalog.small.pk})
    workload = Workload.objects.get()
    client = signed_in(world.charlie)
    assert client.get(f"/workloads/{workload.pk}/").status_code == 404
    assert client.post(f"/workloads/{workload.pk}/stop/").status_code == 404
    workload.refresh_from_db()
    assert workload.state == State.STARTING


def test_the_teacher_stops_a_students_session_from_its_page(
    world, catalog, backend, signed_in, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        signed_in(world.bob).post("/apps/jupyter/launch/", {"flavor": catalog.small.pk})
    workload = Workload.objects.get()
    assert "bob" in signed_in(world.alice).get("/workloads/").content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        signed_in(world.alice).post(f"/workloads/{workload.pk}/stop/")
    workload.refresh_from_db()
    assert workload.state == State.STOPPED


def test_the_job_form_reports_bad_input_on_its_fields(world, catalog, signed_in) -> None:
    response = signed_in(world.bob).post(
        "/workloads/new-job/",
        {
            "tenant": world.class_a.pk,
            "flavor": catalog.small.pk,
            "command": "python 'x",
            "workers": 1,
            "max_retries": 0,
            "env": "RANK=1",
        },
    )
    page = response.content.decode()
    assert response.status_code == 200 and "cannot be read" in page
    assert not Workload.objects.exists()


def test_a_job_submitted_from_the_form_shows_its_logs(
    world, catalog, backend, signed_in, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in(world.bob).post(
            "/workloads/new-job/",
            {
                "tenant": world.class_a.pk,
                "flavor": catalog.small.pk,
                "command": "python train.py",
                "workers": 2,
                "max_retries": 0,
                "env": "EPOCHS=3",
            },
        )
    assert response.status_code == 302
    page = signed_in(world.bob).get(response["Location"] + "?task=1").content.decode()
    assert "log of task 1" in page and "worker 1" in page


def _row(page: str, flavor: str) -> str:
    start = page.index(f'data-flavor="{flavor}"')
    return page[start : page.index("</tr>", start)]


def test_the_app_center_says_what_would_start_now_and_what_would_wait(
    world, catalog, backend, signed_in
) -> None:
    GpuDevice.objects.all().delete()
    world.quota(world.class_a, environments=5)
    page = signed_in(world.bob).get("/apps/").content.decode()
    assert "starts now" in _row(page, "small")
    gpu = _row(page, "gpu")  # no GPU at all: nothing that ends frees one, so no wait is promised
    assert "cannot run here" in gpu and "this cluster has no GPU: GPU sizes cannot run" in gpu
    assert "would wait" not in gpu and " min" not in gpu
    assert "cannot run here" in _row(page, "huge")
    assert "free now: 0 GPUs, 16 CPU cores" in page


def test_the_app_center_names_the_quota_that_would_hold_a_launch(
    world, catalog, backend, signed_in
) -> None:
    world.quota(world.class_a, gpus=0)
    page = signed_in(world.bob).get("/apps/").content.decode()
    assert "class ML-101: 0 of 0 GPUs in use (asked for 1)" in _row(page, "gpu")
    assert "your quota allows 0 more GPUs" in page


def test_the_app_center_uses_a_bounded_number_of_queries(
    world, catalog, backend, signed_in, django_assert_max_num_queries
) -> None:
    client = signed_in(world.bob)
    with django_assert_max_num_queries(25):
        assert client.get("/apps/").status_code == 200


def test_my_desktop_shows_one_card_per_environment_with_its_actions(
    world, catalog, backend, signed_in, django_capture_on_commit_callbacks
) -> None:
    from scheduling.backends.base import Phase
    from workloads import reconcile

    with django_capture_on_commit_callbacks(execute=True):
        signed_in(world.bob).post("/apps/jupyter/launch/", {"flavor": catalog.small.pk})
    workload = Workload.objects.get()
    backend.set(workload.pk, Phase.RUNNING)
    reconcile.reconcile(catalog.cluster)
    page = signed_in(world.bob).get("/desktop/").content.decode()
    assert f'data-workload-id="{workload.pk}"' in page
    assert f"/nb/{workload.pk}/lab" in page and "Extend" in page and "Stop" in page
    assert "left)" in page  # the time left until the deadline
    other = signed_in(world.charlie).get("/desktop/").content.decode()
    assert str(workload.pk) not in other


def _running_environment(world, catalog, backend, signed_in, capture) -> Workload:
    from scheduling.backends.base import Phase
    from workloads import reconcile

    with capture(execute=True):
        signed_in(world.bob).post("/apps/jupyter/launch/", {"flavor": catalog.small.pk})
    workload = Workload.objects.get()
    backend.set(workload.pk, Phase.RUNNING)
    reconcile.reconcile(catalog.cluster)
    workload.refresh_from_db()
    return workload


def test_extending_from_the_page_says_the_new_end_and_a_refusal_is_an_error(
    world, catalog, backend, signed_in, django_capture_on_commit_callbacks
) -> None:
    catalog.grant.max_extensions = 1
    catalog.grant.save()
    workload = _running_environment(
        world, catalog, backend, signed_in, django_capture_on_commit_callbacks
    )
    client = signed_in(world.bob)
    page = client.post(f"/workloads/{workload.pk}/extend/", follow=True).content.decode()
    assert re.search(r'<li class="banner success"[^>]*>Extended: it now stops at', page)
    page = client.post(f"/workloads/{workload.pk}/extend/", follow=True).content.decode()
    assert re.search(
        r'<li class="banner error"[^>]*>already extended 1 time\(s\), the most the grant allows',
        page,
    )
    assert signed_in(world.charlie).post(f"/workloads/{workload.pk}/extend/").status_code == 404


def test_the_api_refuses_an_extension_with_a_400_and_the_reason(
    world, catalog, backend, signed_in, django_capture_on_commit_callbacks
) -> None:
    from rest_framework.test import APIClient

    catalog.grant.max_extensions = 0
    catalog.grant.save()
    workload = _running_environment(
        world, catalog, backend, signed_in, django_capture_on_commit_callbacks
    )
    api = APIClient()
    api.force_authenticate(world.bob)
    response = api.post(f"/api/v1/workloads/{workload.pk}/extend/")
    assert response.status_code == 400
    assert "the most the grant allows" in response.json()["workload"][0]
    api.force_authenticate(world.charlie)
    assert api.post(f"/api/v1/workloads/{workload.pk}/extend/").status_code == 404


def test_the_job_form_refuses_a_job_over_the_quota_on_its_workers_field(
    world, catalog, signed_in
) -> None:
    world.quota(world.class_a, gpus=1)
    response = signed_in(world.bob).post(
        "/workloads/new-job/",
        {
            "tenant": world.class_a.pk,
            "flavor": catalog.gpu.pk,
            "command": "python train.py",
            "workers": 2,
            "max_retries": 0,
            "env": "",
        },
    )
    page = response.content.decode()
    assert response.status_code == 200
    assert "class ML-101: 0 of 1 GPUs in use (asked for 2)" in page
    assert "your quota allows 1 more GPUs" in page
    assert not Workload.objects.exists()


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_catalog_shows_half_a_cpu_as_half_not_zero(world, catalog, signed_in, language) -> None:
    from workloads.models import Flavor

    Flavor.objects.create(name="tiny", slug="tiny", cpu_milli=500, memory_mib=512)
    client = signed_in(world.root)
    page = client.get("/console/catalog/", HTTP_ACCEPT_LANGUAGE=language).content.decode()
    row = page[page.index("<strong>tiny</strong>") :]
    row = row[: row.index("</tr>")]
    assert '<td class="num">0.5</td><td class="num">0.5 GiB</td>' in row


def _ended_job(world, catalog, backend, capture) -> Workload:
    from scheduling.backends.base import Phase
    from workloads import reconcile, services

    with capture(execute=True):
        job = services.submit_job(
            actor=world.bob,
            tenant=world.class_a,
            flavor=catalog.small,
            command="for i in 1 2; do echo $i; done",
            workers=2,
            env={"EPOCHS": "3"},
        )
    backend.set(job.pk, Phase.FAILED)
    reconcile.reconcile(catalog.cluster)
    job.refresh_from_db()
    assert job.state == State.FAILED
    return job


def test_the_owner_resubmits_an_ended_job_from_its_page_and_others_cannot(
    world, catalog, backend, signed_in, django_capture_on_commit_callbacks
) -> None:
    job = _ended_job(world, catalog, backend, django_capture_on_commit_callbacks)
    page = signed_in(world.bob).get(f"/workloads/{job.pk}/").content.decode()
    assert 'data-role="run-again"' in page and "Resubmit" in page
    assert signed_in(world.charlie).post(f"/workloads/{job.pk}/run-again/").status_code == 404
    teacher = signed_in(world.alice)
    assert 'data-role="run-again"' not in teacher.get(f"/workloads/{job.pk}/").content.decode()
    assert teacher.post(f"/workloads/{job.pk}/run-again/").status_code == 403
    assert Workload.objects.count() == 1
    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in(world.bob).post(f"/workloads/{job.pk}/run-again/")
    again = Workload.objects.exclude(pk=job.pk).get()
    assert response.status_code == 302 and response["Location"] == f"/workloads/{again.pk}/"
    assert (again.command, again.workers, again.env, again.flavor, again.tenant) == (
        job.command,
        2,
        {"EPOCHS": "3"},
        catalog.small,
        world.class_a,
    )
    assert again.state != State.FAILED


def test_edit_and_resubmit_opens_the_job_form_filled_in_for_its_owner_only(
    world, catalog, backend, signed_in, django_capture_on_commit_callbacks
) -> None:
    job = _ended_job(world, catalog, backend, django_capture_on_commit_callbacks)
    page = signed_in(world.bob).get(f"/workloads/new-job/?from={job.pk}").content.decode()
    assert 'value="for i in 1 2; do echo $i; done"' in page
    assert "EPOCHS=3" in page
    other = signed_in(world.charlie).get(f"/workloads/new-job/?from={job.pk}").content.decode()
    assert "for i in 1 2" not in other
    assert signed_in(world.bob).get("/workloads/new-job/?from=nonsense").status_code == 200


def test_a_stopped_environment_is_launched_again_from_its_page(
    world, catalog, backend, signed_in, django_capture_on_commit_callbacks
) -> None:
    workload = _running_environment(
        world, catalog, backend, signed_in, django_capture_on_commit_callbacks
    )
    client = signed_in(world.bob)
    assert client.post(f"/workloads/{workload.pk}/run-again/", follow=True).status_code == 200
    assert Workload.objects.count() == 1  # still running: nothing new
    with django_capture_on_commit_callbacks(execute=True):
        client.post(f"/workloads/{workload.pk}/stop/")
    from scheduling.backends.base import Phase
    from workloads import reconcile

    backend.set(workload.pk, Phase.STOPPED)
    reconcile.reconcile(catalog.cluster)
    page = client.get(f"/workloads/{workload.pk}/").content.decode()
    assert "Launch again" in page and "Stops at" not in page
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/workloads/{workload.pk}/run-again/")
    again = Workload.objects.exclude(pk=workload.pk).get()
    assert response["Location"] == f"/workloads/{again.pk}/"
    assert (again.kind, again.template) == ("notebook", catalog.jupyter)
    assert again.flavor == catalog.small


def test_the_api_runs_an_ended_job_again_for_its_owner_only(
    world, catalog, backend, signed_in, django_capture_on_commit_callbacks
) -> None:
    from rest_framework.test import APIClient

    job = _ended_job(world, catalog, backend, django_capture_on_commit_callbacks)
    api = APIClient()
    api.force_authenticate(world.charlie)
    assert api.post(f"/api/v1/workloads/{job.pk}/run-again/").status_code == 404
    api.force_authenticate(world.alice)
    assert api.post(f"/api/v1/workloads/{job.pk}/run-again/").status_code == 403
    api.force_authenticate(world.bob)
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(f"/api/v1/workloads/{job.pk}/run-again/")
    assert response.status_code == 201
    again = response.json()
    assert again["id"] != str(job.pk) and again["command"] == job.command
    running = api.post(f"/api/v1/workloads/{again['id']}/run-again/")
    assert running.status_code == 400 and "stop it first" in running.json()["workload"][0]
