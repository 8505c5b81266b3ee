"""Admission places with the cluster's resolved policy: fgd-mix on shared GPUs, else binpack
(the default "auto"; tests/scheduling/test_default_policy.py)."""

from __future__ import annotations

import pytest

from scheduling.models import GpuDevice
from workloads import admission, services


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("sharing", "expected"), [("fractional", "fgd-mix"), ("exclusive", "binpack")]
)
def test_admission_places_with_the_resolved_policy(
    world, catalog, backend, run, monkeypatch, sharing, expected
) -> None:
    GpuDevice.objects.filter(node=catalog.node).update(sharing=sharing)
    seen: list[str] = []
    real = admission.run_session

    def spy(snapshot):
        seen.append(snapshot.policy)
        return real(snapshot)

    monkeypatch.setattr(admission, "run_session", spy)
    workload = run(
        services.launch_environment, actor=world.bob, template=catalog.jupyter, flavor=catalog.half
    )
    assert workload.allocations.get().device is not None  # placed on a GPU
    assert seen == [expected]
