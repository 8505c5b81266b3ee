"""The tenant tree: create, update, move and delete tenants; close ended terms."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from core.audit import record
from tenants.choices import ALLOWED_PARENT_KINDS, TenantKind
from tenants.models import Quota, Tenant

TENANT_FIELDS = ("name", "slug", "term_start", "term_end", "is_active")


def _check_parent(kind: str, parent: Tenant | None) -> None:
    allowed = ALLOWED_PARENT_KINDS[TenantKind(kind)]
    parent_kind = parent.kind if parent else None
    if parent_kind not in allowed:
        if parent is None:
            raise ValidationError(
                {"parent": _("a %(kind)s needs a parent") % {"kind": _(str(kind))}}
            )
        raise ValidationError(
            {
                "parent": _("a %(kind)s cannot be placed under a %(parent)s")
                % {"kind": _(str(kind)), "parent": _(str(parent.kind))}
            }
        )


def _check_term(term_start: dt.date | None, term_end: dt.date | None) -> None:
    if term_start and term_end and term_end < term_start:
        raise ValidationError({"term_end": _("the term cannot end before it starts")})


def _check_slug_free(slug: str, exclude: Tenant | None = None) -> None:
    taken = Tenant.objects.filter(slug__iexact=slug)  # codes are typed in any case
    if exclude is not None:
        taken = taken.exclude(pk=exclude.pk)
    if taken.exists():
        raise ValidationError(
            {"slug": _("the slug %(slug)r is already used by another tenant") % {"slug": slug}}
        )


@transaction.atomic
def create_tenant(
    *,
    actor: Any,
    kind: str,
    name: str,
    slug: str,
    parent: Tenant | None = None,
    term_start: dt.date | None = None,
    term_end: dt.date | None = None,
    is_active: bool = True,
) -> Tenant:
    _check_parent(kind, parent)
    _check_term(term_start, term_end)
    _check_slug_free(slug)
    tenant = Tenant.objects.create(
        kind=kind,
        name=name,
        slug=slug,
        parent=parent,
        term_start=term_start,
        term_end=term_end,
        is_active=is_active,
    )
    tenant.path = f"{parent.path if parent else '/'}{tenant.pk}/"
    tenant.save(update_fields=["path"])
    Quota.objects.create(tenant=tenant)
    record(
        "tenant.create",
        actor=actor,
        target=tenant,
        tenant=tenant,
        kind=kind,
        parent=parent.slug if parent else None,
    )
    return tenant


@transaction.atomic
def update_tenant(*, actor: Any, tenant: Tenant, **changes: Any) -> Tenant:
    unknown = set(changes) - set(TENANT_FIELDS)
    if unknown:
        raise ValidationError({name: _("cannot be changed here") for name in unknown})
    if "slug" in changes:
        _check_slug_free(changes["slug"], exclude=tenant)
    _check_term(
        changes.get("term_start", tenant.term_start), changes.get("term_end", tenant.term_end)
    )
    before = {name: getattr(tenant, name) for name in changes}
    for name, value in changes.items():
        setattr(tenant, name, value)
    tenant.save(update_fields=list(changes))
    record(
        "tenant.update",
        actor=actor,
        target=tenant,
        tenant=tenant,
        changes={k: [before[k], v] for k, v in changes.items() if before[k] != v},
    )
    return tenant


@transaction.atomic
def move_tenant(*, actor: Any, tenant: Tenant, parent: Tenant) -> Tenant:
    """Put ``tenant`` (and its subtree) under ``parent``; refuses cycles."""
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    parent = Tenant.objects.get(pk=parent.pk)
    if parent.path.startswith(tenant.path):
        raise ValidationError(
            {
                "parent": _(
                    "%(parent)s is %(tenant)s itself or inside it; "
                    "a tenant cannot move under its own descendant"
                )
                % {"parent": parent.name, "tenant": tenant.name}
            }
        )
    _check_parent(tenant.kind, parent)
    old_path, old_parent = tenant.path, tenant.parent
    new_path = f"{parent.path}{tenant.pk}/"
    subtree = list(Tenant.objects.select_for_update().filter(path__startswith=old_path))
    for node in subtree:
        node.path = new_path + node.path[len(old_path) :]
        if node.pk == tenant.pk:
            node.parent = parent
    Tenant.objects.bulk_update(subtree, ["path", "parent"])
    tenant.refresh_from_db()
    record(
        "tenant.move",
        actor=actor,
        target=tenant,
        tenant=tenant,
        old_parent=old_parent.slug if old_parent else None,
        new_parent=parent.slug,
    )
    return tenant


@transaction.atomic
def delete_tenant(*, actor: Any, tenant: Tenant) -> None:
    if tenant.children.exists():
        raise ValidationError(
            {"tenant": _("%(name)s still has tenants under it") % {"name": tenant.name}}
        )
    quota = Quota.objects.filter(tenant=tenant).first()
    if quota and (quota.used_environments or quota.used_jobs):
        raise ValidationError(
            {"tenant": _("%(name)s still has running workloads") % {"name": tenant.name}}
        )
    parent = tenant.parent
    record("tenant.delete", actor=actor, target=tenant, tenant=parent, slug=tenant.slug)
    tenant.delete()


@transaction.atomic
def close_ended_terms(*, actor: Any = None, today: dt.date | None = None) -> list[Tenant]:
    """Deactivate classes whose term has ended: they grant nothing any more."""
    today = today or timezone.localdate()
    ended = list(
        Tenant.objects.select_for_update().filter(
            kind=TenantKind.CLASS, is_active=True, term_end__lt=today
        )
    )
    for tenant in ended:
        tenant.is_active = False
        tenant.save(update_fields=["is_active"])
        record(
            "tenant.term_closed",
            actor=actor,
            target=tenant,
            tenant=tenant,
            term_end=tenant.term_end,
        )
    return ended
