"""What of the workloads app still uses a queue or a priority class, asked by
``scheduling.services`` before an admin deletes one (registered in ``WorkloadsConfig.ready``).

Each check returns the sentence an admin reads when the delete is refused, or "" when nothing
here uses the object.
"""

from __future__ import annotations

from django.db.models import Count
from django.utils.translation import ngettext

from scheduling.inventory import queue_resolver
from scheduling.models import PriorityClass, Queue
from tenants.models import Tenant
from workloads.choices import ACTIVE
from workloads.models import Grant, Workload


def queue_in_use(queue: Queue) -> str:
    """Workloads that have not finished and whose tenant the queue takes (a workload's queue
    is not stored: it is the one naming its tenant or the nearest ancestor)."""
    counts = dict(
        Workload.objects.filter(cluster_id=queue.cluster_id, state__in=ACTIVE)
        .values_list("tenant")
        .annotate(n=Count("pk"))
        .values_list("tenant", "n")
    )
    if not counts:
        return ""
    resolve = queue_resolver(queue.cluster)
    tenants = Tenant.objects.in_bulk(list(counts))
    count = sum(n for pk, n in counts.items() if resolve(tenants[pk]) == queue.name)
    if not count:
        return ""
    return ngettext(
        "Queue %(name)s has %(count)d workload that has not finished: wait for it to end or "
        "stop it first.",
        "Queue %(name)s has %(count)d workloads that have not finished: wait for them to end "
        "or stop them first.",
        count,
    ) % {"name": queue.name, "count": count}


def priority_class_in_use(priority_class: PriorityClass) -> str:
    """Grants that give it, and waiting or running work launched with its value (on
    Kubernetes a pod names the class with its value) while no other class has that value."""
    grants = Grant.objects.filter(priority_class=priority_class).count()
    if grants:
        return ngettext(
            "Priority class %(name)s is given by %(count)d grant: choose another for it first.",
            "Priority class %(name)s is given by %(count)d grants: choose another for them first.",
            grants,
        ) % {"name": priority_class.name, "count": grants}
    value = priority_class.value
    shared = PriorityClass.objects.filter(value=value).exclude(pk=priority_class.pk).exists()
    if value == 0 or shared:  # 0 is the default priority: it needs no class
        return ""
    workloads = Workload.objects.filter(state__in=ACTIVE, priority=value).count()
    if not workloads:
        return ""
    return ngettext(
        "Priority class %(name)s is the priority of %(count)d waiting or running workload: "
        "wait for it to end first.",
        "Priority class %(name)s is the priority of %(count)d waiting or running workloads: "
        "wait for them to end first.",
        workloads,
    ) % {"name": priority_class.name, "count": workloads}
