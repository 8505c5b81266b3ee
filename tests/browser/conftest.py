"""Browser tests: Playwright drives Debian's Chromium (headless) against the real portal.

The portal runs as `make run` runs it, in a subprocess with a temporary DATA_DIR and SQLite
database (as `make run` has it): `manage.py migrate`,
`manage.py seed_demo`, then `manage.py serve` on a free port, with the local cluster given a
configured inventory of two A100s so that GPU flavors start. At the end every workload is
stopped through the API, the server's process group is ended, and any process left that names
the temporary DATA_DIR (JupyterLab servers and kernels run in sessions of their own) too.
These tests never touch pytest-django's test database (they request no `db`): run them in a
pytest process of their own, `make browser` (Playwright's event loop breaks pytest-asyncio
tests that run after it in the same process).

Without /usr/bin/chromium, or when Playwright cannot start it, every test here is skipped
with the reason. Set QUANTA_SCREENSHOTS=docs/screenshots to refresh the README's pictures
(otherwise test_screenshots writes them to a temporary directory).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psutil
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Playwright, sync_playwright
from playwright.sync_api import Error as PlaywrightError

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CHROMIUM = "/usr/bin/chromium"
# Headless, and nothing may reach the network: no updates, sync, metrics or field trials.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
VIEWPORT = {"width": 1280, "height": 900}
GPUS = [{"index": i, "model": "A100", "memory_mib": 40960} for i in range(2)]
ACTIVE = ("Pending", "Queued", "Starting", "Running", "Stopping")
# Quanta's settings (docs/configuration.md): the server under test gets its own, never the
# caller's (CI points DATABASE_URL and REDIS_URL at PostgreSQL and Redis). Every variable
# portal/settings.py reads, so a new setting cannot leak in from the caller's shell.
QUANTA_SETTINGS = {
    *re.findall(r'\benv[a-z_]*\(\s*"([A-Z0-9_]+)"', (ROOT / "portal" / "settings.py").read_text()),
    "DEBUG", "SECRET_KEY", "DATA_DIR", "PORT", "DJANGO_SETTINGS_MODULE",
    "PROMETHEUS_MULTIPROC_DIR",
}  # fmt: skip

# Run by `manage.py shell` once the demo is seeded: two configured A100s on "This host", the
# nodes re-synced, and an API token for every demo user (the tests' back door to the API).
SETUP = f"""
import json
from scheduling.models import Cluster
from tenants.models import User
from tenants.services import create_api_token
from scheduling.inventory import sync_backend_nodes

