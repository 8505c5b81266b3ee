"""VS Code, desktops and PyCharm through the portal on a real local cluster: offered only
where this host can run them (the App Center, the admin catalog), and bad input ends with
its reason (a missing program fails the workload, never leaves it Starting)."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from django.test import Client

from scheduling.backends import registry
from tests.workloads.conftest import local_catalog, wait_for
from workloads import services
from workloads.choices import State

pytestmark = pytest.mark.django_db


@pytest.fixture
def host(settings: Any, tmp_path: Any) -> Any:
    settings.DATA_DIR = tmp_path
    registry.forget()
    yield settings
    registry.forget()


def test_a_desktop_whose_program_is_missing_fails_with_that_reason(
    world: Any, host: Any, run: Any
) -> None:
    if not all(shutil.which(name) for name in ("Xvnc", "xauth", "openbox")):
        pytest.skip("TigerVNC (Xvnc, xauth) or openbox is not installed here: run make apps")
    cluster, template, _ = local_catalog(world, "desktop")
    template.program = "no-such-ide --wait"
    template.save()
    workload = run(services.launch_environment, actor=world.bob, template=template)
    workload = wait_for(cluster, workload, State.FAILED, 30)
    assert workload.reason == "no-such-ide: not found on this host"
    assert workload.reason_code == "app_not_installed"


def test_vscode_is_not_offered_where_code_server_is_missing_and_says_why(
    world: Any, host: Any, run: Any
) -> None:
    host.CODE_SERVER_BIN = "/nonexistent/code-server"
    _cluster, template, _ = local_catalog(world, "vscode")
    student = Client()
    student.force_login(world.bob)
    page = student.get("/apps/").content.decode()
    assert 'data-template="vscode"' not in page
    # Asked for anyway (the API): rejected at admission with the reason, not started.
    workload = run(services.launch_environment, actor=world.bob, template=template)
    assert workload.state == State.REJECTED
    assert workload.reason == (
        "VS Code (code-server) is not installed on this host: run make apps, or set CODE_SERVER_BIN"
    )
    admin = Client()
    admin.force_login(world.root)
    catalog = admin.get("/console/catalog/").content.decode()
    assert "not offered on This host" in catalog
    assert "VS Code (code-server) is not installed on this host" in catalog


def test_pycharm_is_offered_where_pycharm_home_holds_a_pycharm(
    world: Any, host: Any, tmp_path: Any
) -> None:
    if not all(shutil.which(name) for name in ("Xvnc", "xauth", "openbox")):
        pytest.skip("TigerVNC (Xvnc, xauth) or openbox is not installed here: run make apps")
    local_catalog(world, "pycharm-desktop")
    student = Client()
    student.force_login(world.bob)
    assert 'data-template="pycharm-desktop"' not in student.get("/apps/").content.decode()
    launcher = tmp_path / "pycharm" / "bin" / "pycharm.sh"
    launcher.parent.mkdir(parents=True)
    launcher.write_text("#!/bin/sh\nexec xterm\n")
    launcher.chmod(0o755)
    host.PYCHARM_HOME = str(tmp_path / "pycharm")
    registry.forget()
    assert 'data-template="pycharm-desktop"' in student.get("/apps/").content.decode()
