"""A JupyterLab server that has a kernel ready before the first notebook asks for one.

The local backend copies this file into a JupyterLab workload's private config directory as
``jupyter_server_config.py`` (Jupyter runs it as a config file, inside the sandbox: it imports
nothing of the portal). The kernel manager it installs starts one kernel as soon as the server
is first asked for its kernels (the backend's readiness probe asks), waits until that kernel
answers a ``kernel_info_request``, and hands it to the first notebook opened in the root
folder. So the server says it has an idle kernel only once one really answers (the backend
marks the workload Running then, not before), and a fresh notebook's first cell runs on a
kernel that is already up instead of waiting for a new one to import IPython on the
workload's share of a CPU.

Only one kernel is ever warmed per server: a second would cost the same memory and CPU again
while the person is already working.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager

WARM_READY_TIMEOUT = 120.0  # seconds a warm kernel may take to answer before it is given up


class WarmKernelManager(AsyncMappingKernelManager):
    """Starts one kernel ahead of demand; the first notebook at the root folder adopts it."""

    _warm_task: asyncio.Task[str | None] | None = None
    _warm_id: str | None = None

    def warm_up(self) -> None:
        """Start the warm kernel once (later calls do nothing)."""
        if self._warm_task is None:
            self._warm_task = asyncio.ensure_future(self._start_warm())

    async def _start_warm(self) -> str | None:
        kernel_id: str = await super().start_kernel(path="")  # type: ignore[arg-type]
        client = self.get_kernel(kernel_id).client()
        client.start_channels()
        try:
            # kernel_info until it answers: afterwards the kernel's status is "idle".
            await client.wait_for_ready(timeout=WARM_READY_TIMEOUT)  # type: ignore[misc]
        except Exception:
            self.log.warning("the warm kernel %s did not answer; not used", kernel_id)
            return None
        finally:
            client.stop_channels()
        self._warm_id = kernel_id
        self.log.info("warm kernel %s is ready", kernel_id)
        return kernel_id

    def list_kernels(self) -> list[dict[str, Any]]:
        self.warm_up()
        kernels: list[dict[str, Any]] = super().list_kernels()
        return kernels

    async def start_kernel(  # type: ignore[override]
        self, *, kernel_id: str | None = None, path: str | None = None, **kwargs: Any
    ) -> str:
        name = kwargs.get("kernel_name") or self.default_kernel_name
        at_root = path is None or os.path.normpath(self.cwd_for_path(path)) == os.path.normpath(
            self.root_dir
        )
        if (
            kernel_id is None
            and self._warm_task is not None
            and name == self.default_kernel_name
            and at_root
        ):
            task, self._warm_task = self._warm_task, asyncio.ensure_future(_nothing())
            warm = await task  # still starting: it is further along than a new one would be
            if warm is not None and warm in self:
                self._warm_id = None
                self.log.info("a new session takes the warm kernel %s", warm)
                return warm
        started: str = await super().start_kernel(
            kernel_id=kernel_id,
            path=path,  # type: ignore[arg-type]
            **kwargs,
        )
        return started


async def _nothing() -> None:
    return None


if "get_config" in globals():  # run by Jupyter as a config file
    get_config().ServerApp.kernel_manager_class = WarmKernelManager  # type: ignore[name-defined]  # noqa: F821
