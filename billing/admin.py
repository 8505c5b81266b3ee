"""The admin shows billing read-only: prices change through the API (versions from a stated
time, audited), and ledger entries are never changed or deleted (corrections are new
entries)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from billing.models import Account, LedgerEntry, PricePlan, UsageInterval


class _ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(PricePlan)
class PricePlanAdmin(_ReadOnly):
    list_display = ["cluster", "effective_from", "gpu_hour", "cpu_core_hour", "memory_gib_hour"]
    list_filter = ["cluster"]


@admin.register(Account)
class AccountAdmin(_ReadOnly):
    list_display = ["__str__", "tenant", "user", "created_at"]


@admin.register(UsageInterval)
class UsageIntervalAdmin(_ReadOnly):
    list_display = ["workload_name", "owner_name", "started_at", "ended_at", "settled_until"]
    list_filter = ["is_settled", "cluster"]


@admin.register(LedgerEntry)
class LedgerEntryAdmin(_ReadOnly):
    list_display = ["created_at", "account", "kind", "amount", "description"]
    list_filter = ["kind"]
