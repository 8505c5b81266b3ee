"""One filterset per list, shared by the page and the API (as netbox does): the workload list
at /workloads/ and /api/v1/workloads/ filter and sort with the same parameters."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import DurationField, ExpressionWrapper, F, QuerySet
from django.db.models.functions import Coalesce, Now
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from tenants.models import Tenant
from workloads.choices import ACTIVE, TERMINAL, State, WorkloadKind
from workloads.models import Workload
from workloads.permissions import visible_workloads

# ``state`` takes one state or a group of them.
STATE_GROUPS = {"active": ACTIVE, "finished": TERMINAL}
STATE_CHOICES = [
    ("active", pgettext_lazy("workload states", "Active (any)")),
    ("finished", pgettext_lazy("workload states", "Finished (any)")),
    *State.choices,
]
# ?ordering= value → what it sorts by (a leading "-" reverses).
SORTS = {
    "name": "name",
    "start": "started_at",
    "end": "finished_at",
    "duration": "duration",
    "state": "state",
    "created_at": "created_at",
}


def with_duration(workloads: QuerySet[Workload]) -> QuerySet[Workload]:
    """``duration``: from start to finish, or to now while it runs (None: never started)."""
    return workloads.annotate(
        duration=ExpressionWrapper(
            Coalesce(F("finished_at"), Now()) - F("started_at"), output_field=DurationField()
        )
    )


def _tenants(request: Any) -> QuerySet[Tenant]:
    """The classes and projects of the workloads the reader may see."""
    if request is None or not request.user.is_authenticated:
        return Tenant.objects.none()
    seen = Workload.objects.filter(visible_workloads(request.user)).values("tenant_id")
    return Tenant.objects.filter(pk__in=seen).order_by("name")


class WorkloadOrdering(django_filters.OrderingFilter):
    def filter(self, qs: Any, value: Any) -> Any:
        if not value:
            return qs
        fields = [
            (
                F(SORTS[v.lstrip("-")]).desc(nulls_last=True)
                if v.startswith("-")
                else F(SORTS[v]).asc(nulls_last=True)
            )
            for v in value
        ]
        return qs.order_by(*fields, "-created_at", "pk")


class WorkloadFilterSet(django_filters.FilterSet):
    state = django_filters.ChoiceFilter(
        label=_("State"), choices=STATE_CHOICES, method="filter_state", empty_label=_("Any")
    )
    kind = django_filters.ChoiceFilter(
        label=_("Kind"), choices=WorkloadKind.choices, empty_label=_("Any")
    )
    tenant = django_filters.ModelChoiceFilter(
        label=_("Class or project"),
        queryset=_tenants,
        to_field_name="slug",
        empty_label=_("Any"),
    )
    owner = django_filters.CharFilter(
        label=_("Owner"), field_name="owner__username", help_text=_("A username.")
    )
    # The API's names for the same two filters, kept for scripts written against them.
    tenant__slug = django_filters.CharFilter(field_name="tenant__slug")
    owner__username = django_filters.CharFilter(field_name="owner__username")
    ordering = WorkloadOrdering(
        label=_("Sort by"),
        fields=[(field, param) for param, field in SORTS.items()],
        field_labels={
            "name": _("Name"),
            "started_at": _("Start"),
            "finished_at": _("End"),
            "duration": _("Duration"),
            "state": _("State"),
            "created_at": _("Submitted"),
        },
    )

    class Meta:
        model = Workload
        fields: list[str] = []

    def __init__(self, data: Any = None, queryset: Any = None, **kwargs: Any) -> None:
        if queryset is None:
            queryset = Workload.objects.all()
        super().__init__(data, with_duration(queryset), **kwargs)

    def filter_state(self, queryset: QuerySet[Workload], name: str, value: str) -> Any:
        if value in STATE_GROUPS:
            return queryset.filter(state__in=STATE_GROUPS[value])
        return queryset.filter(state=value)
