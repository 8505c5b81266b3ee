"""The living demo in the browser: a portal of its own with the background load on
(DEMO_LOAD=true, as `make run` has it), whose admin home page shows a GPU chart that is not
flat within a minute of the portal answering; a student launches a GPU size on the simulated
farm and sees it Running; each role's home page shows its dashboard, the teacher's with the
simulated sessions the load starts for a few demo students.

The session's ``portal`` runs without the load (its tests need a quiet cluster); this one is
started here, seeded the same way."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import VIEWPORT, Portal, running_portal
from tests.browser.test_screenshots import shoot

MINUTE = 60.0


@pytest.fixture(scope="module")
def demo(chromium: Browser) -> Iterator[Portal]:
    with running_portal({"DEMO_LOAD": "true", "DEMO_LOAD_SECONDS": "2"}) as portal:
        yield portal


def signed_in(chromium: Browser, portal: Portal, username: str) -> Page:
    context = chromium.new_context(
        base_url=portal.url, viewport=VIEWPORT, locale="en-US", timezone_id="UTC"
    )
    context.set_default_timeout(15_000)
    page = context.new_page()
    page.goto("/login/?next=/")
    page.fill("#id_username", username)
    page.fill("#id_password", portal.password)
    page.locator("main form button[type=submit]").click()
    page.wait_for_url(lambda url: "/login/" not in url)
    return page


def test_the_admins_gpu_chart_is_not_flat_within_a_minute(
    chromium: Browser, demo: Portal, screenshots: Path
) -> None:
    admin = signed_in(chromium, demo, "admin")
    values: list[float] = []
    while True:
        admin.goto("/")
        values = json.loads(admin.locator("#home-chart-sim").text_content() or "{}")["values"]
        if len(set(values)) > 1 and values[-1] > 0:
            print(f"\nthe farm's chart rose {time.monotonic() - demo.ready_at:.0f} s after start")
            break
        if time.monotonic() - demo.ready_at > MINUTE:
            pytest.fail(f"the simulated farm's chart is still flat after a minute: {values}")
        time.sleep(3)
    assert max(values) > 0
    # Chart.js drew it, and the dashboard's numbers agree that the farm is busy.
    expect(admin.locator('canvas[data-chart="home-chart-sim"]')).to_be_visible()
    farm = admin.locator('[data-dashboard="admin-health"] tr[data-cluster="sim"]')
    expect(farm).to_contain_text("simulated")
    expect(admin.locator('[data-dashboard="admin-waiting"]')).to_be_visible()
    if os.environ.get("QUANTA_SCREENSHOTS"):  # the README's picture: once the load has grown
        deadline = time.monotonic() + 2 * MINUTE
        while values[-1] < 10 and time.monotonic() < deadline:
            time.sleep(5)
            admin.goto("/")
            values = json.loads(admin.locator("#home-chart-sim").text_content() or "{}")["values"]
    shoot(admin, screenshots, "admin-home")


def test_a_student_runs_a_gpu_size_on_the_simulated_farm_beside_cpu_notebooks(
    chromium: Browser, demo: Portal
) -> None:
    student = signed_in(chromium, demo, "student3")
    student.goto("/apps/")
    expect(student.locator('section[data-template="jupyter-pytorch"]')).to_be_visible()
    card = student.locator('section[data-template="jupyter-sim"]')
    expect(card).to_contain_text("simulated")
    card.locator("select[name=flavor]").select_option(label="1 × 8 GiB vGPU, 4 CPU, 16 GiB")
    card.get_by_role("button", name="Launch").click()
    student.wait_for_url(re.compile(r"/workloads/[0-9a-f-]{36}/$"))
    pk = student.url.rstrip("/").rsplit("/", 1)[1]
    try:
        expect(student.locator("h1 [data-state]")).to_have_attribute(
            "data-state", "Running", timeout=60_000
        )
        student.goto("/")
        row = student.locator(f'[data-dashboard="student-sessions"] tr[data-workload="{pk}"]')
        expect(row).to_contain_text("Running")
        expect(row).to_contain_text("simulated")
        expect(row).to_contain_text(re.compile(r"\d+ minutes"))  # time left
    finally:
        demo.stop(pk)


def test_each_roles_home_page_shows_its_dashboard(chromium: Browser, demo: Portal) -> None:
    student = signed_in(chromium, demo, "student1")
    for name in ("student-sessions", "student-limits", "student-jobs"):
        expect(student.locator(f'[data-dashboard="{name}"]')).to_be_visible()
    expect(student.locator('[data-dashboard="student-limits"]')).to_contain_text("ML-101")
    expect(student.locator('[data-dashboard="teacher-classes"]')).to_have_count(0)
    expect(student.locator('[data-dashboard="admin-health"]')).to_have_count(0)

    teacher = signed_in(chromium, demo, "teacher1")
    classes = teacher.locator('[data-dashboard="teacher-classes"]')
    expect(classes).to_contain_text("ML-101")
    expect(classes).to_contain_text("DL-201")
    expect(classes).not_to_contain_text("SP-210")  # teacher2's
    # The load has demo students of ML-101 and DL-201 run simulated GPU sessions.
    running = teacher.locator('[data-dashboard="teacher-running"]')
    expect(running.locator("tbody tr", has_text="simulated").first).to_be_visible()
    expect(teacher.locator('[data-dashboard="admin-health"]')).to_have_count(0)

    admin = signed_in(chromium, demo, "admin")
    for name in ("admin-health", "admin-waiting"):
        expect(admin.locator(f'[data-dashboard="{name}"]')).to_be_visible()
    expect(admin.locator('[data-dashboard="admin-health"]')).to_contain_text("This host")
