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
    page.once("dialog", lambda dialog: dialog.accept())  # "Stop …? Unsaved work is lost."
    page.get_by_role("button", name="Stop").click()
    expect(page.locator("h1 [data-state]")).to_have_attribute(
        "data-state", "Stopped", timeout=30_000
    )


REFUSAL_RED = "rgb(253, 232, 230)"  # .messages li.error's background


def test_extend_adds_time_each_time_and_a_refusal_looks_like_one(
    portal: Portal, sign_in: SignIn
) -> None:
    page = sign_in("student1")
    launch_jupyter(page)
    page.reload()  # the deadline is set once Running
    stops_at = page.locator("dt", has_text="Stops at").locator("xpath=following-sibling::dd[1]")
    ends = [stops_at.inner_text()]
    for _ in range(2):  # the demo grant allows two extensions
        page.get_by_role("button", name="Extend").click()
        banner = page.locator("ul.messages li").first
        expect(banner).to_have_class("success")
        expect(banner).to_contain_text("Extended: it now stops at")
        ends.append(stops_at.inner_text())
    assert len(set(ends)) == 3, ends  # each extension moved the end
    page.get_by_role("button", name="Extend").click()
    banner = page.locator("ul.messages li").first
    expect(banner).to_have_class("error")
    expect(banner).to_contain_text("already extended 2 time(s), the most the grant allows")
    assert banner.evaluate("li => getComputedStyle(li).backgroundColor") == REFUSAL_RED
    assert stops_at.inner_text() == ends[-1]
    page.once("dialog", lambda dialog: dialog.accept())  # "Stop …? Unsaved work is lost."
    page.get_by_role("button", name="Stop").click()
    expect(page.locator("h1 [data-state]")).to_have_attribute(
        "data-state", "Stopped", timeout=30_000
    )
    expect(page.locator("dt", has_text="Stops at")).to_have_count(0)


def submit_job(page: Page, command: str, flavor: str, workers: int = 1) -> None:
    page.goto("/workloads/new-job/")
    tenant = page.locator("select[name=tenant] option", has_text="ML-101").first
    page.locator("select[name=tenant]").select_option(value=tenant.get_attribute("value"))
    page.locator("select[name=flavor]").select_option(label=flavor)
    page.locator("input[name=command]").fill(command)
    page.locator("input[name=workers]").fill(str(workers))
    page.get_by_role("button", name="Submit").click()


def test_a_shell_loop_job_succeeds_and_its_page_shows_the_command_as_typed(
    portal: Portal, sign_in: SignIn
) -> None:
    page = sign_in("student1")
    typed = "for i in 1 2 3; do echo \"line $i\"; done && bash -c 'echo done'"
    submit_job(page, typed, "½ CPU, 1 GiB")
    page.wait_for_url(re.compile(r"/workloads/[0-9a-f-]{36}/$"))
    expect(page.locator("h1 [data-state]")).to_have_attribute(
        "data-state", "Succeeded", timeout=60_000
    )
    expect(page.locator("code[data-role=command]")).to_have_text(typed)
    page.reload()
    expect(page.locator("pre.logs")).to_contain_text("line 1\nline 2\nline 3\ndone")
    page.get_by_role("button", name="Resubmit").click()
    page.wait_for_url(re.compile(r"/workloads/[0-9a-f-]{36}/$"))
    expect(page.locator("h1 [data-state]")).to_have_attribute(
        "data-state", "Succeeded", timeout=60_000
    )
    expect(page.locator("code[data-role=command]")).to_have_text(typed)


def test_a_job_over_the_class_quota_is_refused_with_the_quota_reason(
    portal: Portal, sign_in: SignIn
) -> None:
    gpus = portal.quota("ml-101")["gpus"]
    portal.set_quota("ml-101", gpus=1)
    try:
        page = sign_in("student1")
        before = len(portal.workloads())
        submit_job(page, "python train.py", "1 × 8 GiB vGPU, 4 CPU, 16 GiB", workers=64)
        error = page.locator("form .errorlist").first
        expect(error).to_contain_text("asked for 16")
        expect(error).to_contain_text("your quota allows 1 more GPUs")
        assert "/new-job/" in page.url
        assert len(portal.workloads()) == before  # nothing was queued
    finally:
        portal.set_quota("ml-101", gpus=gpus)
