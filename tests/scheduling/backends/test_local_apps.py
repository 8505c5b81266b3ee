"""The local backend's browser apps on this host: VS Code (code-server) and desktops (TigerVNC
+ openbox + a program), each on a UNIX socket in the workload's private run directory.

Real programs: a test whose program is not installed here is skipped with the reason (run
`make apps`). Sockets have a short path limit (108 bytes), so the root is a short directory
under /tmp rather than pytest's long tmp_path.
"""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from scheduling import reasons as R
from scheduling.backends.base import BackendError, Handle, Phase, WorkloadSpec
from scheduling.backends.local import LocalBackend
from tests.scheduling.backends.contract import all_logs, wait_for
from tests.scheduling.backends.test_local import assert_none_left

GRACE = 2.0


def code_server() -> str:
    found = shutil.which(settings.CODE_SERVER_BIN)
    if found is None:
        pytest.skip(f"code-server is not installed ({settings.CODE_SERVER_BIN}): run make apps")
    return found


def needs_desktop() -> None:
    missing = [
        name for name in ("Xvnc", "xauth", "openbox", "xterm", "xwininfo") if not shutil.which(name)
    ]
    if missing:
        pytest.skip(f"not installed here: {', '.join(missing)} (run make apps)")


@pytest.fixture
def short_root() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="qa", dir="/tmp"))
    yield base
    root = base / "root"
    if root.is_dir():
        sweeper = LocalBackend(root, stop_grace_seconds=GRACE)
        for _ in range(60):
            alive = sweeper.running()
            if not alive:
                break
            for workload_id in alive:
                sweeper.stop(Handle(workload_id))
            time.sleep(0.1)
    assert_none_left(base)
    shutil.rmtree(base, ignore_errors=True)


def make_backend(root: Path, **kwargs: Any) -> LocalBackend:
    kwargs.setdefault("code_server", settings.CODE_SERVER_BIN)
    return LocalBackend(root / "root", node_name="n", gpus=(), stop_grace_seconds=GRACE, **kwargs)


def notebook(app: str, home: Path, **fields: Any) -> WorkloadSpec:
    home.mkdir(parents=True, exist_ok=True)
    return WorkloadSpec(
        workload_id=str(uuid.uuid4()), kind="notebook", app=app, owner="bob",
        working_dir=str(home), base_url="/nb/x/", **fields,
    )  # fmt: skip


