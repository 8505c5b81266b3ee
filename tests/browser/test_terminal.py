"""The Terminal app still opens a working shell in the browser: JupyterLab with terminal 1 as
its layout, reached through the proxy."""

from __future__ import annotations

from typing import TYPE_CHECKING

from playwright.sync_api import expect

if TYPE_CHECKING:
    from tests.browser.conftest import Portal, SignIn


def test_a_student_opens_the_terminal_app_and_its_shell_answers(
    portal: Portal, sign_in: SignIn
) -> None:
    page = sign_in("student5")
    pk = portal.launch("student5", "terminal", "cpu-small")
    try:
        portal.wait_for(pk, "Running", timeout=90)
        page.goto(f"/nb/{pk}/lab")
        terminal = page.locator(".jp-Terminal .xterm").first
        expect(terminal).to_be_visible(timeout=60_000)
        terminal.click()
        # JupyterLab draws its terminal on a canvas: the shell's answer lands in a file of the
        # student's home instead, where the test can read it.
        page.keyboard.type("echo $((6*7)) > answer.txt")
        page.keyboard.press("Enter")
        answer = portal.data_dir / "home" / "student5" / "answer.txt"
        for _ in range(150):
            if answer.exists() and answer.read_text().strip():
                break
            page.wait_for_timeout(200)
        assert answer.read_text() == "42\n"
    finally:
        portal.stop(pk)
        portal.wait_for(pk, "Stopped", timeout=60)