local = Cluster.objects.get(slug="local")
local.config = {{**(local.config or {{}}), "gpus": {GPUS!r}}}
local.save()
sync_backend_nodes(local)
tokens = {{
    user.username: create_api_token(actor=user, name="browser tests")[1]
    for user in User.objects.all()
}}
print("QUANTA-SETUP " + json.dumps(tokens))
"""

_summary: list[str] = []


# -- the portal ---------------------------------------------------------------------------------


class Portal:
    """The running portal: its address, the demo password, and the API as any demo user."""

    def __init__(self, url: str, password: str, data_dir: Path, log: Path) -> None:
        self.url = url
        self.password = password
        self.data_dir = data_dir
        self.log = log
        self.tokens: dict[str, str] = {}
        self.ready_at = 0.0  # time.monotonic() when /healthz first answered
        self._clients: dict[str, httpx.Client] = {}

    def api(self, username: str = "admin") -> httpx.Client:
        if username not in self._clients:
            self._clients[username] = httpx.Client(
                base_url=self.url + "/api/v1",
                headers={"Authorization": f"Bearer {self.tokens[username]}"},
                timeout=30,
            )
        return self._clients[username]

    def call(self, method: str, path: str, *, user: str = "admin", **kwargs: Any) -> Any:
        response = self.api(user).request(method, path, **kwargs)
        if response.is_error:
            raise AssertionError(
                f"{method} {path} as {user}: {response.status_code} {response.text}"
            )
        return response.json() if response.content else None

    def quota(self, tenant: str) -> dict[str, Any]:
        return dict(self.call("GET", f"/tenants/{tenant}/quota/"))

    def set_quota(self, tenant: str, **limits: Any) -> None:
        self.call("PATCH", f"/tenants/{tenant}/quota/", json=limits)

    def launch(self, username: str, template: str, flavor: str) -> str:
        workload = self.call(
            "POST",
            "/workloads/launch/",
            user=username,
            json={"template": template, "flavor": flavor},
        )
        return str(workload["id"])

    def workload(self, pk: str) -> dict[str, Any]:
        return dict(self.call("GET", f"/workloads/{pk}/"))

    def wait_for(self, pk: str, state: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            workload = self.workload(pk)
            if workload["state"] == state:
                return workload
            if time.monotonic() > deadline:
                raise AssertionError(f"workload {pk} is {workload['state']}, not {state}")
            time.sleep(0.25)

    def stop(self, pk: str) -> None:
        self.call("POST", f"/workloads/{pk}/stop/")

    def workloads(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        page: str | None = "/workloads/?ordering=created_at"
        while page:
            body = self.call("GET", page)
            found += body["results"]
            page = body["next"] and body["next"].split("/api/v1", 1)[1]
        return found

    def stop_everything(self, timeout: float = 20) -> None:
        """Stop every workload through the portal and wait until none is active."""
        for workload in self.workloads():
            if workload["state"] in ACTIVE and workload["state"] != "Stopping":
                with contextlib.suppress(AssertionError):
                    self.stop(workload["id"])
        deadline = time.monotonic() + timeout
        while any(w["state"] in ACTIVE for w in self.workloads()):
            if time.monotonic() > deadline:
                break
            time.sleep(0.25)

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def close(self) -> None:
        for client in self._clients.values():
            client.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_env(data_dir: Path, password: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in QUANTA_SETTINGS
        and not k.startswith(("OIDC_", "LDAP_", "CAS_", "CAMPUS_"))
        and not (k.endswith("_FILE") and k[:-5] in QUANTA_SETTINGS)
    }
    env.update(
        DJANGO_SETTINGS_MODULE="portal.settings",
        # As `make run` has it: DEBUG off (static files collected by `serve` and served by
        # whitenoise, the portal's own error pages), plain HTTP, mail to the log.
        DEBUG="false",
        SECURE_COOKIES="false",
        EMAIL_BACKEND="django.core.mail.backends.console.EmailBackend",
        DATA_DIR=str(data_dir),
        DATABASE_URL=f"sqlite:///{data_dir / 'quanta.sqlite3'}",
        CLUSTER_BACKEND="local",
        DEMO_PASSWORD=password,
        PYTHONUNBUFFERED="1",
    )
    return env


def _manage(args: list[str], env: dict[str, str], log: Path) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    with log.open("a") as file:
        file.write(f"$ manage.py {args[0]}\n{result.stdout}{result.stderr}\n")
    if result.returncode:
        raise RuntimeError(f"manage.py {args[0]} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def _processes_under(data_dir: Path) -> list[psutil.Process]:
    """Processes of this user whose command line or environment names ``data_dir``: the
    local backend's runners, JupyterLab servers and kernels (each in a session of its own)."""
    marker, me, found = str(data_dir), os.getpid(), []
    for process in psutil.process_iter(["pid", "uids", "cmdline"]):
        try:
            if process.pid == me or process.info["uids"].real != os.getuid():
                continue
            if any(marker in part for part in process.info["cmdline"] or ()) or any(
                marker in value for value in process.environ().values()
            ):
                found.append(process)
        except (psutil.Error, AttributeError):
            continue
    return found


def _end(processes: list[psutil.Process], grace: float = 5) -> None:
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _gone, alive = psutil.wait_procs(processes, timeout=grace)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=grace)


def _stop_server(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)


@pytest.fixture(scope="session")
def portal(chromium: Browser) -> Iterator[Portal]:
    """The real portal on a free port, seeded with the demo university; stopped at the end
    with everything it started. (Asks for ``chromium`` first: no browser, no server.)"""
    with running_portal() as started:
        yield started


