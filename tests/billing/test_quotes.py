"""Cost before and after: the App Center shows each size's price per hour now, and the
workload page what it has cost so far (counted on in the browser while it runs)."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from billing.models import UsageInterval
from scheduling.backends.base import Phase
from workloads import reconcile
from workloads import services as workload_services
from workloads.costs import cost_so_far, hourly_prices

pytestmark = pytest.mark.django_db

# The lab's prices (conftest ``priced``): A100 3.00/h, CPU core 0.10/h, GiB 0.01/h. The GPU
# size is one A100, 2 cores and 8 GiB.
GPU_SIZE_PER_HOUR = Decimal("3.00") + 2 * Decimal("0.10") + 8 * Decimal("0.01")


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def price_cell(html: str, slug: str) -> str:
    row = re.search(rf'<tr data-flavor="{slug}">(.*?)</tr>', html, re.S)
    assert row, html[:2000]
    return row.group(1)


def test_the_app_center_shows_the_price_per_hour_of_each_size(world, catalog, priced) -> None:
    page = signed_in(world.bob).get(reverse("app-center")).content.decode()
    assert f"{GPU_SIZE_PER_HOUR:.2f}/hour" in price_cell(page, catalog.gpu.slug)
    prices = hourly_prices(catalog.cluster, [catalog.gpu, catalog.half], catalog.grant)
    # A share is priced as admission charges it: a fraction of the A100's price, never all.
    assert Decimal(0) < prices[catalog.half.pk] - Decimal("0.01") < prices[catalog.gpu.pk]
    assert prices[catalog.gpu.pk] == GPU_SIZE_PER_HOUR


def test_without_a_price_plan_no_price_is_shown(world, catalog) -> None:
    page = signed_in(world.bob).get(reverse("app-center")).content.decode()
    assert "/hour" not in price_cell(page, catalog.gpu.slug)
    assert hourly_prices(catalog.cluster, [catalog.gpu], catalog.grant) == {}


def test_the_workload_page_shows_the_cost_so_far_and_stops_counting_at_the_end(
    world, catalog, backend, run, priced, launch
) -> None:
    w = launch(catalog.gpu)
    backend.set(w.pk, Phase.RUNNING, last_activity=timezone.now())
    run(reconcile.reconcile, catalog.cluster)
    running = cost_so_far(w)
    assert running is not None and running.per_hour == GPU_SIZE_PER_HOUR
    page = signed_in(world.bob).get(reverse("workload", args=[w.pk])).content.decode()
    assert 'data-role="cost"' in page and f'data-per-hour="{GPU_SIZE_PER_HOUR:.6f}"' in page
    assert f"({GPU_SIZE_PER_HOUR:.2f}/hour)" in page

    run(workload_services.stop, actor=world.bob, workload=w)
    w.refresh_from_db()
    ended = cost_so_far(w)
    charged = sum(i.charged for i in UsageInterval.objects.filter(workload=w))
    assert ended is not None and ended.per_hour is None and ended.amount == charged
    page = signed_in(world.bob).get(reverse("workload", args=[w.pk])).content.decode()
    assert 'data-per-hour=""' in page and "/hour)" not in page


def test_the_teacher_sees_what_was_charged_to_the_class(
    world, catalog, backend, run, priced, launch
) -> None:
    teacher = signed_in(world.alice)
    url = reverse("teaching-class", args=[world.class_a.slug])
    assert 'data-role="spend"' not in teacher.get(url).content.decode()  # never billed yet
    w = launch(catalog.gpu)
    run(workload_services.stop, actor=world.bob, workload=w)
    charged = sum(i.charged for i in UsageInterval.objects.filter(workload=w))
    page = teacher.get(url).content.decode()
    assert f"{charged:.2f} charged to the class" in page
    # A student, of this class or another, gets no class page at all.
    for outsider in (world.bob, world.charlie):
        response = signed_in(outsider).get(url)
        assert response.status_code in (403, 404)
        assert "charged to the class" not in response.content.decode()
