"""Every change to grants (a template and some of its flavors handed to a class or project)
goes through here, from the API and from the teachers' pages alike.

Each function runs in one transaction, takes the acting user as ``actor`` and writes an audit
row (``grant.create`` / ``grant.update`` / ``grant.delete``) in it. The checks are the same for
every caller: errors a person can fix raise Django's ``ValidationError`` naming the field (the
API answers 400, pages show form errors); acting on a class one does not manage raises
``PermissionDenied`` (403).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from core.audit import record
from tenants.choices import TenantKind
from tenants.models import Tenant
from tenants.permissions import Access
from workloads import windows as weekly
from workloads.choices import PayerKind
from workloads.models import AppTemplate, Flavor, Grant

# Grants go to classes and projects: a department or a school grants nothing itself.
GRANTEE_KINDS = (TenantKind.CLASS, TenantKind.PROJECT)
# What a grant's update may change (besides its flavors).
GRANT_FIELDS = (
    "template",
    "tenant",
    "priority_class",
    "member_limit",
    "max_duration_minutes",
    "idle_timeout_minutes",
    "gpu_idle_percent",
    "gpu_idle_minutes",
    "max_extensions",
    "windows",
    "expires_on",
    "payer",
    "payer_tenant",
)


def _check_fields(grant: Grant | None, changes: dict[str, Any]) -> dict[str, Any]:
    """The grant's own rules, before anyone's right to it is looked at; returns the changes
    with the windows cleaned."""
    unknown = set(changes) - {*GRANT_FIELDS, "flavors"}
    if unknown:
        raise ValidationError({name: _("cannot be changed here") for name in sorted(unknown)})
    if "windows" in changes:
        changes["windows"] = weekly.validate(changes["windows"])
    template = changes.get("template") or getattr(grant, "template", None)
    flavors = changes.get("flavors")
    if template is not None and flavors is not None:
        if not flavors:
            raise ValidationError({"flavors": _("grant at least one flavor")})
        allowed = set(template.allowed_flavors.all())
        outside = [f.slug for f in flavors if f not in allowed]
        if outside:
            raise ValidationError(
                {
                    "flavors": _("not allowed by %(template)s: %(flavors)s")
                    % {"template": template.name, "flavors": ", ".join(outside)}
                }
            )
    tenant = changes.get("tenant")
    if tenant is not None and tenant.kind not in GRANTEE_KINDS:
        raise ValidationError({"tenant": _("grant to a class or a project")})
    payer = changes.get("payer", getattr(grant, "payer", PayerKind.CLASS))
    if "payer" in changes and payer not in PayerKind.values:
        raise ValidationError({"payer": _("choose class, tenant or person")})
    payer_tenant = changes.get("payer_tenant", getattr(grant, "payer_tenant", None))
    if payer == PayerKind.TENANT and payer_tenant is None:
        raise ValidationError({"payer_tenant": _("name the project or group that pays")})
    for name in ("member_limit", "max_duration_minutes"):
        if name in changes and changes[name] < 1:
            raise ValidationError({name: _("must be at least 1")})
    # GPU-aware culling; None: the template's rule (environments), off (jobs).
    percent = changes.get("gpu_idle_percent")
    if percent is not None and not 0 <= percent <= 100:
        raise ValidationError({"gpu_idle_percent": _("must be between 0 and 100")})
    minutes = changes.get("gpu_idle_minutes")
    if minutes is not None and minutes < 1:
        raise ValidationError({"gpu_idle_minutes": _("must be at least 1")})
    return changes


def _check_manages(actor: Any, tenant: Tenant) -> None:
    access = Access.of(actor)
    if not access.can_view(tenant):
        raise ValidationError({"tenant": _("no class %(slug)r") % {"slug": tenant.slug}})
    if not access.can_manage(tenant):
        raise PermissionDenied(_("You do not manage %(name)s.") % {"name": tenant.name})


def _check_payer(actor: Any, changes: dict[str, Any]) -> None:
    """A grant may bill another project or group only one its teacher manages."""
    tenant = changes.get("payer_tenant")
    if tenant is not None and not Access.of(actor).can_manage(tenant):
        raise ValidationError(
            {"payer_tenant": _("you do not manage %(slug)r") % {"slug": tenant.slug}}
        )


def _check_priority(actor: Any, tenant: Tenant, changes: dict[str, Any]) -> None:
    """A priority class lets a grant's work preempt others: only admins set it."""
    if "priority_class" in changes and not Access.of(actor).can_administer(tenant):
        raise PermissionDenied(_("Only an admin sets the priority of a grant."))


@transaction.atomic
def create_grant(
    *,
    actor: Any,
    template: AppTemplate,
    tenant: Tenant,
    flavors: Iterable[Flavor],
    **fields: Any,
) -> Grant:
    """Grant ``template`` with some of its ``flavors`` to a class or project ``actor``
    manages. ``fields`` are the other ``GRANT_FIELDS``; those left out take the defaults."""
    fields = _check_fields(
        None, {"template": template, "tenant": tenant, "flavors": list(flavors), **fields}
    )
    _check_manages(actor, tenant)
    _check_priority(actor, tenant, fields)
    _check_payer(actor, fields)
    flavors = fields.pop("flavors")
    grant = Grant.objects.create(created_by=actor, **fields)
    grant.flavors.set(flavors)
    record(
        "grant.create",
        actor=actor,
        target=grant,
        tenant=grant.tenant,
        flavors=[f.slug for f in grant.flavors.all()],
    )
    return grant


@transaction.atomic
def update_grant(*, actor: Any, grant: Grant, **changes: Any) -> Grant:
    """Change a grant's template, flavors, class, limits, windows or expiry. Moving it to
    another class needs the right to manage both."""
    changes = _check_fields(grant, dict(changes))
    _check_manages(actor, grant.tenant)
    if "tenant" in changes:
        _check_manages(actor, changes["tenant"])
    _check_priority(actor, grant.tenant, changes)
    _check_payer(actor, changes)
    flavors = changes.pop("flavors", None)
    for name, value in changes.items():
        setattr(grant, name, value)
    grant.save()
    if flavors is not None:
        grant.flavors.set(flavors)
    record("grant.update", actor=actor, target=grant, tenant=grant.tenant)
    return grant


@transaction.atomic
def delete_grant(*, actor: Any, grant: Grant) -> None:
    """Stop granting: nothing new is launched from it; running sessions keep running."""
    _check_manages(actor, grant.tenant)
    record("grant.delete", actor=actor, target=grant, tenant=grant.tenant)
    grant.delete()
