"""JupyterLab's page on its own: a server started as the local backend starts one (its config,
the warm kernel, ``python -m quanta_jupyterlab``), but reached directly (no portal, no proxy,
no sandbox or cgroup), loaded in a fresh Chromium context until the launcher is drawn, then a
new notebook until ``print(6*7)`` shows 42. A new server per load. ``--disable`` turns
front-end plugins off through the page config's ``disabledExtensions``, to see what they cost.

    .venv/bin/python bench/jupyterlab_page.py --runs 5 [--disable @jupyterlab/toc-extension ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from launch import free_port, wait  # noqa: E402
from launch_apps import CHROMIUM_ARGS  # noqa: E402

# local.LAZY_IMPORTS and local.WARM_KERNELS (bench/scheduling.py hides the package from here)
BACKENDS = ROOT / "scheduling" / "backends"
LAZY_IMPORTS, WARM_KERNELS = BACKENDS / "jupyter_lazy", BACKENDS / "jupyter_warm.py"

TOKEN = "bench-token"


def serve(root: Path, port: int, disabled: list[str]) -> subprocess.Popen[bytes]:
    shutil.rmtree(root, ignore_errors=True)
    config = root / "config"
    for sub in ("home", "config"):
        (root / sub).mkdir(parents=True)
    page_config: dict[str, object] = {"buildCheck": False, "buildAvailable": False}
    if disabled:
        page_config["disabledExtensions"] = dict.fromkeys(disabled, True)
    server = {
        "ip": "127.0.0.1",
        "port": port,
        "open_browser": False,
        "root_dir": str(root / "home"),
        "allow_root": os.geteuid() == 0,
        "jpserver_extensions": {"jupyter_lsp": False},
        "tornado_settings": {"page_config_data": page_config},
    }
    lab = {
        "news_url": None,
        "check_for_updates_class": "jupyterlab.handlers.announcements.NeverCheckForUpdate",
        "extension_manager": "readonly",
    }
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"IdentityProvider": {"token": TOKEN}, "ServerApp": server, "LabApp": lab})
    )
    shutil.copyfile(WARM_KERNELS, config / "jupyter_server_config.py")
    env = {
        **os.environ,
        "PYTHONPATH": str(LAZY_IMPORTS),
        "JUPYTER_CONFIG_DIR": str(config),
        "JUPYTER_DATA_DIR": str(root / "data"),
        "JUPYTER_RUNTIME_DIR": str(root / "runtime"),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "quanta_jupyterlab"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its kernels in its process group, killed with it
    )
    base = f"http://127.0.0.1:{port}"

    def warm_kernel_idle() -> bool:
        try:
            kernels = httpx.get(f"{base}/api/kernels?token={TOKEN}").json()
        except (httpx.HTTPError, ValueError):
            return False
        return any(k.get("execution_state") in ("idle", "busy") for k in kernels)

    wait(warm_kernel_idle, 60, "the warm kernel")  # as the backend's readiness probe does
    return process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--disable", nargs="*", default=[], help="front-end plugins to turn off")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="quanta-lab-page-"))
    port = free_port()
    launcher, notebook = [], []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
        for _ in range(args.runs):
            server = serve(root / "server", port, args.disable)
            try:
                context = browser.new_context()
                page = context.new_page()
                start = time.perf_counter()
                page.goto(f"http://127.0.0.1:{port}/lab?token={TOKEN}")
                card = page.locator('.jp-LauncherCard[data-category="Notebook"]').first
                card.wait_for(timeout=60_000)
                drawn = time.perf_counter()
                card.click()
                page.locator(".jp-NotebookPanel .jp-Cell .cm-content").first.click(timeout=60_000)
                page.keyboard.type("print(6*7)")
                page.keyboard.press("Shift+Enter")
                output = page.locator(".jp-NotebookPanel .jp-OutputArea-output").first
                output.wait_for(timeout=60_000)
                launcher.append(drawn - start)
                notebook.append(time.perf_counter() - drawn)
                context.close()
            finally:
                server.terminate()
                try:
                    server.wait(timeout=10)
                except subprocess.TimeoutExpired:  # still shutting its kernels down
                    os.killpg(server.pid, signal.SIGKILL)
                    server.wait()
        browser.close()
    shutil.rmtree(root, ignore_errors=True)
    for label, values in (("launcher drawn", launcher), ("new notebook → 42", notebook)):
        runs = ", ".join(f"{v:.2f}" for v in values)
        print(f"{label}: median {statistics.median(values):.2f} s ({runs})")


if __name__ == "__main__":
    main()
