"""Storage metering: what datasets hold, priced per GiB-month.

Each dataset has one open usage interval (``UsageInterval.dataset``, ``storage_mib``) from
the first settlement tick after its registration (within a minute; an install that
upgrades is never charged backwards). Settlement charges it like any other interval
(watermark, month cuts, one rounding), at the ``storage_gib_month`` price of the default
cluster's plan (where the portal keeps its data), pro rata by the actual length of each
calendar month (``pricing.storage_cost``). The payer: the dataset's tenant for one shared
with a class, project or department, otherwise its owner. ``sync_storage`` runs on every
settlement tick: it opens intervals for new datasets, and closes (and reopens) one whose
size or payer changed or whose dataset was deleted (at the tick: at most a tick late).
"""

from __future__ import annotations

import datetime as dt
import logging

from django.db import IntegrityError, transaction
from django.utils import timezone

from billing import services
from billing.models import Account, UsageInterval
from scheduling.models import Cluster
from workloads.choices import Visibility
from workloads.models import Dataset

logger = logging.getLogger(__name__)

MIB = 1024 * 1024


def stored_mib(dataset: Dataset) -> int:
    """Whole MiB, rounded up (a byte more than a MiB is two)."""
    return -(-int(dataset.size_bytes) // MIB)


def payer_of(dataset: Dataset) -> Account:
    if dataset.visibility == Visibility.TENANT and dataset.tenant is not None:
        return services.account_for_tenant(dataset.tenant)
    return services.account_for_user(dataset.owner)


def sync_storage(now: dt.datetime | None = None) -> dict[str, int]:
    """Open, close and reopen the datasets' storage intervals; what it did."""
    now = now or timezone.now()
    done = {"storage_opened": 0, "storage_closed": 0}
    # Deleted datasets (their intervals lost the link): closed now.
    done["storage_closed"] += UsageInterval.objects.filter(
        ended_at__isnull=True, workload__isnull=True, dataset__isnull=True, storage_mib__gt=0
    ).update(ended_at=now)
    cluster = Cluster.objects.filter(is_default=True).first()
    if cluster is None:
        return done  # no price plan to price storage by
    open_by_dataset = {
        row.dataset_id: row
        for row in UsageInterval.objects.filter(ended_at__isnull=True, dataset__isnull=False)
    }
    for dataset in Dataset.objects.select_related("owner", "tenant"):
        mib = stored_mib(dataset)
        account = payer_of(dataset)
        current = open_by_dataset.get(dataset.pk)
        if current is not None and (current.storage_mib, current.account_id) == (mib, account.pk):
            continue
        with transaction.atomic():
            if current is not None:
                UsageInterval.objects.filter(pk=current.pk).update(
                    ended_at=max(now, current.started_at)
                )
                done["storage_closed"] += 1
            if mib == 0:
                continue
            start = now  # from the first tick that sees it: never charged backwards
            try:
                with transaction.atomic():
                    UsageInterval.objects.create(
                        dataset=dataset,
                        account=account,
                        cluster=cluster,
                        owner=dataset.owner,
                        tenant=dataset.tenant,
                        started_at=start,
                        settled_until=start,
                        storage_mib=mib,
                        workload_name=dataset.name[:100],
                        owner_name=dataset.owner.get_username()[:150],
                        flavor_name=_size(mib),
                    )
            except IntegrityError:  # opened meanwhile by another tick
                continue
            done["storage_opened"] += 1
    return done


def _size(mib: int) -> str:
    return f"storage {mib / 1024:.2f} GiB"
