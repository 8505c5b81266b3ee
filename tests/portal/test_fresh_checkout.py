"""A fresh checkout (the tracked files only: no var/, no .env, none of Quanta's variables)
answers `manage.py replay --help` and passes `manage.py check --deploy` without a warning."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# check --deploy warnings the embedded default accepts, each for a reason docs/operations.md
# gives: TLS and its redirect are the reverse proxy's; HSTS subdomains and preload are the
# university's decision; the notebook proxy's apps frame their own pages (SAMEORIGIN).
ACCEPTED = {"security.W008", "security.W005", "security.W021", "security.W019"}
QUANTA_VARIABLES = ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DEBUG", "DATA_DIR", "STATIC_ROOT")


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False, timeout=60
    )
    if files.returncode != 0:
        pytest.skip(f"not a git checkout: {files.stderr.decode()[:200]}")
    copy = tmp_path_factory.mktemp("fresh") / "quanta"
    for name in files.stdout.decode().split("\0"):
        source = ROOT / name
        if name and source.is_file():  # tracked files as they are in the working tree
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    assert not (copy / "var").exists()
    return copy


def manage(checkout: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in QUANTA_VARIABLES}
    env.pop("PYTHONPATH", None)  # the copy's own packages, not this checkout's
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_replay_help_answers(checkout: Path) -> None:
    result = manage(checkout, "replay", "--help")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "--policy" in result.stdout
    assert result.stderr == ""


def test_check_deploy_passes_without_a_warning(checkout: Path) -> None:
    result = manage(checkout, "check", "--deploy")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "System check identified no issues" in result.stdout
    assert "WARNING" not in result.stderr and "?:" not in result.stderr, result.stderr
    # Silenced are exactly the accepted warnings, and operations.md says why for each.
    silenced = manage(
        checkout, "shell", "-c", "from django.conf import settings; "
        "print(','.join(sorted(settings.SILENCED_SYSTEM_CHECKS)))",
    )  # fmt: skip
    assert set(silenced.stdout.strip().splitlines()[-1].split(",")) == ACCEPTED, silenced.stderr
    operations = (ROOT / "docs" / "operations.md").read_text()
    assert {check for check in ACCEPTED if check not in operations} == set()


def test_check_deploy_reports_an_insecure_setting(checkout: Path) -> None:
    """The check is live: turning secure cookies off is reported."""
    env_check = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=checkout,
        env={
            **{k: v for k, v in os.environ.items() if k not in QUANTA_VARIABLES},
            "SECURE_COOKIES": "false",
        },
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert "security.W012" in env_check.stderr + env_check.stdout
