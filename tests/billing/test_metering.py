"""Metering from the real lifecycle: a workload that runs and stops gets one closed interval
with what it held, and is charged at its end."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from billing import metering, services
from billing.models import LedgerEntry, UsageInterval
from scheduling.backends.base import Phase
from workloads import reconcile
from workloads import services as workload_services
from workloads.choices import PayerKind, State
from workloads.lifecycle import transition

pytestmark = pytest.mark.django_db


def test_a_workload_that_runs_and_stops_gets_one_closed_interval_and_its_charge(
    world, catalog, backend, run, priced, launch
) -> None:
    w = launch(catalog.gpu)
    assert w.state == State.STARTING
    interval = UsageInterval.objects.get(workload=w)
    assert interval.ended_at is None and interval.account.tenant == world.class_a
    assert (interval.gpus, interval.gpu_share_milli, interval.gpu_model) == (1, 0, "A100")
    assert (interval.cpu_milli, interval.memory_mib) == (2000, 8192)

    backend.set(w.pk, Phase.RUNNING, last_activity=timezone.now())
    run(reconcile.reconcile, catalog.cluster)
    run(workload_services.stop, actor=world.bob, workload=w)
    w.refresh_from_db()
    assert w.state == State.STOPPED

    interval.refresh_from_db()
    assert UsageInterval.objects.filter(workload=w).count() == 1
    assert interval.ended_at is not None and interval.is_settled
    assert interval.settled_until == interval.ended_at
    entries = list(LedgerEntry.objects.filter(interval=interval))
    assert sum(e.amount for e in entries) == interval.charged
    assert all("bob" in e.description for e in entries)


def test_a_half_share_is_metered_as_the_share_admission_charged(
    world, catalog, backend, run, priced, launch
) -> None:
    w = launch(catalog.half)
    interval = UsageInterval.objects.get(workload=w)
    # 500 compute, 20000 of 40960 MiB memory (489): the larger, never a whole GPU.
    assert (interval.gpus, interval.gpu_share_milli) == (0, 500)


def test_a_grant_that_bills_the_person_charges_their_own_account(
    world, catalog, backend, run, priced
) -> None:
    catalog.grant.payer = PayerKind.PERSON
    catalog.grant.save()
    w = run(workload_services.launch_environment, actor=world.bob, template=catalog.jupyter)
    assert w.payer_user == world.bob and w.payer_tenant is None
    assert UsageInterval.objects.get(workload=w).account.user == world.bob


def test_a_lost_listener_call_is_repaired_by_the_tick(world, catalog, backend, run, priced) -> None:
    w = run(workload_services.launch_environment, actor=world.bob, template=catalog.jupyter)
    UsageInterval.objects.filter(workload=w).delete()  # as if the listener never ran
    assert metering.sync_intervals() == {"closed": 0, "opened": 1}
    run(transition, w, State.FAILED, reason="gone")
    interval = UsageInterval.objects.get(workload=w)
    assert interval.ended_at is not None and interval.is_settled


def test_settling_an_interval_still_open_charges_up_to_now(world, catalog, priced) -> None:
    now = timezone.now()
    start = now - dt.timedelta(hours=2)
    account = services.account_for_tenant(world.class_a)
    UsageInterval.objects.create(
        account=account,
        cluster=catalog.cluster,
        started_at=start,
        settled_until=start,
        cpu_milli=1000,
        workload_name="nb",
        owner_name="bob",
    )
    services.settle(now)
    assert sum(e.amount for e in LedgerEntry.objects.all()) == Decimal("0.200000")  # 2 h × 0.10
