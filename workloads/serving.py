"""Serving endpoints: deploy a model version, stop it, its API keys, who sees which.

An endpoint is served by one serving ``Workload`` launched like any other: from a grant of a
template of kind ``model-server`` (the class's teacher grants it, with its flavors), through
admission, quotas, queues and billing. The workload asks for ``max_replicas`` tasks of the
flavor, so the capacity of every replica it may scale to is placed, charged to the quota and
metered while it runs (docs/serving.md says why). The gateway (``workloads.gateway``) and the
autoscaler (``workloads.autoscale``) do the rest.

Who sees an endpoint: its owner, the staff of its class (teachers see their classes'), admins
all (``workloads.permissions.visible_workloads`` on its workload). Who changes it (stop, keys):
the owner and the class's staff (``can_control``).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.text import slugify
from django.utils.translation import gettext as _

from core.audit import record
from tenants.models import Tenant
from tenants.permissions import Access
from workloads import model_registry
from workloads import reasons as R
from workloads.admission_checks import Ask
from workloads.choices import HOLDING, WAITING, AppKind, WorkloadKind
from workloads.launch import _refuse_if_checks_say, default_cluster, grants_for
from workloads.lifecycle import created
from workloads.models import EndpointKey, Flavor, ModelVersion, ServingEndpoint, Workload
from workloads.payer import payer_for
from workloads.permissions import can_control, visible_workloads

MAX_REPLICAS = 8
KEY_PREFIX = "qsk_"
_TIME = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")


def visible_to(user: Any) -> QuerySet[ServingEndpoint]:
    endpoints = ServingEndpoint.objects.select_related(
        "owner", "tenant", "flavor", "version__model", "workload"
    )
    access = Access.of(user)
    if access.is_superuser:
        return endpoints
    if access.user_id is None:
        return endpoints.none()
    mine = Q(owner_id=access.user_id) | Q(
        workload__in=Workload.objects.filter(visible_workloads(user))
    )
    return endpoints.filter(mine).distinct()


def can_change(user: Any, endpoint: ServingEndpoint) -> bool:
    if endpoint.workload is not None:
        return can_control(user, endpoint.workload)
    return endpoint.owner_id == user.pk or Access.of(user).can_manage(endpoint.tenant)


def serving_grants(user: Any) -> QuerySet[Any]:
    return grants_for(user).filter(template__kind=AppKind.MODEL_SERVER)


def parse_schedule(value: Any, max_replicas: int) -> list[dict[str, Any]]:
    """Windows as stored: [{"days": [0..6], "start": "08:00", "end": "22:00",
    "min_replicas": 2}]; a 400 naming what is wrong."""
    if value in (None, "", []):
        return []
    if not isinstance(value, list) or len(value) > 20:
        raise ValidationError({"schedule": _("must be a list of at most 20 windows")})
    out = []
    for window in value:
        if not isinstance(window, dict):
            raise ValidationError({"schedule": _("each window is an object")})
        days = window.get("days", list(range(7)))
        start, end, count = window.get("start"), window.get("end"), window.get("min_replicas")
        if not isinstance(days, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= 6 for d in days
        ):
            raise ValidationError({"schedule": _("days are numbers 0 (Monday) to 6 (Sunday)")})
        if not (isinstance(start, str) and _TIME.match(start)) or not (
            isinstance(end, str) and _TIME.match(end)
        ):
            raise ValidationError({"schedule": _("start and end are times like 08:00")})
        if start == end:
            raise ValidationError({"schedule": _("a window's start and end differ")})
        if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= max_replicas:
            raise ValidationError(
                {"schedule": _("min_replicas is between 0 and %(n)s") % {"n": max_replicas}}
            )
        out.append({"days": sorted(set(days)), "start": start, "end": end, "min_replicas": count})
    return out


def _number(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValidationError(
            {name: _("must be a whole number from %(a)s to %(b)s") % {"a": low, "b": high}}
        )
    return value


def deploy(
    *,
    actor: Any,
    version: ModelVersion,
    flavor: Flavor,
    name: Any = "",
    slug: Any = None,
    tenant: Tenant | None = None,
    min_replicas: Any = 1,
    max_replicas: Any = 1,
    target_concurrency: Any = 4,
    target_gpu_utilisation: Any = 0,
    scale_to_zero_after_s: Any = 300,
    schedule: Any = None,
    rate_limit: Any = None,
) -> ServingEndpoint:
    """Serve ``version`` on ``flavor`` at /serve/<slug>/ from a model-server grant."""
    if not model_registry.visible_to(actor).filter(pk=version.model_id).exists():
        raise ValidationError({"version": _("no model version that you may use")})
    maximum = _number("max_replicas", max_replicas, 1, MAX_REPLICAS)
    minimum = _number("min_replicas", min_replicas, 0, maximum)
    target = _number("target_concurrency", target_concurrency, 1, 1000)
    gpu_target = _number("target_gpu_utilisation", target_gpu_utilisation or 0, 0, 100)
    idle = _number("scale_to_zero_after_s", scale_to_zero_after_s, 10, 7 * 24 * 3600)
    rate = _number(
        "rate_limit",
        settings.SERVING_RATE_LIMIT if rate_limit in (None, "") else rate_limit,
        1,
        100000,
    )
    stored_schedule = parse_schedule(schedule, maximum)
    name = str(name or version.model.name).strip()[:100]
    value = slugify(slug if isinstance(slug, str) and slug else name)[:64].strip("-")
    if not value:
        raise ValidationError({"slug": _("give a name with letters or digits")})
    grants = serving_grants(actor).filter(flavors=flavor)
    if tenant is not None:
        grants = grants.filter(tenant=tenant)
    grant = grants.first()
    if grant is None:
        raise ValidationError(
            {"flavor": _("%(flavor)s is not granted to you for serving") % {"flavor": flavor.name}}
        )
    payer = payer_for(grant, actor)
    _refuse_if_checks_say(Ask.launch(payer, flavor, actor))
    with transaction.atomic():
        get_user_model().objects.select_for_update().filter(pk=actor.pk).exists()
        if ServingEndpoint.objects.filter(slug=value).exists():
            raise ValidationError(
                {"slug": _("an endpoint named %(s)s exists already") % {"s": value}}
            )
        running = Workload.objects.filter(owner=actor, grant=grant, state__in=WAITING + HOLDING)
        if running.count() >= grant.member_limit:
            raise ValidationError(
                {
                    "flavor": _("you already run %(n)s endpoint(s), the most this grant allows")
                    % {"n": grant.member_limit}
                }
            )
        workload = Workload.objects.create(
            kind=WorkloadKind.SERVING,
            name=name,
            owner=actor,
            tenant=grant.tenant,
            cluster=grant.cluster or default_cluster(),
            template=grant.template,
            grant=grant,
            flavor=flavor,
            image=grant.template.image,
            env=dict(grant.template.environment),
            workers=maximum,
            priority=grant.priority_class.value if grant.priority_class else 0,
            **payer,
        )
        endpoint = ServingEndpoint.objects.create(
            slug=value,
            name=name,
            owner=actor,
            tenant=grant.tenant,
            version=version,
            flavor=flavor,
            min_replicas=minimum,
            max_replicas=maximum,
            target_concurrency=target,
            target_gpu_utilisation=gpu_target,
            scale_to_zero_after_s=idle,
            schedule=stored_schedule,
            rate_limit=rate,
            workload=workload,
        )
        created(
            workload,
            actor=actor,
            reason=R.DEPLOYED(model=f"{version.model.slug} v{version.number}", flavor=flavor.name),
        )
        record(
            "endpoint.deploy",
            actor=actor,
            target=endpoint,
            tenant=endpoint.tenant,
            version=str(version),
            replicas=f"{minimum}-{maximum}",
        )
    return endpoint


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@transaction.atomic
def create_key(*, actor: Any, endpoint: ServingEndpoint, name: Any = "") -> tuple[EndpointKey, str]:
    """A new API key; the key itself is returned once and only its digest is kept."""
    if not can_change(actor, endpoint):
        raise PermissionDenied(_("Only the endpoint's owner manages its keys."))
    label = str(name or "key").strip()[:100] or "key"
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    key = EndpointKey.objects.create(
        endpoint=endpoint, name=label, prefix=secret[:10], digest=_digest(secret), created_by=actor
    )
    record("endpoint.key.create", actor=actor, target=endpoint, tenant=endpoint.tenant, key=label)
    return key, secret


@transaction.atomic
def revoke_key(*, actor: Any, key: EndpointKey) -> None:
    if not can_change(actor, key.endpoint):
        raise PermissionDenied(_("Only the endpoint's owner manages its keys."))
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        record(
            "endpoint.key.revoke",
            actor=actor,
            target=key.endpoint,
            tenant=key.endpoint.tenant,
            key=key.name,
        )


def endpoint_for_key(slug: str, secret: str) -> ServingEndpoint | None:
    """The endpoint ``slug`` if ``secret`` is one of its live keys."""
    if not secret.startswith(KEY_PREFIX):
        return None
    key = (
        EndpointKey.objects.filter(
            digest=_digest(secret), revoked_at__isnull=True, endpoint__slug=slug
        )
        .select_related("endpoint__workload", "endpoint__version__model")
        .first()
    )
    return key.endpoint if key else None
