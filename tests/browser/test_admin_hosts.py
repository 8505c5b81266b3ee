"""The hosts page shows a GPU share taken while an environment runs, and given back after."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from playwright.sync_api import expect

if TYPE_CHECKING:
    from tests.browser.conftest import SignIn

HOSTS = "/console/hosts/?cluster=local"


def test_an_admin_sees_a_vgpu_share_allocated_while_it_runs_and_free_after_stop(
    sign_in: SignIn,
) -> None:
    admin = sign_in("admin", next=HOSTS)
    gpus = admin.locator(".device")
    expect(gpus).to_have_count(2)
    expect(gpus.filter(has_text="A100")).to_have_count(2)
    expect(gpus.filter(has_text="free")).to_have_count(2)

    student = sign_in("student2")
    card = student.locator('section[data-template="jupyter-pytorch"]')
    card.locator("select[name=flavor]").select_option(label="1 × 8 GiB vGPU, 4 CPU, 16 GiB")
    card.get_by_role("button", name="Launch").click()
    student.wait_for_url(re.compile(r"/workloads/[0-9a-f-]{36}/$"))
    pk = student.url.rstrip("/").rsplit("/", 1)[1]
    badge = student.locator("h1 [data-state]")
    expect(badge).to_have_attribute("data-state", "Running", timeout=60_000)

    admin.reload()
    held = gpus.filter(has=admin.locator(f'a[href="/workloads/{pk}/"]'))
    expect(held).to_have_count(1)
    expect(held).to_contain_text("Compute 25 %")
    expect(held).to_contain_text("student2 · 25 %")
    expect(held).not_to_contain_text("free")
    expect(gpus.filter(has_text="free")).to_have_count(1)

    student.once("dialog", lambda dialog: dialog.accept())  # "Stop …? Unsaved work is lost."
    student.get_by_role("button", name="Stop").click()
    expect(badge).to_have_attribute("data-state", "Stopped", timeout=30_000)

    admin.reload()
    expect(admin.locator(f'a[href="/workloads/{pk}/"]')).to_have_count(0)
    expect(gpus.filter(has_text="free")).to_have_count(2)
    expect(gpus.filter(has_text="Compute 0 %")).to_have_count(2)
