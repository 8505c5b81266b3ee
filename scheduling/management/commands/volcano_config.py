"""`manage.py volcano_config CLUSTER`: the volcano-scheduler.conf for a cluster's policy.

Prints the file (or, with ``--configmap``, the ConfigMap Volcano reads it from) for the
cluster's placement policy, with a comment on how close Volcano gets to it.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling.backends.kubernetes.schedulerconf import POLICIES, config_map, scheduler_conf
from scheduling.models import Cluster


class Command(BaseCommand):
    help = "Print the volcano-scheduler.conf matching a cluster's placement policy."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("cluster", help="the cluster's slug")
        parser.add_argument("--policy", choices=POLICIES, help="override the cluster's policy")
        parser.add_argument(
            "--configmap", action="store_true", help="print the ConfigMap, for kubectl apply"
        )
        parser.add_argument(
            "--no-vgpu", action="store_true", help="the cluster has no vGPU device plugin"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = Cluster.objects.filter(slug=options["cluster"]).first()
        if cluster is None:
            known = ", ".join(Cluster.objects.values_list("slug", flat=True)) or "none"
            raise CommandError(f"no cluster {options['cluster']!r} (known: {known})")
        policy = options["policy"] or cluster.resolved_placement_policy()
        vgpu = not options["no_vgpu"]
        if options["configmap"]:
            self.stdout.write(config_map(policy, vgpu=vgpu), ending="")
        else:
            self.stdout.write(scheduler_conf(policy, vgpu=vgpu, cluster=cluster.slug), ending="")
