"""The web image goes without the `local` extra (JupyterLab, matplotlib): the portal must
import, route and answer without them, and the replay must say what it leaves out."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The extra's packages and what they bring that web code could reach by accident.
BLOCKED = ("jupyterlab", "jupyter_server", "jupyterlab_server", "notebook", "ipykernel",
           "matplotlib", "tensorboard")  # fmt: skip
REFUSE = f"""
import sys

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {BLOCKED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked)", name=name)
        return None

sys.meta_path.insert(0, Refuse())
"""


def run_without_extra(
    tmp_path: Path, code: str = "", *argv: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(DEBUG="true", DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="portal.settings")
    if argv:  # manage.py with the finder in place
        code = "import runpy, sys; sys.argv = ['manage.py', *sys.argv[1:]]; "
        code += "runpy.run_path('manage.py', run_name='__main__')"
    return subprocess.run(
        [sys.executable, "-c", REFUSE + code, *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_the_local_extra_holds_the_notebook_software_and_the_core_does_not() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {dep.split("[")[0].split("=")[0].lower() for dep in project["dependencies"]}
    local = {dep.split("=")[0].lower() for dep in project["optional-dependencies"]["local"]}
    assert {"jupyterlab", "matplotlib"} <= local
    assert not core & local


def test_the_blocker_really_blocks(tmp_path: Path) -> None:
    result = run_without_extra(tmp_path, "import matplotlib")
    assert result.returncode != 0 and "(blocked)" in result.stderr


def test_the_web_urlconf_and_asgi_app_load_and_answer_without_the_local_extra(
    tmp_path: Path,
) -> None:
    code = """
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
import portal.urls
from portal.asgi import application
from django.test import Client
client = Client(SERVER_NAME="localhost")
assert client.get("/healthz").status_code == 200, "healthz"
assert client.get("/login/").status_code in (200, 302), "login"
assert client.get("/").status_code in (200, 302), "home"
loaded = sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED)
print("loaded:", loaded)
"""
    code = f"BLOCKED = {BLOCKED!r}\n" + code
    result = run_without_extra(tmp_path, code)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "loaded: []" in result.stdout


def test_replay_without_matplotlib_writes_its_csv_and_says_why_no_plots(tmp_path: Path) -> None:
    data = ROOT / "tests" / "scheduling" / "data"
    nodes, pods = data / "openb_nodes_sample.csv", data / "openb_pods_sample.csv"
    out = tmp_path / "out"
    help_result = run_without_extra(tmp_path, "", "replay", "--help")
    assert help_result.returncode == 0, help_result.stderr[-3000:]
    result = run_without_extra(
        tmp_path, "", "replay", "--nodes", str(nodes), "--pods", str(pods),
        "--seeds", "1", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "matplotlib is not installed (pip install 'quanta[local]')" in result.stderr
    assert (out / "arrival_runs.csv").is_file()
    assert not list(out.glob("*.png"))
