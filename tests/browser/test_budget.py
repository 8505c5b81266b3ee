"""Budgets in the browser (the demo gives ML-101 500 points a month, then CPU-only sizes):
a student sees the price per hour and what is left of the class's budget before launching,
and the cost after; the teacher sees the class's cost and budget on the class dashboard.
(tests/browser/test_cost.py follows the cost on the workload page while it runs; here the
cost is what ends up charged to the class.)"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from playwright.sync_api import expect

if TYPE_CHECKING:
    from tests.browser.conftest import Portal, SignIn

MONEY = r"-?\d+\.\d\d"


def test_a_student_sees_the_budget_before_and_the_teacher_the_cost_and_budget_after(
    portal: Portal, sign_in: SignIn
) -> None:
    budget = next(
        b
        for b in portal.call("GET", "/billing/budgets/?tenant__slug=ml-101")["results"]
        if b["is_active"]
    )
    assert budget["policy"] == "downgrade" and budget["status"]["state"] != "exhausted"

    # Before: the price of each size and what is left of ML-101's budget, beside them.
    student = sign_in("student1")
    card = student.locator('section[data-template="jupyter-pytorch"]')
    expect(card.locator('tr[data-flavor="cpu-small"] [data-role="price"]')).to_have_text(
        re.compile(rf"^{MONEY}/hour$")
    )
    expect(card.locator('[data-role="budget"]')).to_contain_text("Budget of ML-101")
    expect(card.locator('[data-role="budget-remaining"]')).to_have_text(re.compile(rf"^{MONEY}$"))
    expect(card.locator('tr[data-flavor="vgpu-8g"]')).not_to_have_attribute("data-refused", "true")

    # After: the environment ran and was charged to the class; its page shows the cost.
    card.locator("select[name=flavor]").select_option(label="½ CPU, 1 GiB")
    card.get_by_role("button", name="Launch").click()
    student.wait_for_url(re.compile(r"/workloads/[0-9a-f-]{36}/$"))
    pk = student.url.rstrip("/").rsplit("/", 1)[1]
    try:
        expect(student.locator("h1 [data-state]")).to_have_attribute(
            "data-state", "Running", timeout=90_000
        )
    finally:
        portal.stop(pk)
        portal.wait_for(pk, "Stopped", timeout=60)
    student.reload()
    expect(student.locator('[data-role="cost"]')).to_have_text(re.compile(rf"^{MONEY}$"))

    # The teacher: what was charged to the class, and the budget with its bar and policy.
    teacher = sign_in("teacher1", next="/teaching/ml-101/")
    expect(teacher.locator('[data-role="spend"]')).to_have_text(
        re.compile(rf"^{MONEY} charged to the class$")
    )
    shown = teacher.locator('section [data-role="budget"]')
    expect(shown.locator('[data-role="budget-used"]')).to_have_text(
        re.compile(rf"^{MONEY} of 500\.00 spent \(\d+ %\)$")
    )
    expect(shown.locator('[data-role="budget-remaining"]')).to_have_text(
        re.compile(rf"^{MONEY} left$")
    )
    expect(shown.locator("meter")).to_be_visible()
    expect(teacher.locator('[data-role="budget-policy"]')).to_have_text(
        "When used up: Only CPU-only sizes"
    )
