"""Pictures of the main pages for the README (runs last: see conftest).

QUANTA_SCREENSHOTS=docs/screenshots make browser refreshes docs/screenshots/; otherwise the
pictures go to a temporary directory, and this test only checks that every page renders.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

if TYPE_CHECKING:
    from tests.browser.conftest import Portal, SignIn

MAX_HEIGHT = 2400  # px: a full-page picture is cut here


def shoot(page: Page, directory: Path, name: str, *, full_page: bool = False) -> None:
    page.wait_for_load_state("networkidle")
    path = directory / f"{name}.png"
    if full_page:
        width = page.viewport_size["width"] if page.viewport_size else 1280
        height = min(page.evaluate("document.documentElement.scrollHeight"), MAX_HEIGHT)
        page.screenshot(
            path=path, full_page=True, clip={"x": 0, "y": 0, "width": width, "height": height}
        )
    else:
        page.screenshot(path=path)
    assert path.stat().st_size > 10_000, f"{path} looks empty"


def test_the_main_pages_are_photographed_for_the_docs(
    portal: Portal, sign_in: SignIn, screenshots: Path
) -> None:
    # The App Center of a student with nothing running: every size starts now.
    student = sign_in("student5")
    shoot(student, screenshots, "student-app-center")
    phone = sign_in("student5", viewport={"width": 390, "height": 844})
    shoot(phone, screenshots, "student-app-center-phone", full_page=True)
    student.locator("select#language").select_option(label="简体中文")
    expect(student.locator("html")).to_have_attribute("lang", "zh-hans")
    shoot(student, screenshots, "student-app-center-zh")

    # Something to show elsewhere: another student's vGPU notebook, running.
    owner = sign_in("student4")
    card = owner.locator('section[data-template="jupyter-pytorch"]')
    card.locator("select[name=flavor]").select_option(label="1 × 8 GiB vGPU, 4 CPU, 16 GiB")
    card.get_by_role("button", name="Launch").click()
    owner.wait_for_url(re.compile(r"/workloads/[0-9a-f-]{36}/$"))
    pk = owner.url.rstrip("/").rsplit("/", 1)[1]
    try:
        expect(owner.locator("h1 [data-state]")).to_have_text("Running", timeout=60_000)
        shoot(owner, screenshots, "workload-detail")
        owner.goto("/workloads/")
        expect(owner.locator(f'tr[data-workload-id="{pk}"] [data-state]')).to_have_text("Running")
        shoot(owner, screenshots, "student-workloads")
        owner.goto("/")
        shoot(owner, screenshots, "student-home")

        teacher = sign_in("teacher1", next="/teaching/ml-101/")
        expect(teacher.locator("h1")).to_contain_text("ML-101")
        shoot(teacher, screenshots, "teacher-class-dashboard")
        teacher.goto("/")
        shoot(teacher, screenshots, "teacher-home")

        admin = sign_in("admin", next="/console/")
        shoot(admin, screenshots, "admin-console")
        admin.goto("/")  # photographed in test_demo.py, where the demo load fills its chart
        expect(admin.locator('[data-dashboard="admin-health"]')).to_be_visible()
        admin.goto("/console/hosts/?cluster=local")
        expect(admin.locator(f'.device a[href="/workloads/{pk}/"]')).to_have_count(1)
        shoot(admin, screenshots, "admin-hosts")
        admin.goto("/whatif/")
        shoot(admin, screenshots, "admin-whatif")

        owner.locator("select#language").select_option(label="简体中文")
        expect(owner.locator("html")).to_have_attribute("lang", "zh-hans")
        shoot(owner, screenshots, "student-workloads-zh")
    finally:
        portal.stop(pk)
