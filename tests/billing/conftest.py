"""The billing tests use the workload tests' catalog (a local cluster with two A100s, flavors
of a whole GPU and a half share, JupyterLab granted to class A), fake backend and ``run``."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from billing.models import PricePlan
from tests.workloads.conftest import backend, catalog, run  # noqa: F401 (fixtures)
from workloads import services as workload_services

T0 = dt.datetime(2025, 1, 6, 12, 0, tzinfo=dt.UTC)  # a Monday, noon


def plan(cluster: Any, start: dt.datetime = T0 - dt.timedelta(days=30), **prices: Any) -> PricePlan:
    """A plan version written directly (the service refuses the past; tests need one)."""
    prices.setdefault("gpu_hour", Decimal("2.0000"))
    return PricePlan.objects.create(cluster=cluster, effective_from=start, **prices)


@pytest.fixture
def priced(catalog: Any) -> PricePlan:  # noqa: F811 (the imported fixture)
    """The lab's prices: A100 3.00/h, other GPUs 2.00/h, CPU core 0.10/h, GiB 0.01/h."""
    return plan(
        catalog.cluster,
        gpu_hour_by_model={"A100": "3.0000"},
        cpu_core_hour=Decimal("0.1000"),
        memory_gib_hour=Decimal("0.0100"),
    )


@pytest.fixture
def launch(world: Any, catalog: Any, run: Any) -> Any:  # noqa: F811 (the imported fixtures)
    """Bob launches the catalog's JupyterLab in ``flavor``, as the services do."""

    def call(flavor: Any) -> Any:
        return run(
            workload_services.launch_environment,
            actor=world.bob,
            template=catalog.jupyter,
            flavor=flavor,
        )

    return call