def unix_get(path: str, url: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("localhost", timeout=10)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    connection.sock = sock
    connection.request("GET", url)
    response = connection.getresponse()
    return response.status, response.read()


# -- what this host offers ---------------------------------------------------------------------


def test_apps_list_only_what_this_host_can_run_and_say_why_not(short_root: Path) -> None:
    bare = make_backend(
        short_root, code_server="/nonexistent/code-server", novnc_dir="/nonexistent"
    )
    assert {"jupyter", "terminal"} <= bare.apps
    assert not {"vscode", "desktop", "pycharm-desktop"} & bare.apps
    assert bare.unavailable["vscode"].code == R.VSCODE_NOT_INSTALLED.code
    assert bare.unavailable["desktop"].code == R.DESKTOP_NOT_INSTALLED.code
    assert "noVNC" in str(bare.unavailable["desktop"])


def test_pycharm_is_offered_only_where_pycharm_home_is_a_pycharm(short_root: Path) -> None:
    needs_desktop()
    unset = make_backend(short_root)
    assert "desktop" in unset.apps and "pycharm-desktop" not in unset.apps
    assert str(unset.unavailable["pycharm-desktop"]) == (
        "PyCharm is not installed on this host: set PYCHARM_HOME"
    )
    wrong = make_backend(short_root, pycharm_home=str(short_root))
    assert "pycharm-desktop" not in wrong.apps
    assert "has no bin/pycharm.sh" in str(wrong.unavailable["pycharm-desktop"])
    fake = short_root / "pycharm"
    (fake / "bin").mkdir(parents=True)
    launcher = fake / "bin" / "pycharm.sh"
    launcher.write_text("#!/bin/sh\nexec xterm -title PyCharm\n")
    launcher.chmod(0o755)
    configured = make_backend(short_root, pycharm_home=str(fake))
    assert "pycharm-desktop" in configured.apps
    assert fake in configured.readonly_paths  # the sandbox lets tasks read it


def test_an_unavailable_app_is_refused_at_submit_with_its_reason(short_root: Path) -> None:
    backend = make_backend(short_root, code_server="/nonexistent/code-server")
    with pytest.raises(BackendError) as refused:
        backend.submit(notebook("vscode", short_root / "home"))
    assert not refused.value.transient
    assert refused.value.reason is not None
    assert refused.value.reason.code == R.VSCODE_NOT_INSTALLED.code


# -- VS Code -----------------------------------------------------------------------------------


def test_vscode_serves_the_workbench_on_a_private_socket_with_the_home_as_workspace(
    short_root: Path,
) -> None:
    code_server()
    backend = make_backend(short_root)
    home = short_root / "home"
    spec = notebook("vscode", home)
    handle = backend.submit(spec)
    observation = wait_for(backend, handle, Phase.RUNNING, Phase.FAILED, timeout=60)
    assert observation.phase == Phase.RUNNING, all_logs(backend, handle)
    endpoint = backend.endpoint(handle)
    assert endpoint is not None and endpoint.unix_socket
    run_dir = short_root / "root" / spec.workload_id / "run"
    assert Path(endpoint.unix_socket).parent == run_dir / "code-server"
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(os.stat(endpoint.unix_socket).st_mode) == 0o600
    status, body = unix_get(endpoint.unix_socket, "/")
    assert status == 302  # to ./?folder=<home>
    status, body = unix_get(endpoint.unix_socket, f"/?folder={home}")
    assert status == 200 and b"workbench" in body
    # No TCP port: nothing of this workload listens on the network.
    assert backend.logs(handle).text.count("HTTP server listening on") == 1
    assert "listening on http://" not in backend.logs(handle).text
    backend.stop(handle)
    assert wait_for(backend, handle, Phase.STOPPED, timeout=30).phase == Phase.STOPPED


# -- desktops ----------------------------------------------------------------------------------


def x_windows(backend: LocalBackend, handle: Handle, run_dir: Path, display_log: str) -> str:
    """The X server's window tree, asked from where the desktop's programs run: inside the
    workload's sandbox (its X socket is in the sandbox's private /tmp), else on the host."""
    display = display_log.split("on display ", 1)[1].split(",", 1)[0]
    env = dict(os.environ, DISPLAY=display, XAUTHORITY=str(run_dir / "Xauthority"))
    state = backend._read_state(backend.root / handle.workload_id) or {}
    prefix = backend._sandbox_enter_prefix(state)
    return subprocess.run(
        [*prefix, "xwininfo", "-root", "-tree"],
        env=env,
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout


def test_a_desktop_shows_the_templates_program_on_an_rfb_socket(short_root: Path) -> None:
    needs_desktop()
    backend = make_backend(short_root)
    spec = notebook("desktop", short_root / "home", program=("xterm", "-title", "quanta-test"))
    handle = backend.submit(spec)
    assert wait_for(backend, handle, Phase.RUNNING, Phase.FAILED, timeout=30).phase == Phase.RUNNING
    endpoint = backend.endpoint(handle)
    assert endpoint is not None and endpoint.rfb_socket and endpoint.static_dir
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as rfb:
        rfb.connect(endpoint.rfb_socket)
        assert rfb.recv(12).startswith(b"RFB 003.")
    run_dir = Path(endpoint.rfb_socket).parent
    for _ in range(100):
        log = all_logs(backend, handle)
        if "started xterm" in log and "quanta-test" in x_windows(backend, handle, run_dir, log):
            break
        time.sleep(0.1)
    assert '"quanta-test"' in x_windows(backend, handle, run_dir, all_logs(backend, handle))
    # The X server refuses a client without the workload's cookie.
    display = log.split("on display ", 1)[1].split(",", 1)[0]
    refused = subprocess.run(
        ["xwininfo", "-root"], env=dict(os.environ, DISPLAY=display, XAUTHORITY="/dev/null"),
        capture_output=True, text=True, timeout=10,
    )  # fmt: skip
    assert refused.returncode != 0
    backend.stop(handle)
    assert wait_for(backend, handle, Phase.STOPPED, timeout=30).phase == Phase.STOPPED


def test_a_desktop_whose_program_is_missing_fails_with_that_reason(short_root: Path) -> None:
    needs_desktop()
    backend = make_backend(short_root)
    spec = notebook("desktop", short_root / "home", program=("no-such-ide",))
    with pytest.raises(BackendError) as refused:
        backend.submit(spec)
    assert str(refused.value) == "no-such-ide: not found on this host"
    assert not refused.value.transient


def test_a_desktop_program_that_vanishes_after_submit_ends_failed_not_starting(
    short_root: Path,
) -> None:
    needs_desktop()
    tool = short_root / "bin" / "vanishing-ide"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    backend = make_backend(short_root)
    spec = notebook(
        "desktop", short_root / "home", program=(str(tool),), env={"PATH": os.environ["PATH"]}
    )
    # Accepted at submit (the check passed), then gone before the launcher looks for it.
    backend._desktop_program = lambda _spec: [str(tool)]  # type: ignore[method-assign]
    tool.unlink()
    handle = backend.submit(spec)
    observation = wait_for(backend, handle, Phase.FAILED, Phase.RUNNING, Phase.STOPPED, timeout=30)
    assert observation.phase == Phase.FAILED
    assert f"{tool}: not found on this host" in str(observation.reason)


def test_a_desktop_without_a_program_is_refused(short_root: Path) -> None:
    needs_desktop()
    backend = make_backend(short_root)
    with pytest.raises(BackendError, match="names no program"):
        backend.submit(notebook("desktop", short_root / "home"))
