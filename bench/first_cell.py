"""Launch → first cell output on a fresh notebook (issue 16), as a student sees it in Chromium,
with the warm kernel (now) and without it (the path before, ``"warm_kernel": false`` in the
local cluster's config), alternating run by run on the same portal so that both see the same
machine.

Starts the embedded portal (``bench/launch.py``'s ``start_portal``), signs in as student1
(Playwright, Debian's Chromium) and, N times per path: clicks Launch on the JupyterLab card with
the demo's ½-CPU size, follows the workload page to Running, opens JupyterLab, opens a new
notebook from the launcher, types ``print(6*7)`` as soon as the cell takes text (no waiting for
"Idle": a person does not), runs it once and waits for ``42``; then stops it. Writes the section
between the first-cell markers of ``bench/launch.md`` with ``--write``.

    .venv/bin/python bench/first_cell.py --runs 10 [--write]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from playwright.sync_api import Page, expect, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from launch import _up, percentile, start_portal, wait  # noqa: E402
from launch_apps import CHROMIUM_ARGS, PASSWORD, launch_and_open, sign_in  # noqa: E402

OUTPUT_TIMEOUT_S = 45  # after this the first cell counts as silent
BEGIN, END = "<!-- first-cell:begin -->", "<!-- first-cell:end -->"


def set_warm(data: Path, warm: bool) -> None:
    """The local cluster's ``warm_kernel`` (the portal builds a new backend for a new config)."""
    code = (
        "from scheduling.models import Cluster; c = Cluster.objects.get(slug='local'); "
        f"c.config = {{**(c.config or {{}}), 'warm_kernel': {warm!r}}}; c.save()"
    )
    env = {**os.environ, "DEBUG": "true", "DATA_DIR": str(data), "LOG_LEVEL": "WARNING"}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def first_cell_once(page: Page) -> tuple[float, float | None, float, float | None]:
    """Click Launch → Running, and → the first cell's output (s); Running → JupyterLab's
    launcher drawn, and Shift+Enter → the output (s); then stop."""
    start, running, lab = launch_and_open(page, "jupyter-pytorch")
    notebook_card = lab.locator('.jp-LauncherCard[data-category="Notebook"]').first
    notebook_card.wait_for(timeout=120_000)
    lab_drawn = time.perf_counter() - start - running
    notebook_card.click(timeout=120_000)
    editor = lab.locator(".jp-NotebookPanel .jp-Cell .cm-content").first
    editor.click(timeout=120_000)
    lab.keyboard.type("print(6*7)")
    lab.keyboard.press("Shift+Enter")
    ran = time.perf_counter()
    output: float | None = None
    answered: float | None = None
    try:
        expect(lab.locator(".jp-NotebookPanel .jp-OutputArea-output").first).to_have_text(
            "42", timeout=OUTPUT_TIMEOUT_S * 1000
        )
        output = time.perf_counter() - start
        answered = time.perf_counter() - ran
    except AssertionError:
        pass  # the first cell said nothing: counted, not timed
    lab.close()
    page.once("dialog", lambda dialog: dialog.accept())  # "Stop …? Unsaved work is lost."
    page.get_by_role("button", name="Stop").click()
    expect(page.locator("h1 [data-state]")).to_have_attribute(
        "data-state", "Stopped", timeout=60_000
    )
    return running, output, lab_drawn, answered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--write", action="store_true", help="update bench/launch.md")
    args = parser.parse_args()

    load_before = os.getloadavg()
    started = dt.datetime.now(dt.UTC)
    server, base, data = start_portal(PASSWORD, SSH_GATEWAY_PORT="0")
    results: dict[bool, list[tuple[float, float | None, float, float | None]]] = {
        True: [],
        False: [],
    }
    try:
        with httpx.Client(base_url=base, timeout=30) as client:
            wait(lambda: _up(client), 60, "the portal to answer")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
            page = sign_in(browser, base)
            for run in range(args.runs):
                for warm in (True, False):
                    set_warm(data, warm)
                    to_running, to_output, lab_drawn, answered = first_cell_once(page)
                    results[warm].append((to_running, to_output, lab_drawn, answered))
                    said = "none" if to_output is None else f"{to_output:.2f} s"
                    print(
                        f"run {run + 1} {'warm' if warm else 'cold'}: Running after "
                        f"{to_running:.2f} s, first output after {said}",
                        flush=True,
                    )
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=60)
    load_after = os.getloadavg()

    def row(label: str, values: list[float]) -> str:
        if not values:
            return f"| {label} | – | – | – | – |"
        return (
            f"| {label} | {statistics.median(values):.2f} | {percentile(values, 0.9):.2f} | "
            f"{min(values):.2f} | {max(values):.2f} |"
        )

    def outputs(warm: bool) -> list[float]:
        return [r[1] for r in results[warm] if r[1] is not None]

    def silent(warm: bool) -> str:
        return f"{sum(r[1] is None for r in results[warm])} of {len(results[warm])}"

    warm_out, cold_out = outputs(True), outputs(False)
    ratio = (
        f"{statistics.median(warm_out) / statistics.median(cold_out):.2f}×"
        if warm_out and cold_out
        else "n/a"
    )
    lines = [
        BEGIN,
        f"Measured {started:%Y-%m-%d %H:%M} UTC on this {os.cpu_count()}-core machine, "
        f"{args.runs} runs per path, alternating; load average (1, 5, 15 min) "
        f"{' '.join(f'{x:.2f}' for x in load_before)} before and "
        f"{' '.join(f'{x:.2f}' for x in load_after)} after.",
        "",
        "```sh",
        f".venv/bin/python bench/first_cell.py --runs {args.runs} --write",
        "```",
        "",
        "| measure | median (s) | p90 (s) | min (s) | max (s) |",
        "|---|---|---|---|---|",
        row("warm kernel: click → Running", [r[0] for r in results[True]]),
        row("warm kernel: Running → JupyterLab's launcher drawn", [r[2] for r in results[True]]),
        row("warm kernel: Shift+Enter → output", [r[3] for r in results[True] if r[3]]),
        row("warm kernel: click → first cell output", warm_out),
        row("no warm kernel: click → Running", [r[0] for r in results[False]]),
        row("no warm kernel: Running → launcher drawn", [r[2] for r in results[False]]),
        row("no warm kernel: Shift+Enter → output", [r[3] for r in results[False] if r[3]]),
        row("no warm kernel: click → first cell output", cold_out),
        "",
        f"First cells that printed nothing within {OUTPUT_TIMEOUT_S} s (not timed above): "
        f"warm kernel {silent(True)}, no warm kernel {silent(False)}. "
        f"**First cell output, warm / no warm kernel (medians of those that printed): {ratio}.**",
        END,
    ]
    section = "\n".join(lines)
    print(section)
    if args.write:
        path = ROOT / "bench" / "launch.md"
        text = path.read_text()
        if BEGIN in text:
            head, rest = text.split(BEGIN, 1)
            text = head + section + rest.split(END, 1)[1]
        else:
            text = text.rstrip("\n") + "\n\n" + section + "\n"
        path.write_text(text)


if __name__ == "__main__":
    main()
