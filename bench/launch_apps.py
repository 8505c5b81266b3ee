"""Click → usable, per app, as a student sees it in Chromium; and JupyterLab's page load
through the portal's proxy against the same server reached directly.

Starts the embedded portal (`manage.py serve`: SQLite, in-process tasks, local backend, demo
data) on a free port with a fresh data directory, signs in as student1 in Debian's Chromium
(Playwright) and, for each app, N times: clicks Launch on the App Center card, follows the
workload page until it offers "Open", opens it and waits until the app is usable, then stops
it. "Usable" is what a student would wait for:

* JupyterLab: a new notebook's first cell, ``print(6*7)``, shows ``42``;
* VS Code: the workbench (``.monaco-workbench``) has loaded its activity bar;
* Desktop: noVNC is connected and the remote screen's canvas has a frame.

Then, with one JupyterLab running, loads its page N times through the proxy and N times
directly (its own port and token, read from the backend's state file), each in a fresh
browser context (a cold cache), until the launcher is drawn; reports the ratio of medians.

    .venv/bin/python bench/launch_apps.py --runs 10 [--apps jupyter,vscode,desktop]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from playwright.sync_api import Browser, Page, expect, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from launch import _up, percentile, start_portal, wait  # noqa: E402

PASSWORD = "bench-pass"
FLAVOR = {"label": "½ CPU, 1 GiB"}  # the demo's cpu-small
TEMPLATES = {"jupyter": "jupyter-pytorch", "vscode": "vscode", "desktop": "desktop-xterm"}
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def usable_jupyter(lab: Page) -> None:
    lab.locator('.jp-LauncherCard[data-category="Notebook"]').first.click(timeout=120_000)
    expect(lab.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=120_000)
    editor = lab.locator(".jp-NotebookPanel .jp-Cell .cm-content").first
    editor.click()
    lab.keyboard.type("print(6*7)")
    lab.keyboard.press("Shift+Enter")
    expect(lab.locator(".jp-NotebookPanel .jp-OutputArea-output").first).to_have_text(
        "42", timeout=120_000
    )


def usable_vscode(page: Page) -> None:
    expect(page.locator(".monaco-workbench .activitybar")).to_be_visible(timeout=120_000)


def usable_desktop(page: Page) -> None:
    page.wait_for_function(
        """() => {
          const canvas = document.querySelector("#noVNC_container canvas, canvas");
          return canvas && canvas.width > 0 && canvas.height > 0
            && !document.documentElement.classList.contains("noVNC_connecting")
            && document.documentElement.classList.contains("noVNC_connected");
        }""",
        timeout=120_000,
    )


USABLE: dict[str, Callable[[Page], None]] = {
    "jupyter": usable_jupyter,
    "vscode": usable_vscode,
    "desktop": usable_desktop,
}


def sign_in(browser: Browser, base: str) -> Page:
    context = browser.new_context(base_url=base, viewport={"width": 1366, "height": 900})
    page = context.new_page()
    page.goto("/login/")
    page.fill("input[name=username]", "student1")
    page.fill("input[name=password]", PASSWORD)
    page.locator("form button[type=submit], form input[type=submit]").first.click()
    page.wait_for_url(lambda url: "/login/" not in url)
    return page


def launch_and_open(page: Page, template: str) -> tuple[float, float, Page]:
    """Click Launch on the App Center card of ``template`` with the ½-CPU size, wait for
    Running, click Open: the click's time (``perf_counter``), seconds to Running, and the
    app's page."""
    page.goto("/apps/")
    card = page.locator(f'section[data-template="{template}"]')
    card.locator("select[name=flavor]").select_option(**FLAVOR)
    start = time.perf_counter()
    card.get_by_role("button", name="Launch").click()
    page.wait_for_url("**/workloads/*/")
    expect(page.locator("h1 [data-state]")).to_have_attribute(
        "data-state", "Running", timeout=180_000
    )
    running = time.perf_counter() - start
    with page.context.expect_page() as opened:
        page.locator("a[data-role=open-link]").click()
    return start, running, opened.value


