"""Start JupyterLab (``python -m quanta_jupyterlab``, as ``python -m jupyterlab`` would) without
asking Node.js for yarn's configuration first.

``jupyterlab.labapp`` computes the application's version when it is imported
(``app_version = get_app_version()``), and the default of that computation's ``registry`` option
runs ``node yarn.js config --json`` whenever ``node`` is on the PATH: 0.6 s of wall time and
Node.js's start-up on the workload's CPU, before the server can answer. The registry it reads
is used only to install or build extensions, which a workload's read-only JupyterLab never does
(its extension manager is "readonly", and the portal turns the build check off). So this
module answers yarn's configuration as empty, as JupyterLab itself does when Node.js is absent,
and then runs JupyterLab's own entry point. ``node`` stays on the PATH for the student's
terminals and kernels.

The local backend puts this directory first on ``PYTHONPATH`` for JupyterLab only
(``local.LAZY_IMPORTS``); it imports nothing of the portal.
"""

from __future__ import annotations

import sys
from typing import Any

import jupyterlab.commands


def _no_yarn_config(logger: Any) -> dict[str, dict[str, Any]]:
    """What ``jupyterlab.commands._yarn_config`` answers when Node.js is not installed."""
    return {"yarn config": {}, "npm config": {}}


def main() -> None:
    jupyterlab.commands._yarn_config = _no_yarn_config  # before labapp is imported
    from jupyterlab.labapp import main as lab_main

    sys.exit(lab_main())


if __name__ == "__main__":
    main()
