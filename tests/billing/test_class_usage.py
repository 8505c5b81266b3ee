"""A class's usage per student as CSV, for its teachers (billing/class_usage.py)."""

from __future__ import annotations

import csv
import datetime as dt
import io
from decimal import Decimal
from typing import Any

import pytest

from billing import services
from billing.choices import EntryKind
from billing.models import LedgerEntry, UsageInterval
from tenants.choices import Role

pytestmark = pytest.mark.django_db
UTC = dt.UTC


def at(d: int, h: int = 0) -> dt.datetime:
    return dt.datetime(2025, 1, d, h, tzinfo=UTC)


def interval(catalog: Any, owner: Any, tenant: Any, start: Any, end: Any, **held: Any) -> Any:
    return UsageInterval.objects.create(
        account=services.account_for_tenant(tenant), cluster=catalog.cluster, owner=owner,
        tenant=tenant, started_at=start, ended_at=end, settled_until=start, gpu_model="A100",
        workload_name="nb", owner_name=owner.username, flavor_name="1 x A100", **held,
    )  # fmt: skip


@pytest.fixture
def january(world, catalog, priced, make_user, settings) -> dict[str, Any]:
    """In class A: bob a whole A100 for 2 h on the 10th and 22:00 on the 31st into February;
    dana half a GPU for 4 h on the 12th. charlie (class B) a GPU too."""
    settings.TIME_ZONE = "UTC"
    dana = make_user("dana")
    world.add(world.class_a, dana, Role.STUDENT)
    interval(catalog, world.bob, world.class_a, at(10, 10), at(10, 12), gpus=1)
    interval(
        catalog, world.bob, world.class_a, at(31, 22), dt.datetime(2025, 2, 1, 2, tzinfo=UTC),
        gpus=1,
    )  # fmt: skip
    interval(catalog, dana, world.class_a, at(12, 8), at(12, 12), gpu_share_milli=500)
    interval(catalog, world.charlie, world.class_b, at(10, 10), at(10, 12), gpus=1)
    services.settle(dt.datetime(2025, 2, 2, tzinfo=UTC))
    return {"dana": dana}


def rows(response: Any) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(response.content.decode())))


URL = "/billing/classes/ml-101/usage.csv?from=2025-01-01&until=2025-01-31"


def test_the_teacher_downloads_hours_gpu_hours_and_charges_per_student(
    world, january, client
) -> None:
    client.force_login(world.alice)
    response = client.get(URL)
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert "usage-ml-101-20250101-20250131.csv" in response["Content-Disposition"]
    found = {row["person"]: row for row in rows(response)}
    assert set(found) == {"bob", "dana"}  # charlie is in class B
    bob, dana = found["bob"], found["dana"]
    # bob: 2 h on the 10th and the 2 h of the 31st before midnight; February's 2 h are out.
    assert (bob["workloads"], bob["hours"], bob["gpu_hours"]) == ("0", "4.000", "4.000")
    assert (dana["hours"], dana["gpu_hours"]) == ("4.000", "2.000")
    charged = sum(
        e.amount
        for e in LedgerEntry.objects.filter(
            kind=EntryKind.CHARGE,
            interval__owner=world.bob,
            interval__tenant=world.class_a,
            period_start__lt=dt.datetime(2025, 2, 1, tzinfo=UTC),
        )
    )
    assert charged > 0 and Decimal(bob["amount"]) == charged


@pytest.mark.parametrize("who", ["bob", "charlie"])
def test_a_student_or_an_outsider_cannot_export_the_class(world, january, client, who) -> None:
    client.force_login(getattr(world, who))
    assert client.get(URL).status_code == 404


def test_a_date_that_cannot_be_read_is_a_400_that_says_which(world, january, client) -> None:
    client.force_login(world.alice)
    bad = client.get("/billing/classes/ml-101/usage.csv?from=2025-13-01")
    assert bad.status_code == 400 and "from" in bad.content.decode()
    backwards = client.get("/billing/classes/ml-101/usage.csv?from=2025-02-01&until=2025-01-01")
    assert backwards.status_code == 400 and "until" in backwards.content.decode()
