"""A student launches a granted JupyterLab, follows it live from Queued to Running, and
uses it through the portal's notebook proxy."""

from __future__ import annotations

import re
import secrets
from typing import TYPE_CHECKING

from playwright.sync_api import Page, expect

if TYPE_CHECKING:
    from tests.browser.conftest import Portal, SignIn

# Records every value the workload's state badge takes (live.js changes its data-state), and
# leaves a marker that a navigation or reload would wipe.
FOLLOW_BADGE = """(marker) => {
  const badge = document.querySelector("h1 [data-state]");
  window.quantaSeen = [badge.getAttribute("data-state")];
  window.quantaMarker = marker;
  new MutationObserver((records) => {
    for (const record of records) window.quantaSeen.push(record.oldValue);
    window.quantaSeen.push(badge.getAttribute("data-state"));
  }).observe(badge, {attributes: true, attributeFilter: ["data-state"], attributeOldValue: true});
}"""


def states_seen(page: Page) -> list[str]:
    seen: list[str] = []
    for state in page.evaluate("window.quantaSeen"):
        if not seen or seen[-1] != state:
            seen.append(state)
    return seen


def test_a_student_watches_jupyter_go_from_queued_to_running_and_runs_a_cell(
    portal: Portal, sign_in: SignIn
) -> None:
    environments = portal.quota("ml-101")["environments"]
    portal.set_quota("ml-101", environments=0)  # the class is full: the launch must wait
    try:
        page = sign_in("student1")
        card = page.locator('section[data-template="jupyter-pytorch"]')
        card.locator("select[name=flavor]").select_option(label="½ CPU, 1 GiB")
        card.get_by_role("button", name="Launch").click()
        page.wait_for_url(re.compile(r"/workloads/[0-9a-f-]{36}/$"))

        badge = page.locator("h1 [data-state]")
        expect(badge).to_have_attribute("data-state", "Queued")
        expect(badge).to_have_text("Queued")
        expect(page.locator("p[data-role=reason]")).to_contain_text(
            re.compile(r"waiting for quota: .*ML-101.*0 of 0 environments")
        )
        expect(page.locator("[data-role=open]").first).to_be_hidden()
        expect(page.locator("html")).to_have_attribute("data-live", "live")

        marker = secrets.token_hex(8)
        page.evaluate(FOLLOW_BADGE, marker)
        navigations: list[str] = []
        page.on(
            "framenavigated", lambda f: navigations.append(f.url) if f is page.main_frame else None
        )
    finally:
        portal.set_quota("ml-101", environments=environments)  # room again: admission goes on

    expect(badge).to_have_attribute("data-state", "Running", timeout=60_000)
    assert states_seen(page) == ["Queued", "Starting", "Running"]
    assert page.evaluate("window.quantaMarker") == marker, "the page was reloaded"
    assert navigations == []
    expect(badge).to_have_text("Running")
    expect(page.locator("p[data-role=reason]")).to_have_text("running")
    timeline = page.locator("ol[data-role=timeline]")
    expect(timeline.locator("li", has_text="Starting")).to_have_count(1)
    expect(timeline.locator("li", has_text="Running")).to_have_count(1)

    open_link = page.locator("a[data-role=open-link]")
    expect(open_link).to_be_visible()
    with page.context.expect_page() as opened:
        open_link.click()
    lab = opened.value
    assert re.search(r"/nb/[0-9a-f-]{36}/lab", lab.url), lab.url
    lab.locator('.jp-LauncherCard[data-category="Notebook"]').first.click(timeout=60_000)
    # Typing before the new notebook has loaded and its kernel is up would be lost.
    expect(lab.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=60_000)
    editor = lab.locator(".jp-NotebookPanel .jp-Cell .cm-content").first
    editor.click()
    lab.keyboard.type("print(6*7)")
    expect(editor).to_have_text("print(6*7)")
    lab.keyboard.press("Shift+Enter")
    expect(lab.locator(".jp-NotebookPanel .jp-OutputArea-output").first).to_have_text(
        "42", timeout=30_000
    )

    # Stop it, as a student would: a member may run one environment of the grant at a time.
    page.once("dialog", lambda dialog: dialog.accept())  # "Stop …? Unsaved work is lost."
    page.get_by_role("button", name="Stop").click()
    expect(page.locator("h1 [data-state]")).to_have_attribute(
        "data-state", "Stopped", timeout=30_000
    )
