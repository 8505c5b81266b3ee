"""A student opens a desktop through the portal: noVNC connects over the proxy's RFB bridge,
the remote screen is drawn, and the template's program (xterm) has a window on it.

Skipped with the reason where TigerVNC, openbox, xterm or noVNC are not installed here
(`make apps` installs them)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import expect

from scheduling.backends.local import LocalBackend  # no Django in the backends

if TYPE_CHECKING:
    from tests.browser.conftest import Portal, SignIn

NEEDED = ("Xvnc", "xauth", "openbox", "xterm", "xwininfo")
NOVNC = Path(os.environ.get("NOVNC_DIR", "/usr/share/novnc"))

# How many distinct colours the noVNC canvas shows (a blank or unconnected screen has one).
CANVAS_COLOURS = """() => {
  const canvas = document.querySelector("#noVNC_container canvas");
  if (!canvas || !canvas.width) return 0;
  const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  const seen = new Set();
  for (let i = 0; i < data.length && seen.size < 50; i += 4 * 97) {
    seen.add((data[i] << 16) | (data[i + 1] << 8) | data[i + 2]);
  }
  return seen.size;
}"""


def x_windows(portal: Portal, pk: str) -> str:
    """The X server's window tree, asked with the workload's own cookie and display."""
    workdir = portal.data_dir / "workloads" / "local" / pk
    log = (workdir / "attempt-0" / "task-0.log").read_text(errors="replace")
    display = re.search(r"on display (:\d+)", log)
    assert display, log[-2000:]
    env = dict(
        os.environ, DISPLAY=display.group(1), XAUTHORITY=str(workdir / "run" / "vnc" / "Xauthority")
    )
    # Asked from where the desktop's programs run: inside the workload's sandbox (its X socket
    # is in the sandbox's private /tmp), or on the host where there is no sandbox.
    state = json.loads((workdir / "state.json").read_text())
    prefix = LocalBackend(workdir.parent)._sandbox_enter_prefix(state)
    return subprocess.run(
        [*prefix, "xwininfo", "-root", "-tree"],
        env=env,
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout


def test_a_student_sees_the_remote_desktop_with_an_xterm_window(
    portal: Portal, sign_in: SignIn
) -> None:
    missing = [name for name in NEEDED if shutil.which(name) is None]
    if not (NOVNC / "vnc.html").is_file():
        missing.append(f"noVNC ({NOVNC})")
    if missing:
        pytest.skip(f"not installed here: {', '.join(missing)} (run make apps)")
    page = sign_in("student4")
    expect(page.locator('section[data-template="desktop-xterm"]')).to_be_visible()
    # PyCharm is not installed on this host: not offered.
    expect(page.locator('section[data-template="pycharm"]')).to_have_count(0)
    pk = portal.launch("student4", "desktop-xterm", "cpu-small")
    try:
        portal.wait_for(pk, "Running", timeout=60)
        page.goto(f"/nb/{pk}/")
        expect(page).to_have_url(re.compile(rf"/nb/{pk}/vnc\.html\?autoconnect=1"))
        expect(page.locator("#noVNC_status")).to_contain_text("Connected", timeout=30_000)
        expect(page.locator("#noVNC_container canvas")).to_be_visible()
        page.wait_for_function(f"({CANVAS_COLOURS})() > 2", timeout=30_000)
        for _ in range(50):
            if '"xterm": ("xterm" "XTerm")' in x_windows(portal, pk):
                break
            page.wait_for_timeout(200)
        assert '"xterm": ("xterm" "XTerm")' in x_windows(portal, pk)
    finally:
        portal.stop(pk)
        portal.wait_for(pk, "Stopped", timeout=60)


def test_the_admin_catalog_says_why_pycharm_is_not_offered(portal: Portal, sign_in: SignIn) -> None:
    page = sign_in("admin", next="/console/catalog/")
    row = page.locator("tr[data-template=pycharm]")
    expect(row.locator(".not-offered[data-cluster=local]")).to_be_visible()
    expect(row).to_contain_text("PyCharm is not installed on this host: set PYCHARM_HOME")
    # What this host has is not marked.
    expect(page.locator("tr[data-template=desktop-xterm] .not-offered")).to_have_count(0)