@pytest.fixture(autouse=True)
def nothing_left_running(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test on the session's portal, stop what it left active (a failed test's
    notebook would otherwise hold the student's grant or the host's CPUs for the next)."""
    yield
    if "portal" in request.fixturenames:
        request.getfixturevalue("portal").stop_everything()


@contextlib.contextmanager
def running_portal(extra_env: dict[str, str] | None = None) -> Iterator[Portal]:
    """A portal of its own (``portal`` is the session's), with ``extra_env`` added to its
    settings (``DEMO_LOAD=true`` for tests/browser/test_demo.py)."""
    started = time.monotonic()
    # A short path: apps listen on UNIX sockets under DATA_DIR (at most 107 bytes a path).
    data_dir = Path(tempfile.mkdtemp(prefix="qb-", dir="/tmp"))
    log = data_dir / "serve.log"
    password = "browser-" + secrets.token_urlsafe(9)
    env = {**_server_env(data_dir, password), **(extra_env or {})}
    port = _free_port()
    portal = Portal(f"http://127.0.0.1:{port}", password, data_dir, log)
    _manage(["migrate", "--noinput"], env, log)
    _manage(["seed_demo", "--url", portal.url + "/"], env, log)
    for line in _manage(["shell", "-c", SETUP], env, log).splitlines():
        if line.startswith("QUANTA-SETUP "):
            portal.tokens = json.loads(line.split(" ", 1)[1])
    assert portal.tokens, "the setup script printed no tokens"
    with log.open("ab") as output:
        server = subprocess.Popen(
            [sys.executable, "manage.py", "serve", f"127.0.0.1:{port}"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped as one at the end
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"manage.py serve exited:\n{portal.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(portal.url + "/healthz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"/healthz did not answer within 60 s:\n{portal.log_tail()}")
            time.sleep(0.2)
        portal.ready_at = time.monotonic()
        _summary.append(f"portal ready in {time.monotonic() - started:.1f} s; log: {log}")
        yield portal
    finally:
        try:
            if server.poll() is None:
                portal.stop_everything()
        except Exception as exc:  # the sweep below still ends what is left
            _summary.append(f"stopping workloads through the portal failed: {exc}")
        finally:
            portal.close()
            _stop_server(server)
            leftovers = _processes_under(data_dir)
            if leftovers:
                _summary.append(f"ended {len(leftovers)} process(es) left under {data_dir}")
                _end(leftovers)
            if not os.environ.get("QUANTA_KEEP_BROWSER_DATA"):
                shutil.rmtree(data_dir, ignore_errors=True)


# -- the browser --------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def chromium() -> Iterator[Browser]:
    """Debian's Chromium, headless; every browser test is skipped (with why) without it."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium package (.ci/run does)")
    try:
        playwright: Playwright = sync_playwright().start()
    except Exception as exc:
        pytest.skip(f"Playwright did not start: {exc}")
    try:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True
        )
    except PlaywrightError as exc:
        playwright.stop()
        pytest.skip(f"Playwright could not start {CHROMIUM}: {exc.message.splitlines()[0]}")
    try:
        yield browser
    finally:
        browser.close()
        playwright.stop()


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where test_screenshots saves its pictures: $QUANTA_SCREENSHOTS (docs/screenshots to
    refresh the README's), else a temporary directory."""
    chosen = os.environ.get("QUANTA_SCREENSHOTS")
    directory = (ROOT / chosen) if chosen else tmp_path_factory.mktemp("screenshots")
    directory.mkdir(parents=True, exist_ok=True)
    _summary.append(f"screenshots in {directory}")
    return directory


SignIn = Callable[..., Page]


@pytest.fixture
def sign_in(
    chromium: Browser, portal: Portal, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[SignIn]:
    """``sign_in("student1")``: a page of a fresh browser context signed in as that person,
    on ``next`` (the App Center unless given). Asserts at the end that no page of the test
    asked for anything outside the portal."""
    contexts: list[BrowserContext] = []
    outside: list[str] = []
    portal_host = urlsplit(portal.url).netloc

    def watch(url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme in ("http", "https", "ws", "wss") and parts.netloc != portal_host:
            outside.append(url)

    def sign_in(username: str, *, next: str = "/apps/", viewport: Any = None) -> Page:
        context = chromium.new_context(
            base_url=portal.url,
            viewport=viewport or VIEWPORT,
            locale="en-US",
            timezone_id="UTC",
        )
        context.set_default_timeout(15_000)
        context.on("request", lambda r: watch(r.url))
        context.on("page", lambda p: p.on("websocket", lambda ws: watch(ws.url)))
        contexts.append(context)
        page = context.new_page()
        page.goto(f"/login/?next={next}")
        page.fill("#id_username", username)
        page.fill("#id_password", portal.password)
        page.locator("main form button[type=submit]").click()
        page.wait_for_url(lambda url: "/login/" not in url)
        return page

    yield sign_in
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        for i, context in enumerate(contexts):
            for j, page in enumerate(context.pages):
                with contextlib.suppress(PlaywrightError):
                    page.screenshot(path=tmp_path / f"failed-{i}-{j}.png")
        print(f"\nscreenshots of the open pages: {tmp_path}")
        print(f"portal log ({portal.log}):\n{portal.log_tail()}")
    for context in contexts:
        with contextlib.suppress(PlaywrightError):
            context.close()
    assert not outside, f"pages asked for addresses outside the portal: {outside}"


# -- pytest hooks -------------------------------------------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Screenshots last (the pages then carry some history: stopped workloads, GPU-hours);
    and never in a process that also runs the rest of the suite."""
    ours = [item for item in items if HERE in Path(str(item.path)).parents]
    if len(ours) < len(items):
        skip = pytest.mark.skip(
            reason="browser tests run in a pytest process of their own: make browser "
            "(or pytest tests/browser -p no:django --confcutdir=tests/browser)"
        )
        for item in ours:
            item.add_marker(skip)
        return
    items.sort(key=lambda item: Path(str(item.path)).name == "test_screenshots.py")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for line in _summary:
        terminalreporter.write_line(f"browser tests: {line}")
