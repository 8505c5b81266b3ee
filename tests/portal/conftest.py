"""Class A with everything it owns, for the tests that attack the API from outside it: the
schema walk of every role (test_fuzz.py) and the tenant isolation walk (test_isolation.py).

Besides the people of tests/conftest.py: tara is a TA of class B, tom teaches class B. Class
A has a grant, a job of bob's with a log, his membership and his token; the names and emails
of its people are the "secrets" no outsider may read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from scheduling.backends import registry
from tenants import services as tenant_services
from tenants.choices import Role
from tests.workloads.conftest import Catalog
from tests.workloads.fakes import FakeBackend
from workloads import services as workload_services
from workloads.models import Workload


@pytest.fixture
def fake_backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeBackend]:
    fake = FakeBackend()
    registry.forget()
    monkeypatch.setattr(registry, "_build", lambda cluster: fake)
    yield fake
    registry.forget()


class ClassA:
    """Class A's objects, and the outsiders who must not see them."""

    def __init__(self, world: Any, make_user: Any) -> None:
        self.world = world
        self.catalog = Catalog(world)
        world.alice.display_name = "Alice Aardvark"
        world.alice.email = "alice.secret@ml101.example"
        world.alice.save()
        world.bob.display_name = "Bob Bobbington"
        world.bob.email = "bob.secret@ml101.example"
        world.bob.student_number = "s9990001"
        world.bob.save()
        self.tara = make_user("tara")  # TA of class B
        self.tom = make_user("tom")  # teaches class B
        world.add(world.class_b, self.tara, Role.TA)
        world.add(world.class_b, self.tom, Role.TEACHER)
        self.job: Workload = workload_services.submit_job(
            actor=world.bob,
            tenant=world.class_a,
            flavor=self.catalog.small,
            command=["python", "train_ml101.py"],
            env={"SECRET_PROJECT": "ml101-only"},
            name="bob-ml101-job",
        )
        self.token, _secret = tenant_services.create_api_token(
            actor=world.bob, name="bob-ml101-token"
        )
        self.membership = world.bob.memberships.get(tenant=world.class_a)

    def secrets(self) -> list[str]:
        """Strings that only class A's people (and those above it) may read."""
        w = self.world
        return [
            "alice.secret@ml101.example",
            "bob.secret@ml101.example",
            "Alice Aardvark",
            "Bob Bobbington",
            "s9990001",
            "bob-ml101-job",
            "train_ml101.py",
            "ml101-only",
            "bob-ml101-token",
            str(self.job.pk),
            w.class_a.name,
            w.class_a.slug,
        ]


@pytest.fixture
def class_a(world: Any, make_user: Any, fake_backend: FakeBackend) -> ClassA:
    return ClassA(world, make_user)
