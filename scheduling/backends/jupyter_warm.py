"""A JupyterLab server that has a kernel ready before the first notebook asks for one.

The local backend copies this file into a JupyterLab workload's private config directory as
``jupyter_server_config.py`` (Jupyter runs it as a config file, inside the sandbox: it imports
nothing of the portal). The kernel manager it installs starts one kernel as soon as the server's
event loop runs, before the loop serves any request, waits until that kernel
answers a ``kernel_info_request``, and hands it to the first notebook opened in the root
folder. So the server says it has an idle kernel only once one really answers (the backend
marks the workload Running then, not before), and a fresh notebook's first cell runs on a
kernel that is already up instead of waiting for a new one to import IPython on the
workload's share of a CPU.

Only one kernel is ever warmed per server: a second would cost the same memory and CPU again
while the person is already working.

A new notebook also gets its session (and kernel) from the server as the notebook file is
created, before JupyterLab opens it (``SessionContentsManager``). JupyterLab 4.6 loses a cell
run while its notebook's session is still being created: its ``runCell`` sees no kernel,
starts one itself (``sessionContext.startKernel()``), which races the session its
``sessionContext.initialize()`` starts a moment later; the loser is shut down (the "kernel
swap": two ``POST /api/sessions``, a ``DELETE`` of the first), and ``CodeCell.execute`` finds
``session.kernel`` still empty and clears the cell without a word. A session that already
exists for the notebook's path is what ``initialize()`` looks for first: it connects to it at
once. A cell run before that still makes ``runCell`` ask for a session of its own (a
temporary path, the notebook's name); ``AheadSessionManager`` gives that one the kernel made
ahead, and keeps the kernel when JupyterLab then deletes the session made ahead (a kernel
another session still uses is not shut down), so the cell runs on the kernel already up.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import time
from typing import Any

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from jupyter_server.services.sessions.sessionmanager import KernelName, ModelName, SessionManager
from tornado.ioloop import IOLoop

WARM_READY_TIMEOUT = 120.0  # seconds a warm kernel may take to answer before it is given up
AHEAD_CLAIM_SECONDS = 60.0  # a session made ahead lends its kernel this long after it was made


class WarmKernelManager(AsyncMappingKernelManager):
    """Starts one kernel ahead of demand; the first notebook at the root folder adopts it."""

    _warm_task: asyncio.Task[str | None] | None = None
    _warm_id: str | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The server makes its kernel manager after its IOLoop (ServerApp.init_ioloop), and
        # starts that loop once it listens: the kernel then imports IPython while the server
        # answers its first requests (the readiness probe's too: a callback added before
        # the loop starts runs before any request is served).
        IOLoop.current().add_callback(self.warm_up)

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
        kernel = self.get_kernel(kernel_id)
        if getattr(kernel, "execution_state", None) == "starting":
            # The server learns a kernel's state from its IOPub "status" messages, and the
            # "idle" after the kernel_info reply can be published before the server's own
            # subscription has joined (ZeroMQ's slow joiner): the kernel would then be
            # listed as "starting" until it next does something, and the workload would stay
            # Starting with a kernel that answers. It has just answered: it is idle.
            kernel.execution_state = "idle"  # type: ignore[attr-defined]
        self._warm_id = kernel_id
        self.log.info("warm kernel %s is ready", kernel_id)
        return kernel_id

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


class AheadSessionManager(SessionManager):
    """Sessions made ahead for new notebooks (``create_ahead``) lend their kernel to the
    session JupyterLab asks for the same notebook before it has connected to them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ahead: dict[str, tuple[str, str, float]] = {}  # path → (kernel id, name, made)

    async def create_ahead(self, path: str, name: str) -> dict[str, Any]:
        model: dict[str, Any] = await self.create_session(
            path=path, name=ModelName(name), type="notebook", kernel_name=None
        )
        kernel = model["kernel"]
        self._ahead[path] = (kernel["id"], kernel["name"], time.monotonic())
        return model

    async def create_session(
        self,
        path: str | None = None,
        name: ModelName | None = None,
        type: str | None = None,
        kernel_name: KernelName | None = None,
        kernel_id: str | None = None,
    ) -> dict[str, Any]:
        if kernel_id is None and type == "notebook" and name and path:
            # JupyterLab names a new session's path at random and renames it afterwards:
            # the notebook it is for is its name, in the same folder.
            notebook = posixpath.normpath(posixpath.join(posixpath.dirname(path), name))
            ahead = self._ahead.get(notebook)
            if ahead is not None and notebook != path:
                lent, lent_name, made = ahead
                fresh = time.monotonic() - made < AHEAD_CLAIM_SECONDS
                if fresh and kernel_name in (None, lent_name) and lent in self.kernel_manager:
                    del self._ahead[notebook]
                    self.log.info("a new session for %s takes its kernel %s", notebook, lent)
                    kernel_id = lent
        model: dict[str, Any] = await super().create_session(
            path=path, name=name, type=type, kernel_name=kernel_name, kernel_id=kernel_id
        )
        return model

    async def delete_session(self, session_id: str) -> None:
        session = await self.get_session(session_id=session_id)
        kernel_id = session["kernel"]["id"]
        for path, ahead in list(self._ahead.items()):
            if ahead[0] == kernel_id:
                del self._ahead[path]
        others = [s for s in await self.list_sessions() if s["id"] != session_id and s["kernel"]]
        if any(s["kernel"]["id"] == kernel_id for s in others):
            # Another session uses this kernel (the one that took it over): keep the kernel.
            self.cursor.execute("DELETE FROM session WHERE session_id=?", (session_id,))
            return
        await super().delete_session(session_id)


class SessionContentsManager(AsyncLargeFileManager):
    """Creates a new untitled notebook's session (with the default kernel: the warm one at
    the root folder) together with the file, so the notebook has a kernel when it opens."""

    async def new_untitled(self, path: str = "", type: str = "", ext: str = "") -> Any:
        model = await super().new_untitled(path=path, type=type, ext=ext)
        if model.get("type") != "notebook":
            return model
        server = self.parent
        sessions = getattr(server, "session_manager", None)
        specs = getattr(server, "kernel_spec_manager", None)
        if sessions is None or specs is None:
            return model
        try:
            # Only when the default kernel is the only one: the launcher's card may name
            # another, which a session made here would override (JupyterLab reuses it).
            if len(specs.find_kernel_specs()) != 1:
                return model
            if isinstance(sessions, AheadSessionManager):
                await sessions.create_ahead(model["path"], model["name"])
            else:
                await sessions.create_session(
                    path=model["path"], name=model["name"], type="notebook", kernel_name=None
                )
        except Exception:
            self.log.exception("no session made ahead for the new notebook %s", model["path"])
        return model


if "get_config" in globals():  # run by Jupyter as a config file
    get_config().ServerApp.kernel_manager_class = WarmKernelManager  # type: ignore[name-defined]  # noqa: F821
    get_config().ServerApp.contents_manager_class = SessionContentsManager  # type: ignore[name-defined]  # noqa: F821
    get_config().ServerApp.session_manager_class = AheadSessionManager  # type: ignore[name-defined]  # noqa: F821
