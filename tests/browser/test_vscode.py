"""A student opens VS Code (code-server) through the portal's proxy: the workbench loads with
the home folder as its workspace, and its terminal runs a command.

Skipped with the reason where code-server is not installed (`make apps` installs it)."""

from __future__ import annotations

import re
import shutil
import time
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from tests.browser.conftest import ROOT

if TYPE_CHECKING:
    from tests.browser.conftest import Portal, SignIn

CODE_SERVER = ROOT / ".apps" / "code-server" / "node_modules" / ".bin" / "code-server"


def open_terminal_from_the_palette(page: Page, seconds: float = 90) -> None:
    """F1, "Terminal: Create New Terminal", click it. The palette lists the commands known
    when it is filled, and the terminal's are registered a while after the workbench is
    drawn (later on a loaded machine): a palette that does not list it yet is closed and
    opened again, as a person would."""
    palette = page.locator(".quick-input-widget input")
    row = page.locator(".quick-input-list .monaco-list-row", has_text="Create New Terminal").first
    deadline = time.monotonic() + seconds
    while True:
        page.keyboard.press("F1")
        expect(palette).to_be_visible()
        palette.fill(">Terminal: Create New Terminal")
        try:
            row.wait_for(timeout=10_000)
            break
        except PlaywrightTimeoutError:
            if time.monotonic() > deadline:
                raise
            page.keyboard.press("Escape")
    row.click()


def test_a_student_opens_vscode_and_its_terminal_runs_echo_42(
    portal: Portal, sign_in: SignIn
) -> None:
    if not CODE_SERVER.exists() and shutil.which("code-server") is None:
        pytest.skip("code-server is not installed here: run make apps")
    page = sign_in("student1")
    expect(page.locator('section[data-template="vscode"]')).to_be_visible()  # offered here
    pk = portal.launch("student1", "vscode", "cpu-small")
    try:
        portal.wait_for(pk, "Running", timeout=120)
        page.goto(f"/nb/{pk}/")
        # code-server sends the browser on to ./?folder=<home>: the proxy keeps it under /nb/.
        expect(page).to_have_url(re.compile(rf"/nb/{pk}/\?folder="), timeout=30_000)
        workbench = page.locator(".monaco-workbench")
        expect(workbench).to_be_visible(timeout=60_000)
        expect(page.locator(".explorer-folders-view, .pane-header").first).to_be_visible(
            timeout=60_000
        )
        open_terminal_from_the_palette(page)
        rows = page.locator(".terminal-wrapper .xterm-rows")
        expect(rows.first).to_be_visible(timeout=30_000)
        page.locator(".terminal-wrapper .xterm").first.click()
        page.keyboard.type("echo $((6*7))")
        page.keyboard.press("Enter")
        # The command line shows "echo $((6*7))"; only the shell's answer is a row of "42".
        answer = rows.first.locator("> div", has_text=re.compile(r"^\s*42\s*$"))
        expect(answer.first).to_be_visible(timeout=30_000)
    finally:
        portal.stop(pk)
        portal.wait_for(pk, "Stopped", timeout=60)


def test_another_student_cannot_open_someone_elses_vscode(portal: Portal, sign_in: SignIn) -> None:
    if not CODE_SERVER.exists() and shutil.which("code-server") is None:
        pytest.skip("code-server is not installed here: run make apps")
    pk = portal.launch("student2", "vscode", "cpu-small")
    try:
        portal.wait_for(pk, "Running", timeout=120)
        outsider = sign_in("student3")
        response = outsider.goto(f"/nb/{pk}/")
        assert response is not None and response.status == 404
        expect(outsider.locator(".monaco-workbench")).to_have_count(0)
    finally:
        portal.stop(pk)
        portal.wait_for(pk, "Stopped", timeout=60)
