"""/metrics carries each device's utilisation as last sampled, and nothing for a device
whose reading is missing or stale."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from scheduling.models import GpuSample
from tests.portal.test_metrics import scrape, value
from tests.workloads import conftest as workload_fixtures

pytestmark = pytest.mark.django_db

catalog = workload_fixtures.catalog


def test_each_device_has_its_last_utilisation_while_it_is_recent(world: Any, catalog: Any) -> None:
    now = timezone.now()
    first, second = catalog.gpus
    GpuSample.objects.create(device=first, time=now - dt.timedelta(minutes=1), utilisation=20)
    GpuSample.objects.create(device=first, time=now, utilisation=65, memory_used_mib=1024)
    GpuSample.objects.create(device=second, time=now - dt.timedelta(hours=1), utilisation=99)
    samples = scrape(Client())
    labels = {"cluster": "lab", "node": "gpu-host", "gpu": "0", "model": "A100"}
    assert value(samples, "quanta_gpu_utilisation_percent", **labels) == 65
    assert value(samples, "quanta_gpu_memory_used_bytes", **labels) == 1024 * 1024 * 1024
    stale = {**labels, "gpu": "1"}
    assert ("quanta_gpu_utilisation_percent", tuple(sorted(stale.items()))) not in samples
