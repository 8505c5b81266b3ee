"""The teacher pages: the classes list, a class's dashboard, stopping, the roster."""

from __future__ import annotations

from decimal import Decimal

import pytest

from core.models import AuditEvent
from scheduling.backends.base import Phase
from tenants.models import Membership, MemberUsage
from workloads import reconcile, services
from workloads.choices import State

pytestmark = pytest.mark.django_db


def test_a_teacher_sees_her_classes_with_members_and_what_runs(
    world, catalog, running, signed_in
) -> None:
    running(world.bob, world.class_a, minutes=60)
    page = signed_in(world.alice).get("/teaching/").content.decode()
    assert "ML-101" in page and "DL-201" not in page
    row = page[page.index("ML-101") :]
    # 2 members (alice, bob), 1 environment running, 1 GPU for an hour so far.
    assert '<td class="num">2</td><td class="num">1</td><td class="num">1.0</td>' in row


def test_the_dashboard_shows_who_runs_what_idle_and_time_left(
    world, catalog, running, signed_in
) -> None:
    running(world.bob, world.class_a, minutes=90)
    page = signed_in(world.alice).get("/teaching/ml-101/").content.decode()
    sessions = page[page.index("Running now") : page.index("Members and GPU-hours")]
    assert "bob" in sessions and "JupyterLab" in sessions and "1 GPU" in sessions
    assert 'data-state="Running"' in sessions
    assert "90 minutes" in sessions  # idle since it started: no activity reported
    assert "149 minutes" in sessions or "150 minutes" in sessions  # 4 h deadline, 90 min gone


def test_gpu_hours_per_student_add_the_running_session_to_what_was_used(
    world, catalog, running, signed_in
) -> None:
    MemberUsage.objects.create(tenant=world.class_a, user=world.bob, used_gpu_hours=Decimal("2.5"))
    running(world.bob, world.class_a, minutes=60)
    page = signed_in(world.alice).get("/teaching/ml-101/").content.decode()
    roster = page[page.index("Members and GPU-hours") :]
    bob = roster[roster.index("bob") :]
    assert '<td class="num">3.50</td>' in bob[:400]


def test_alice_stops_bobs_session_from_the_dashboard(
    world, catalog, backend, signed_in, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        workload = services.launch_environment(actor=world.bob, template=catalog.jupyter)
    backend.set(workload.pk, Phase.RUNNING)
    with django_capture_on_commit_callbacks(execute=True):
        reconcile.reconcile(catalog.cluster)
    client = signed_in(world.alice)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/teaching/ml-101/sessions/{workload.pk}/stop/", follow=True)
    assert response.status_code == 200 and "Stopping JupyterLab of bob" in response.content.decode()
    workload.refresh_from_db()
    assert workload.state == State.STOPPED and backend.stops == [str(workload.pk)]
    assert workload.events.filter(to_state=State.STOPPING, actor=world.alice).exists()


def test_charlie_gets_404_on_class_a_dashboard_and_on_stopping(
    world, catalog, running, signed_in
) -> None:
    workload = running(world.bob, world.class_a)
    client = signed_in(world.charlie)
    assert client.get("/teaching/ml-101/").status_code == 404
    assert client.post(f"/teaching/ml-101/sessions/{workload.pk}/stop/").status_code == 404
    assert client.get("/teaching/no-such-class/").status_code == 404
    workload.refresh_from_db()
    assert workload.state == State.RUNNING


def test_bob_a_student_is_refused_the_teacher_pages(world, catalog, running, signed_in) -> None:
    workload = running(world.bob, world.class_a)
    client = signed_in(world.bob)
    assert client.get("/teaching/").status_code == 403
    assert client.get("/teaching/ml-101/").status_code == 403
    assert client.get("/teaching/ml-101/grants/new/").status_code == 403
    assert client.get(f"/teaching/grants/{catalog.grant.pk}/edit/").status_code == 403
    assert client.post(f"/teaching/ml-101/sessions/{workload.pk}/stop/").status_code == 403
    assert client.post("/teaching/ml-101/members/add/", {"username": "charlie"}).status_code == 403
    assert "/teaching/" not in client.get("/").content.decode()  # no nav link either


def test_a_session_of_another_class_cannot_be_stopped_through_this_one(
    world, catalog, running, signed_in
) -> None:
    world.add(world.class_b, world.alice, "teacher")
    theirs = running(world.charlie, world.class_b)
    response = signed_in(world.alice).post(f"/teaching/ml-101/sessions/{theirs.pk}/stop/")
    assert response.status_code == 404


def test_alice_adds_and_removes_a_student_by_username(world, signed_in) -> None:
    client = signed_in(world.alice)
    response = client.post(
        "/teaching/ml-101/members/add/", {"username": "charlie", "role": "student"}
    )
    assert response.status_code == 302
    membership = Membership.objects.get(tenant=world.class_a, user=world.charlie)
    assert membership.role == "student"
    assert AuditEvent.objects.filter(action="membership.set", actor=world.alice).exists()
    assert "charlie" in client.get("/teaching/ml-101/").content.decode()

    client.post(f"/teaching/ml-101/members/{membership.pk}/remove/")
    assert not Membership.objects.filter(tenant=world.class_a, user=world.charlie).exists()
    assert AuditEvent.objects.filter(action="membership.remove", actor=world.alice).exists()


def test_a_teacher_cannot_make_teachers_or_add_unknown_people(world, signed_in) -> None:
    client = signed_in(world.alice)
    refused = client.post("/teaching/ml-101/members/add/", {"username": "dean", "role": "teacher"})
    assert refused.status_code == 403
    unknown = client.post(
        "/teaching/ml-101/members/add/", {"username": "nobody", "role": "student"}, follow=True
    )
    assert "There is no account “nobody”" in unknown.content.decode()
    assert Membership.objects.filter(tenant=world.class_a).count() == 2


def test_the_nav_shows_teaching_to_teachers(world, signed_in) -> None:
    page = signed_in(world.alice).get("/").content.decode()
    assert 'href="/teaching/"' in page and 'href="/console/' not in page
