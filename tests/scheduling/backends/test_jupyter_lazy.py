"""What JupyterLab workloads import first (local.LAZY_IMPORTS). The lazy ``rfc3987_syntax``:
importing jsonschema's format checkers no longer builds the IRI parsers, and an IRI is
checked exactly as the installed package checks it, on first use. ``quanta_jupyterlab``:
JupyterLab starts without running Node.js for yarn's configuration."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from scheduling.backends.local import LAZY_IMPORTS

PROBE = """
import sys, time
import jsonschema
started = time.perf_counter()
import jupyter_events  # what jupyter_server imports at start
print("built at import:", "rfc3987_syntax.syntax_helpers" in sys.modules)
checker = jsonschema.FormatChecker()
good = checker.conforms("https://例え.jp/パス?q=1", "iri")
bad = checker.conforms("not an iri", "iri")
print("checks:", good, bad)
print("built after a check:", "rfc3987_syntax.syntax_helpers" in sys.modules)
"""


def environment(lazy: bool = True) -> dict[str, str]:
    """This process's environment with ``LAZY_IMPORTS`` alone on ``PYTHONPATH`` (or none)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if lazy:
        env["PYTHONPATH"] = str(LAZY_IMPORTS)
    return env


def run(lazy: bool) -> str:
    env = environment(lazy)
    result = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_jupyter_imports_without_building_the_iri_parsers_and_iris_are_checked_the_same() -> None:
    pytest.importorskip("rfc3987_syntax", reason="jsonschema's IRI check is not installed here")
    pytest.importorskip("jupyter_events", reason="JupyterLab is not installed here")
    eager, lazy = run(lazy=False), run(lazy=True)
    assert "built at import: True" in eager
    assert "built at import: False" in lazy
    assert "checks: True False" in eager and "checks: True False" in lazy
    assert "built after a check: True" in lazy


def lab_version(module: str, bin_dir: Path) -> str:
    env = environment()
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    result = subprocess.run(
        [sys.executable, "-m", module, "--version"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_jupyterlab_starts_without_asking_node_for_yarns_configuration(tmp_path: Path) -> None:
    jupyterlab = pytest.importorskip("jupyterlab", reason="JupyterLab is not installed here")
    called = tmp_path / "node-was-run"
    node = tmp_path / "bin" / "node"  # a node that notes it ran, first on the PATH
    node.parent.mkdir()
    node.write_text(f"#!/bin/sh\necho \"$@\" >> {called}\necho '{{}}'\n")
    node.chmod(node.stat().st_mode | stat.S_IXUSR)
    assert lab_version("jupyterlab", node.parent) == jupyterlab.__version__
    assert "config --json" in called.read_text()  # the stock entry point asks node
    called.unlink()
    assert lab_version("quanta_jupyterlab", node.parent) == jupyterlab.__version__
    assert not called.exists()
