"""Shared fixtures: the people of every test.

Two classes in one department of one school. alice teaches class A, bob studies in class A,
charlie studies in class B: charlie is the outsider for everything of class A. dean
administers the department; root is a superuser.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.utils import translation
from rest_framework.test import APIClient

from tenants import services
from tenants.choices import Role, TenantKind
from tenants.models import Tenant


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _default_language() -> Iterator[None]:
    """Each test starts and ends in the default language: a request in Chinese, or a task
    that renders in its reader's language, leaves that language active on the thread
    (Django activates one per request and never resets it), and a later test would read
    Chinese where it expects English."""
    translation.deactivate()
    yield
    translation.deactivate()


@pytest.fixture(autouse=True)
def _tasks_in_process(request: pytest.FixtureRequest) -> Iterator[None]:
    """Tasks run in the test's process, even with REDIS_URL set, except in the flow tests
    marked ``celery_worker`` that drive a real worker."""
    from portal.celery import app

    if request.node.get_closest_marker("celery_worker"):
        yield
        return
    eager = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = eager


@pytest.fixture(autouse=True)
def _own_admission_flags(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test its own "admission pending" flags in the cache: a flag a test leaves behind
    (its session enqueued, never run) must not hold back the next test's admissions. (Not
    with a real worker: it reads the flags under their real names.)"""
    from workloads import tasks

    if request.node.get_closest_marker("celery_worker"):
        return
    monkeypatch.setattr(tasks, "ADMIT_PENDING", f"quanta:test-{uuid.uuid4().hex}:{{}}")


@pytest.fixture
def make_user(db: None) -> Callable[..., Any]:
    def make(username: str, **extra: Any) -> Any:
        extra.setdefault("email", f"{username}@uni.example")
        return get_user_model().objects.create_user(
            username=username, password="pw-" + username, **extra
        )

    return make


class World:
    """The tenants and people of a test, created through the service functions."""

    def __init__(self, make_user: Callable[..., Any]) -> None:
        self.root = make_user("root", is_superuser=True, is_staff=True)
        self.school = services.create_tenant(
            actor=self.root, kind=TenantKind.ORGANISATION, name="Uni", slug="uni"
        )
        self.dept = services.create_tenant(
            actor=self.root, kind=TenantKind.DEPARTMENT, name="CS", slug="cs", parent=self.school
        )
        self.other_dept = services.create_tenant(
            actor=self.root, kind=TenantKind.DEPARTMENT, name="EE", slug="ee", parent=self.school
        )
        self.class_a = services.create_tenant(
            actor=self.root, kind=TenantKind.CLASS, name="ML-101", slug="ml-101", parent=self.dept
        )
        self.class_b = services.create_tenant(
            actor=self.root, kind=TenantKind.CLASS, name="DL-201", slug="dl-201", parent=self.dept
        )
        self.alice = make_user("alice")
        self.bob = make_user("bob")
        self.charlie = make_user("charlie")
        self.dean = make_user("dean")
        self.add(self.class_a, self.alice, Role.TEACHER)
        self.add(self.class_a, self.bob, Role.STUDENT)
        self.add(self.class_b, self.charlie, Role.STUDENT)
        self.add(self.dept, self.dean, Role.ADMIN)

    def add(self, tenant: Tenant, user: Any, role: str) -> None:
        services.set_membership(actor=self.root, tenant=tenant, user=user, role=role)

    def quota(self, tenant: Tenant, **limits: Any) -> None:
        services.set_quota(actor=self.root, tenant=tenant, **limits)


@pytest.fixture
def world(make_user: Callable[..., Any]) -> World:
    return World(make_user)


@pytest.fixture
def api() -> Callable[[Any], APIClient]:
    """``api(user)``: an API client signed in as ``user`` (None: anonymous)."""

    def client_for(user: Any) -> APIClient:
        client = APIClient()
        if user is not None:
            client.force_authenticate(user)
        return client

    return client_for
