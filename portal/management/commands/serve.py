"""`manage.py serve`: the embedded mode's server (what `make run` starts): the ASGI
development server plus, without REDIS_URL, the periodic tasks on a thread, and the SSH
gateway on a thread of its own (unless SSH_GATEWAY_PORT is 0; docs/ssh.md). With DEBUG off
(the default) static files are served by whitenoise from STATIC_ROOT: collected first when
they never were (`make run` collects them whenever they change).

The server listens with a backlog of ``WEB_BACKLOG`` connections (Twisted's default is 50: a
burst of a few hundred browsers or scripts connecting at once would find connections refused
or dropped before the portal could answer them, even with a 503)."""

from pathlib import Path
from typing import Any

from daphne.management.commands import runserver
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from portal.embedded import EmbeddedBeat
from scheduling.choices import BackendKind
from scheduling.inventory import sync_backend_nodes
from scheduling.models import Cluster
from workloads.ssh.server import GatewayThread


class Command(BaseCommand):
    help = "Serve Quanta for one machine: ASGI server and, without Redis, in-process beat."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")

    def handle(self, *args: Any, addrport: str, **options: Any) -> None:
        if not settings.DEBUG and not (Path(settings.STATIC_ROOT) / "staticfiles.json").exists():
            self.stdout.write(f"Collecting static files into {settings.STATIC_ROOT} …")
            call_command("collectstatic", interactive=False, verbosity=0)
        for cluster in Cluster.objects.exclude(backend=BackendKind.KUBERNETES):
            sync_backend_nodes(cluster)
        if not settings.REDIS_URL:
            EmbeddedBeat().start()
        if settings.SSH_GATEWAY_PORT:  # a port that cannot be bound is logged, not fatal
            GatewayThread(
                settings.SSH_GATEWAY_HOST, settings.SSH_GATEWAY_PORT, settings.SSH_HOST_KEY_FILE
            ).start()
        listen = runserver.build_endpoint_description_strings
        backlog = settings.WEB_BACKLOG

        def with_backlog(**where: Any) -> list[str]:
            return [
                f"{e}:backlog={backlog}" if e.startswith("tcp:") else e for e in listen(**where)
            ]

        runserver.build_endpoint_description_strings = with_backlog
        try:
            call_command("runserver", addrport, use_reloader=False)
        finally:
            runserver.build_endpoint_description_strings = listen
