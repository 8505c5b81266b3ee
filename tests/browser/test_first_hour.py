"""The first hour of a student (issue 16): a fresh notebook's first cell answers on the first
try, extending adds time (and a refusal looks like one), a job's shell loop runs, and a job
over the class's quota is refused with the quota's reason."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

if TYPE_CHECKING:
    from tests.browser.conftest import Portal, SignIn


def launch_jupyter(page: Page) -> None:
    card = page.locator('section[data-template="jupyter-pytorch"]')
    card.locator("select[name=flavor]").select_option(label="½ CPU, 1 GiB")
    card.get_by_role("button", name="Launch").click()
    page.wait_for_url(re.compile(r"/workloads/[0-9a-f-]{36}/$"))
    expect(page.locator("h1 [data-state]")).to_have_attribute(
        "data-state", "Running", timeout=90_000
    )


def test_the_first_cell_of_a_fresh_notebook_prints_on_the_first_try(
    portal: Portal, sign_in: SignIn
) -> None:
    page = sign_in("student1")
    launch_jupyter(page)
    with page.context.expect_page() as opened:
        page.locator("a[data-role=open-link]").click()
    lab = opened.value
    lab.locator('.jp-LauncherCard[data-category="Notebook"]').first.click(timeout=60_000)
    # As a person does: type as soon as the cell takes text, run it once, and read.
    editor = lab.locator(".jp-NotebookPanel .jp-Cell .cm-content").first
    editor.click(timeout=60_000)
    lab.keyboard.type("print(6*7)")
    expect(editor).to_have_text("print(6*7)")
    lab.keyboard.press("Shift+Enter")
    expect(lab.locator(".jp-NotebookPanel .jp-OutputArea-output").first).to_have_text(
        "42", timeout=30_000
    )
    expect(lab.locator(".jp-NotebookPanel .jp-InputPrompt").first).to_have_text("[1]:")
    page.get_by_role("button", name="Stop").click()
    expect(page.locator("h1 [data-state]")).to_have_attribute(
        "data-state", "Stopped", timeout=30_000
    )
