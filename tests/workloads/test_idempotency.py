"""Idempotent creates: a client that retries a launch or a job submission with the same
Idempotency-Key gets the first answer and creates nothing more."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from core import idempotency
from core.models import IdempotencyKey
from tests.marks import requires_postgres
from workloads.models import Workload


def client_for(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def launch(client: APIClient, key: str | None, **body: Any) -> Any:
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key is not None else {}
    return client.post(
        "/api/v1/workloads/launch/", {"template": "jupyter", **body}, format="json", **headers
    )


@pytest.mark.django_db
def test_a_retried_launch_gets_the_first_answer_and_launches_once(world, catalog, backend) -> None:
    bob = client_for(world.bob)
    first = launch(bob, "7d3c-launch-1")
    again = launch(bob, "7d3c-launch-1")
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    assert Workload.objects.filter(owner=world.bob).count() == 1
    assert launch(bob, "7d3c-launch-2").status_code == 201  # a new key: a new launch
    assert Workload.objects.filter(owner=world.bob).count() == 2


@pytest.mark.django_db
def test_a_job_submission_is_idempotent_too(world, catalog, backend) -> None:
    bob = client_for(world.bob)
    body = {"tenant": "ml-101", "flavor": "small", "command": "python train.py"}
    headers = {"HTTP_IDEMPOTENCY_KEY": "job-42"}
    first = bob.post("/api/v1/workloads/jobs/", body, format="json", **headers)
    again = bob.post("/api/v1/workloads/jobs/", body, format="json", **headers)
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json()["id"] == first.json()["id"]
    assert Workload.objects.filter(owner=world.bob, kind="job").count() == 1


@pytest.mark.django_db
def test_the_same_key_for_another_request_is_refused(world, catalog, backend) -> None:
    bob = client_for(world.bob)
    assert launch(bob, "k1").status_code == 201
    reused = launch(bob, "k1", flavor="gpu")
    assert reused.status_code == 422 and "different request" in reused.json()["detail"]
    assert Workload.objects.filter(owner=world.bob).count() == 1


@pytest.mark.django_db
def test_a_refused_request_stores_nothing_so_a_fixed_retry_works(world, catalog, backend) -> None:
    bob = client_for(world.bob)
    refused = launch(bob, "k2", flavor="no-such-flavor")
    assert refused.status_code == 400 and not IdempotencyKey.objects.exists()
    assert launch(bob, "k2").status_code == 201


@pytest.mark.django_db
def test_keys_are_per_person(world, catalog, backend) -> None:
    assert launch(client_for(world.bob), "shared").status_code == 201
    charlie = launch(client_for(world.charlie), "shared")
    assert charlie.status_code == 400  # charlie's own request: not granted to his class
    assert "bob" not in charlie.content.decode()


@pytest.mark.django_db
def test_a_bad_key_is_a_400(world, catalog, backend) -> None:
    assert launch(client_for(world.bob), "x" * 300).status_code == 400
    assert launch(client_for(world.bob), "").status_code == 400
    assert not Workload.objects.exists()


@pytest.mark.django_db
def test_old_keys_are_purged(world) -> None:
    IdempotencyKey.objects.create(
        user=world.bob, key="old", scope="POST /x", fingerprint="0", status=201, response={}
    )
    later = timezone.now() + idempotency.KEEP * 2
    assert idempotency.purge(now=later) == 1


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_simultaneous_retries_with_one_key_launch_once(world, catalog, backend) -> None:
    catalog.grant.member_limit = 10
    catalog.grant.save()
    start = threading.Barrier(8)
    answers: list[Any] = []

    def retry() -> None:
        try:
            start.wait()
            answers.append(launch(client_for(world.bob), "burst-1"))
        finally:
            connection.close()

    threads = [threading.Thread(target=retry) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert [a.status_code for a in answers] == [201] * 8
    assert len({a.json()["id"] for a in answers}) == 1
    assert Workload.objects.filter(owner=world.bob).count() == 1
