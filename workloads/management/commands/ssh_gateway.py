"""`manage.py ssh_gateway`: the SSH gateway on its own (`manage.py serve` also runs it)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from workloads.ssh import server


class Command(BaseCommand):
    help = "Run the SSH gateway (ssh <workload>@<portal> -p <port>) until interrupted."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--host", default=settings.SSH_GATEWAY_HOST)
        parser.add_argument("--port", type=int, default=settings.SSH_GATEWAY_PORT or 2222)
        parser.add_argument("--host-key", default=str(settings.SSH_HOST_KEY_FILE))

    def handle(self, *args: Any, host: str, port: int, host_key: str, **options: Any) -> None:
        async def main() -> None:
            try:
                acceptor = await server.start(host, port, Path(host_key))
            except OSError as error:
                raise CommandError(f"cannot listen on {host}:{port}: {error}") from error
            self.stdout.write(f"SSH gateway listening on {host}:{acceptor.get_port()}")
            await acceptor.wait_closed()

        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(main())
