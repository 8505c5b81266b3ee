"""`manage.py serve`: the embedded mode's server (what `make run` starts): the ASGI
development server plus, without REDIS_URL, the periodic tasks on a thread."""

from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from portal.embedded import EmbeddedBeat
from scheduling.models import Cluster
from workloads import services


class Command(BaseCommand):
    help = "Serve Quanta for one machine: ASGI server and, without Redis, in-process beat."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")

    def handle(self, *args: Any, addrport: str, **options: Any) -> None:
        for cluster in Cluster.objects.exclude(backend="kubernetes"):
            services.sync_nodes(cluster)
        if not settings.REDIS_URL:
            EmbeddedBeat().start()
        call_command("runserver", addrport, use_reloader=False)