def launch_once(page: Page, app: str, template: str) -> tuple[float, float, str]:
    """Click Launch → Running (s), click → usable (s), and the workload's id; then stop."""
    start, running, app_page = launch_and_open(page, template)
    workload_id = page.url.rstrip("/").rsplit("/", 1)[1]
    USABLE[app](app_page)
    usable = time.perf_counter() - start
    app_page.close()
    page.get_by_role("button", name="Stop").click()
    expect(page.locator("h1 [data-state]")).to_have_attribute(
        "data-state", "Stopped", timeout=60_000
    )
    return running, usable, workload_id


def page_loads(browser: Browser, base: str, page: Page, data: Path, runs: int) -> list[str]:
    """JupyterLab's /lab through the proxy against direct, each in a cold browser context."""
    page.goto("/apps/")
    card = page.locator(f'section[data-template="{TEMPLATES["jupyter"]}"]')
    card.locator("select[name=flavor]").select_option(**FLAVOR)
    card.get_by_role("button", name="Launch").click()
    page.wait_for_url("**/workloads/*/")
    workload_id = page.url.rstrip("/").rsplit("/", 1)[1]
    expect(page.locator("h1 [data-state]")).to_have_attribute(
        "data-state", "Running", timeout=180_000
    )
    state_file = next((data / "workloads").glob(f"*/{workload_id}/state.json"))
    state = json.loads(state_file.read_text())
    direct = f"http://127.0.0.1:{state['port']}{state['base_url']}lab?token={state['token']}"
    proxied = f"{base}/nb/{workload_id}/lab"
    cookies = page.context.cookies()
    times: dict[str, list[float]] = {"proxy": [], "direct": []}
    for _ in range(runs):
        for label, url in (("proxy", proxied), ("direct", direct)):
            context = browser.new_context(viewport={"width": 1366, "height": 900})
            if label == "proxy":
                context.add_cookies(cookies)
            tab = context.new_page()
            start = time.perf_counter()
            tab.goto(url)
            expect(tab.locator(".jp-LauncherCard").first).to_be_visible(timeout=120_000)
            times[label].append(time.perf_counter() - start)
            context.close()
    page.get_by_role("button", name="Stop").click()
    proxy_median = statistics.median(times["proxy"])
    direct_median = statistics.median(times["direct"])
    return [
        "| JupyterLab /lab until the launcher shows | median (s) | p90 (s) |",
        "|---|---|---|",
        *(
            f"| {label} | {statistics.median(v):.2f} | {percentile(v, 0.9):.2f} |"
            for label, v in times.items()
        ),
        "",
        f"proxy / direct (medians): **{proxy_median / direct_median:.2f}×**",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--apps", default="jupyter,vscode,desktop")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    apps = [app.strip() for app in args.apps.split(",") if app.strip()]

    server, base, data = start_portal(PASSWORD, SSH_GATEWAY_PORT="0")
    lines = [
        "| app | click → Running p50 (s) | p90 (s) | click → usable p50 (s) | p90 (s) | runs |",
        "|---|---|---|---|---|---|",
    ]
    try:
        with httpx.Client(base_url=base, timeout=30) as client:
            wait(lambda: _up(client), 60, "the portal to answer")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
            page = sign_in(browser, base)
            for app in apps:
                running: list[float] = []
                usable: list[float] = []
                for run in range(args.runs):
                    to_running, to_usable, _ = launch_once(page, app, TEMPLATES[app])
                    running.append(to_running)
                    usable.append(to_usable)
                    print(
                        f"{app} run {run + 1}: Running after {to_running:.2f} s, "
                        f"usable after {to_usable:.2f} s",
                        flush=True,
                    )
                lines.append(
                    f"| {app} | {statistics.median(running):.2f} | "
                    f"{percentile(running, 0.9):.2f} | {statistics.median(usable):.2f} | "
                    f"{percentile(usable, 0.9):.2f} | {len(usable)} |"
                )
            lines += ["", *page_loads(browser, base, page, data, args.runs)]
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=60)
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
