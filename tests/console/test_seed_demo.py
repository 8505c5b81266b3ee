"""The demo data that `make run` seeds: complete, idempotent, and its printed logins work."""

import re
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from billing.models import PricePlan
from scheduling.models import Cluster
from tenants.models import Membership, Tenant

pytestmark = pytest.mark.django_db


def seed(settings, tmp_path) -> str:
    settings.DATA_DIR = tmp_path
    settings.DEMO_PASSWORD = ""
    out = StringIO()
    call_command("seed_demo", "--url", "http://127.0.0.1:8123/", stdout=out)
    return out.getvalue()


def test_the_demo_has_a_university_two_departments_three_classes(settings, tmp_path) -> None:
    seed(settings, tmp_path)
    university = Tenant.objects.exclude(path__startswith=Tenant.objects.get(slug="sim-load").path)
    kinds = sorted(university.values_list("kind", flat=True))
    assert kinds == ["class"] * 3 + ["department"] * 2 + ["organisation"]
    # Beside it, the tenant of the background load on the simulated farm (docs: the demo).
    assert Tenant.objects.get(slug="sim-openb").parent.slug == "sim-load"
    users = get_user_model().objects
    assert users.filter(username__startswith="student").count() == 30
    assert Membership.objects.filter(role="student", tenant__in=university).count() == 30
    assert Membership.objects.get(user__username="teacher2").tenant.slug == "sp-210"
    assert all(t.term_start and t.term_end for t in Tenant.objects.filter(kind="class"))
    assert Tenant.objects.get(slug="ml-101").quota.gpus == 4
    # Every demo cluster has prices, so the App Center shows what a size costs.
    assert set(PricePlan.objects.values_list("cluster__slug", flat=True)) == set(
        Cluster.objects.values_list("slug", flat=True)
    )


def test_seeding_twice_adds_nothing_and_prints_the_same_password(settings, tmp_path) -> None:
    first = seed(settings, tmp_path)
    counts = (
        Tenant.objects.count(),
        Membership.objects.count(),
        get_user_model().objects.count(),
        PricePlan.objects.count(),
    )
    second = seed(settings, tmp_path)
    assert counts == (
        Tenant.objects.count(),
        Membership.objects.count(),
        get_user_model().objects.count(),
        PricePlan.objects.count(),
    )
    password = re.search(r"Password: (\S+)", first).group(1)
    assert f"Password: {password}" in second


def test_student1_signs_in_with_the_printed_password(settings, tmp_path, client) -> None:
    out = seed(settings, tmp_path)
    assert "http://127.0.0.1:8123/" in out
    password = re.search(r"Password: (\S+)", out).group(1)
    response = client.post("/login/", {"username": "student1", "password": password}, follow=True)
    assert b"ML-101" in response.content


def test_demo_password_from_the_environment_is_used(settings, tmp_path, client) -> None:
    settings.DATA_DIR = tmp_path
    settings.DEMO_PASSWORD = "campus-demo-2026"
    call_command("seed_demo", stdout=StringIO())
    assert client.login(username="teacher1", password="campus-demo-2026")
