"""A lazy front for the installed ``rfc3987_syntax``, first on a JupyterLab workload's path.

jupyter_server imports jupyter_events, which imports jsonschema's format checkers, which import
``rfc3987_syntax`` when it is installed (``jsonschema[format-nongpl]``); that package builds
three Earley parsers of the RFC 3987 grammar at import: 1.8 of the 2.7 CPU-seconds that
importing JupyterLab takes, before the server can answer, though nothing checks an IRI at
start. This package has the real one's name and its directory as its ``__path__``: the same
code and grammar, built on the first check of an IRI instead (``is_valid_syntax``, what
jsonschema calls, and any other name on first access). Where the real package is not
installed, importing this one fails as that import would (jsonschema then skips the check).

The local backend puts this directory first on ``PYTHONPATH`` for JupyterLab only
(``local.LAZY_IMPORTS``); it imports nothing of the portal.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any


def _installed() -> str:
    here = Path(__file__).resolve().parent
    for entry in sys.path:
        candidate = Path(entry or ".") / "rfc3987_syntax"
        if (candidate / "syntax_helpers.py").is_file() and candidate.resolve() != here:
            return str(candidate)
    raise ImportError("rfc3987_syntax is not installed")


__path__ = [_installed()]  # its submodules are the installed package's


def _helpers() -> Any:
    return importlib.import_module(__name__ + ".syntax_helpers")  # the parsers: built once


def is_valid_syntax(term: str, value: str) -> bool:
    return bool(_helpers().is_valid_syntax(term, value))


def __getattr__(name: str) -> Any:
    if name.startswith("__") or name in ("syntax_helpers", "utils"):
        raise AttributeError(name)  # a submodule not imported yet, or a dunder probe
    return getattr(_helpers(), name)
