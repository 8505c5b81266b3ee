"""A student sees the price of a size before launching, and what the environment has cost
after (the demo's price plans: compute points per hour)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from playwright.sync_api import expect

if TYPE_CHECKING:
    from tests.browser.conftest import Portal, SignIn


def test_a_student_sees_the_price_before_and_the_cost_after(
    portal: Portal, sign_in: SignIn
) -> None:
    page = sign_in("student1")
    card = page.locator('section[data-template="jupyter-pytorch"]')
    price = card.locator('tr[data-flavor="cpu-small"] [data-role="price"]')
    expect(price).to_have_text(re.compile(r"^\d+\.\d\d/hour$"))
    card.locator("select[name=flavor]").select_option(label="½ CPU, 1 GiB")
    card.get_by_role("button", name="Launch").click()
    page.wait_for_url(re.compile(r"/workloads/[0-9a-f-]{36}/$"))
    pk = page.url.rstrip("/").rsplit("/", 1)[1]
    try:
        expect(page.locator("h1 [data-state]")).to_have_attribute(
            "data-state", "Running", timeout=90_000
        )
        page.reload()
        cost = page.locator('[data-role="cost"]')
        expect(cost).to_have_text(re.compile(r"^\d+\.\d\d$"))
        assert cost.get_attribute("data-per-hour"), "a running environment is counted on"
        expect(page.get_by_text(re.compile(r"\(\d+\.\d\d/hour\)"))).to_be_visible()
    finally:
        portal.stop(pk)
        portal.wait_for(pk, "Stopped", timeout=60)
    page.reload()
    expect(page.locator('[data-role="cost"]')).to_have_text(re.compile(r"^\d+\.\d\d$"))
    assert not page.locator('[data-role="cost"]').get_attribute("data-per-hour")
