"""The home page is a dashboard for each role: a student's own work, quota and budget; a
teacher's classes (who runs what, idle sessions, GPU-hours this week); an admin's cluster
health, waiting work and stranded GPUs. Each reads only what its reader may see."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from console.home import week_start
from scheduling.models import Allocation
from workloads.choices import State, WorkloadKind
from workloads.models import Workload

pytestmark = pytest.mark.django_db


def section(page: str, name: str) -> str:
    """The HTML of one dashboard section ("" when the page has none)."""
    match = re.search(rf'<section[^>]*data-dashboard="{name}".*?</section>', page, re.S)
    return match.group(0) if match else ""


def job(owner, tenant, catalog, *, state=State.QUEUED, name="train") -> Workload:
    return Workload.objects.create(
        kind=WorkloadKind.JOB,
        name=name,
        owner=owner,
        tenant=tenant,
        cluster=catalog.cluster,
        grant=catalog.grant,
        flavor=catalog.gpu,
        state=state,
        reason="waiting for a free GPU",
        command=["python", "train.py"],
    )


def test_a_student_sees_their_own_work_time_left_quota_and_recent_jobs(
    world, catalog, running, signed_in
) -> None:
    world.quota(world.class_a, member_gpus=2, member_gpu_hours_per_term=40)
    mine = running(world.bob, world.class_a)
    theirs = running(world.charlie, world.class_b)
    job(world.bob, world.class_a, catalog, name="resnet")
    page = signed_in(world.bob).get("/").content.decode()
    sessions = section(page, "student-sessions")
    assert str(mine.pk) in sessions and str(theirs.pk) not in sessions
    assert re.search(r"(209|210) minutes", sessions)  # 4 hours from a start 30 minutes ago
    limits = section(page, "student-limits")
    assert "ML-101" in limits and "DL-201" not in limits
    assert "40" in limits  # GPU-hours per term
    jobs = section(page, "student-jobs")
    assert "resnet" in jobs and "Queued" in jobs and "waiting for a free GPU" in jobs
    assert not section(page, "teacher-classes") and not section(page, "admin-health")


def test_a_teacher_sees_their_classes_who_runs_what_and_idle_sessions(
    world, catalog, running, signed_in
) -> None:
    busy = running(world.bob, world.class_a, minutes=90)
    busy.last_activity_at = timezone.now() - dt.timedelta(minutes=45)
    busy.save()
    elsewhere = running(world.charlie, world.class_b)
    page = signed_in(world.alice).get("/").content.decode()
    classes = section(page, "teacher-classes")
    assert "ML-101" in classes and "DL-201" not in classes
    assert 'href="/teaching/ml-101/"' in classes
    week = re.search(r'data-role="week-gpu-hours">([\d.]+)<', classes).group(1)
    since = max(busy.started_at, week_start(timezone.now()))
    hours = (timezone.now() - since).total_seconds() / 3600  # one GPU held since then
    assert float(week) == pytest.approx(hours, abs=0.02)
    now = section(page, "teacher-running")
    assert "bob" in now and "charlie" not in now and str(elsewhere.pk) not in page
    assert 'data-role="idle"' in now and "45 minutes" in now


def test_an_outsider_sees_no_class_or_cluster_section(world, catalog, running, signed_in) -> None:
    running(world.bob, world.class_a)
    page = signed_in(world.charlie).get("/").content.decode()
    assert "bob" not in page
    for name in ("teacher-classes", "teacher-running", "admin-health", "admin-waiting"):
        assert not section(page, name), name


def test_an_admin_sees_cluster_health_waiting_work_and_stranded_gpus(
    world, catalog, running, signed_in
) -> None:
    holder = running(world.bob, world.class_a, flavor=catalog.half)
    device = catalog.gpus[0]
    Allocation.objects.create(
        workload=holder, node=device.node, device=device, gpu_milli=500, gpu_memory_mib=1000
    )
    for _ in range(3):
        job(world.charlie, world.class_b, catalog)
    page = signed_in(world.root).get("/").content.decode()
    health = section(page, "admin-health")
    assert 'data-role="stranded-total">0.50<' in health  # half of one GPU left over
    assert 'data-role="waiting-total">3<' in health
    assert "0.50 / 2" in health
    waiting = section(page, "admin-waiting")
    assert "waiting for a free GPU" in waiting and ">3<" in waiting and "DL-201" in waiting
    data = json.loads(
        re.search(
            r'<script id="home-chart-lab" type="application/json">(.*?)</script>', page, re.S
        ).group(1)
    )
    assert data["capacity"] == 2 and data["values"][-1] == 0.5
    assert "js/charts.js" in page
    # A portal younger than the window: the chart starts just before its first work, so a
    # fresh demo shows its load rising rather than a quarter of an hour of nothing.
    Workload.objects.filter(started_at__isnull=False).update(
        started_at=timezone.now() - dt.timedelta(seconds=30)
    )
    page = signed_in(world.root).get("/").content.decode()
    titles = re.findall(r"GPUs allocated on [^<]*", page)
    assert titles == ["GPUs allocated on Lab, last 2 minutes"]
    data = json.loads(
        re.search(
            r'<script id="home-chart-lab" type="application/json">(.*?)</script>', page, re.S
        ).group(1)
    )
    assert len(data["values"]) <= 2 * 12 + 1 and data["values"][-1] == 0.5
    an_hour_ago = timezone.now() - dt.timedelta(hours=1)
    Workload.objects.filter(pk=holder.pk).update(created_at=an_hour_ago, started_at=an_hour_ago)
    page = signed_in(world.root).get("/").content.decode()
    assert "last 15 minutes" in page


def test_the_home_page_reads_a_fixed_number_of_queries(world, catalog, running, signed_in) -> None:
    def count(user) -> int:
        client = signed_in(user)
        client.get("/")  # a first request after sign-in writes the session, once
        with CaptureQueriesContext(connection) as queries:
            assert client.get("/").status_code == 200
        return len(queries)

    running(world.bob, world.class_a)
    job(world.bob, world.class_a, catalog)
    few = {u.username: count(u) for u in (world.bob, world.alice, world.root)}
    for _ in range(5):
        running(world.bob, world.class_a)
        job(world.bob, world.class_a, catalog)
    many = {u.username: count(u) for u in (world.bob, world.alice, world.root)}
    assert many == few  # more sessions, jobs and waiting work: the same queries
    assert max(many.values()) <= 30
