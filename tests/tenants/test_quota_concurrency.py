"""Concurrent admissions on PostgreSQL never hand out more than the quota."""

import threading
from decimal import Decimal

import pytest
from django.db import connection, transaction

from tenants import services
from tenants.quota import Request
from tests.marks import requires_postgres


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_twenty_simultaneous_reservations_against_five_gpus_admit_exactly_five(world) -> None:
    world.quota(world.dept, gpus=Decimal(5))
    start = threading.Barrier(20)
    admitted: list[bool] = []

    def launch() -> None:
        try:
            start.wait()
            with transaction.atomic():
                services.reserve(
                    tenant=world.class_a, user=world.bob, request=Request(gpus=Decimal(1))
                )
            admitted.append(True)
        except services.QuotaExceeded:
            admitted.append(False)
        finally:
            connection.close()

    threads = [threading.Thread(target=launch) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert admitted.count(True) == 5 and len(admitted) == 20
    for tenant in (world.school, world.dept, world.class_a):
        tenant.quota.refresh_from_db()
        assert tenant.quota.used_gpus == 5
