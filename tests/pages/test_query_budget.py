"""The main teacher and console pages run a fixed number of queries, however many rows."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from core.audit import record
from scheduling.models import Allocation, Cluster, GpuDevice, Node, Queue
from tenants import services as tenant_services
from tenants.choices import Role, TenantKind
from tenants.models import MemberUsage
from workloads.models import AppTemplate, Flavor, Grant, Workload

pytestmark = pytest.mark.django_db

# A modest ceiling; the real test is that 10 rows cost what 3 rows cost.
BUDGET = 15
serial = itertools.count()


def a_class_session(world, catalog, running, make_user) -> None:
    student = make_user(f"student{next(serial)}")
    world.add(world.class_a, student, Role.STUDENT)
    MemberUsage.objects.create(tenant=world.class_a, user=student, used_gpu_hours=1)
    running(student, world.class_a)
    grant = Grant.objects.create(template=catalog.jupyter, tenant=world.class_a)
    grant.flavors.set([catalog.small])


def a_class(world, catalog, running, make_user) -> None:
    n = next(serial)
    tenant = tenant_services.create_tenant(
        actor=world.root, kind=TenantKind.CLASS, name=f"C{n}", slug=f"c{n}", parent=world.dept
    )
    running(make_user(f"student{n}"), tenant)


def a_host(world, catalog, running, make_user) -> None:
    node = Node.objects.create(
        cluster=catalog.cluster, name=f"host{next(serial)}", cpu_milli=8000, memory_mib=8192
    )
    for i in range(2):
        device = GpuDevice.objects.create(node=node, index=i, model="A100", memory_mib=40960)
        Allocation.objects.create(
            workload=running(world.bob, world.class_a), node=node, device=device, gpu_milli=500
        )


def a_cluster(world, catalog, running, make_user) -> None:
    n = next(serial)
    cluster = Cluster.objects.create(name=f"K{n}", slug=f"k{n}", backend="simulated")
    node = Node.objects.create(cluster=cluster, name=f"n{n}", cpu_milli=8000, memory_mib=8192)
    GpuDevice.objects.create(node=node, index=0, model=f"M{n}", memory_mib=16384)
    Workload.objects.filter(pk=running(world.bob, world.class_a).pk).update(cluster=cluster)


def a_queue(world, catalog, running, make_user) -> None:
    queue = Queue.objects.create(cluster=catalog.cluster, name=f"q{next(serial)}")
    queue.tenants.set([world.class_a, world.class_b])


def a_catalog_entry(world, catalog, running, make_user) -> None:
    n = next(serial)
    flavor = Flavor.objects.create(name=f"f{n}", slug=f"f{n}", cpu_milli=1000, memory_mib=1024)
    template = AppTemplate.objects.create(
        name=f"T{n}", slug=f"t{n}", kind="jupyter", image=catalog.image, default_flavor=flavor
    )
    template.allowed_flavors.set([flavor, catalog.small])


def an_audit_event(world, catalog, running, make_user) -> None:
    record("test.event", actor=world.alice, target=world.class_a, tenant=world.class_a)


PAGES = [
    ("/teaching/ml-101/", "alice", a_class_session),
    ("/teaching/", "dean", a_class),
    ("/console/", "root", a_cluster),
    ("/console/hosts/", "root", a_host),
    ("/console/tenants/", "dean", a_class),
    ("/console/queues/", "root", a_queue),
    ("/console/catalog/", "root", a_catalog_entry),
    ("/console/audit/", "dean", an_audit_event),
]


@pytest.mark.parametrize(("url", "who", "add_row"), PAGES, ids=[p[0] for p in PAGES])
def test_the_page_costs_the_same_queries_for_3_and_10_rows(
    world,
    catalog,
    running,
    make_user,
    signed_in,
    django_assert_max_num_queries,
    url: str,
    who: str,
    add_row: Callable[..., Any],
) -> None:
    client = signed_in(getattr(world, who))
    client.get(url)  # the first request of a session fills caches; count the ones after it
    counts = []
    for rows in (3, 7):  # 3 rows, then 10
        for _ in range(rows):
            add_row(world, catalog, running, make_user)
        with django_assert_max_num_queries(BUDGET) as queries:
            response = client.get(url)
        assert response.status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1], counts
