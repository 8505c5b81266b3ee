"""Fixtures of the teacher and console page tests: the workload tests' catalog and fake
backend, a signed-in client, and helpers that put workloads in a state without the flow."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from tests.workloads import conftest as workload_fixtures
from workloads.choices import State, WorkloadKind
from workloads.models import Workload

# The workload tests' fixtures, shared here: a local cluster with two GPUs, the catalog and a
# JupyterLab grant to class A (``catalog``) and a fake cluster backend (``backend``).
catalog = workload_fixtures.catalog
backend = workload_fixtures.backend


@pytest.fixture
def signed_in(client: Client) -> Callable[[Any], Client]:
    def as_user(user: Any) -> Client:
        client.force_login(user)
        return client

    return as_user


@pytest.fixture
def running(catalog: workload_fixtures.Catalog) -> Callable[..., Workload]:
    """``running(owner, tenant, minutes=…)``: a running environment of the catalog's grant,
    started ``minutes`` ago, charged with its flavor's GPUs (no backend involved)."""

    def make(owner: Any, tenant: Any, *, minutes: int = 30, flavor: Any = None) -> Workload:
        flavor = flavor or catalog.gpu
        started = timezone.now() - dt.timedelta(minutes=minutes)
        return Workload.objects.create(
            kind=WorkloadKind.NOTEBOOK,
            name="JupyterLab",
            owner=owner,
            tenant=tenant,
            cluster=catalog.cluster,
            template=catalog.jupyter,
            grant=catalog.grant,
            flavor=flavor,
            state=State.RUNNING,
            started_at=started,
            last_activity_at=started,
            deadline_at=started + dt.timedelta(hours=4),
            quota_request={"gpus": str(flavor.gpu_equivalents)},
            charged=True,
        )

    return make
