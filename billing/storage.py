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
from django.db.models import Q
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


class _Payers:
    """The payers' accounts of a tick's datasets, read in one query (an account is made only
    for a payer billed for the first time)."""

    def __init__(self, datasets: list[Dataset]) -> None:
        tenant_ids = {d.tenant_id for d in datasets if self._shared(d)}
        user_ids = {d.owner_id for d in datasets if not self._shared(d)}
        self._ids: dict[tuple[str, int | None], int] = {}
        for account_id, tenant_id, user_id in Account.objects.filter(
            Q(tenant_id__in=tenant_ids) | Q(user_id__in=user_ids)
        ).values_list("pk", "tenant_id", "user_id"):
            key = ("tenant", tenant_id) if tenant_id is not None else ("user", user_id)
            self._ids[key] = account_id

    @staticmethod
    def _shared(dataset: Dataset) -> bool:
        return dataset.visibility == Visibility.TENANT and dataset.tenant_id is not None

    def of(self, dataset: Dataset) -> int:
        """The id of the account that pays for ``dataset``: the tenant it is shared with,
        otherwise its owner."""
        if dataset.tenant is not None and self._shared(dataset):
            key = ("tenant", dataset.tenant_id)
            if key not in self._ids:
                self._ids[key] = services.account_for_tenant(dataset.tenant).pk
        else:
            key = ("user", dataset.owner_id)
            if key not in self._ids:
                self._ids[key] = services.account_for_user(dataset.owner).pk
        return self._ids[key]


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
    datasets = list(Dataset.objects.select_related("owner", "tenant"))
    payers = _Payers(datasets)
    for dataset in datasets:
        mib = stored_mib(dataset)
        account_id = payers.of(dataset)
        current = open_by_dataset.get(dataset.pk)
        if current is not None and (current.storage_mib, current.account_id) == (mib, account_id):
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
                        account_id=account_id,
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
