"""Launching: what a person may start, and the two ways to ask (an environment from a granted
template, a training job). A launch creates the workload in ``Pending``; the lifecycle's
listeners admit it after commit (``workloads.dispatch``)."""

from __future__ import annotations

import datetime as dt
import re
import shlex
from collections.abc import Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _

from core.reasons import Reason
from core.text import unstorable
from scheduling.backends.registry import get_backend
from scheduling.models import Cluster
from tenants import quota as quota_math
from tenants import services as tenant_services
from tenants.models import Membership, Tenant
from tenants.reasons import RESOURCE_WORDS
from workloads import datasets as datasets_service
from workloads import reasons as R
from workloads.admission_checks import Ask, refusal_for
from workloads.choices import HOLDING, WAITING, AppKind, WorkloadKind
from workloads.constants import SHELL, check_env_limits, command_text
from workloads.lifecycle import created
from workloads.models import AppTemplate, Flavor, Grant, Workload
from workloads.payer import payer_for

MAX_WORKERS = 64
RESERVED_ENV = {
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "NODE_RANK",
    "CUDA_VISIBLE_DEVICES",
}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


# --- What a person may launch ------------------------------------------------------------------


def member_tenants(user: Any) -> QuerySet[Tenant]:
    return Tenant.objects.filter(memberships__user=user, is_active=True)


def grants_for(user: Any, *, today: dt.date | None = None) -> QuerySet[Grant]:
    """Grants a person may launch from now: on their active classes, not expired."""
    today = today or timezone.localdate()
    return (
        Grant.objects.filter(tenant__in=member_tenants(user), template__is_active=True)
        .filter(Q(expires_on__isnull=True) | Q(expires_on__gte=today))
        .select_related("template", "template__image", "tenant", "cluster")
        .prefetch_related("flavors")
    )


def environment_grants(user: Any) -> QuerySet[Grant]:
    """The grants of environments (the App Center's): those of model servers are deployed
    from a model's page instead (``workloads.serving``)."""
    return grants_for(user).exclude(template__kind=AppKind.MODEL_SERVER)


def cannot_run(kind: str, cluster: Cluster) -> Reason | None:
    """Why ``cluster`` cannot run templates of ``kind`` (None: it can). The App Center does
    not offer them there; admission rejects a launch of one with this reason."""
    backend = get_backend(cluster)
    if backend.apps is None or kind in backend.apps:
        return None
    unavailable: dict[str, Reason] = getattr(backend, "unavailable", None) or {}
    return unavailable.get(kind) or R.NEEDS_KUBERNETES(app=kind, cluster=cluster.name)


def default_cluster() -> Cluster:
    cluster = Cluster.objects.filter(is_default=True).first() or Cluster.objects.first()
    if cluster is None:
        raise ValidationError({"cluster": _("no cluster is configured; ask an admin")})
    return cluster


def launch_environment(
    *,
    actor: Any,
    template: AppTemplate,
    flavor: Flavor | None = None,
    name: str = "",
    datasets: Sequence[Any] | None = None,
) -> Workload:
    """Start a notebook / IDE from a template granted to ``actor``, with the ``datasets``
    (slugs) it mounts read-only."""
    mounted = datasets_service.for_launch(actor, datasets)
    grants = [g for g in environment_grants(actor) if g.template_id == template.pk]
    if not grants:
        raise ValidationError(
            {"template": _("%(template)s is not granted to you") % {"template": template.name}}
        )
    flavor = flavor or template.default_flavor
    grant = next((g for g in grants if flavor in g.flavors.all()), None)
    if grant is None:
        raise ValidationError(
            {
                "flavor": _("%(flavor)s is not allowed for %(template)s")
                % {"flavor": flavor.name, "template": template.name}
            }
        )
    payer = payer_for(grant, actor)
    _refuse_if_checks_say(Ask.launch(payer, flavor, actor))
    with transaction.atomic():
        # One person's launches take turns (their user row locked), so the count below and
        # the create after it cannot interleave with another launch of theirs.
        get_user_model().objects.select_for_update().filter(pk=actor.pk).exists()
        running = Workload.objects.filter(owner=actor, grant=grant, state__in=WAITING + HOLDING)
        if running.count() >= grant.member_limit:
            raise ValidationError(
                {
                    "template": _(
                        "you already run %(n)s of %(n)s allowed %(template)s environment(s); "
                        "stop one first"
                    )
                    % {"n": grant.member_limit, "template": template.name}
                }
            )
        workload = Workload.objects.create(
            kind=WorkloadKind.NOTEBOOK,
            name=(name or template.name)[:100],
            owner=actor,
            tenant=grant.tenant,
            cluster=grant.cluster or default_cluster(),
            template=template,
            grant=grant,
            flavor=flavor,
            image=template.image,
            env=dict(template.environment),
            idle_timeout_minutes=grant.idle_timeout_minutes,
            **gpu_idle_rule(grant, job=False),
            priority=grant.priority_class.value if grant.priority_class else 0,
            **payer,
        )
        workload.datasets.set(mounted)
        created(
            workload, actor=actor, reason=R.LAUNCHED(template=template.name, flavor=flavor.name)
        )
    return workload


def gpu_idle_rule(grant: Grant, *, job: bool) -> dict[str, int]:
    """The GPU-aware culling rule a workload launched from ``grant`` keeps: the grant's own,
    else (environments only) its template's; jobs are off unless their grant says so."""
    template = grant.template
    percent = grant.gpu_idle_percent
    if percent is None:
        percent = 0 if job else template.gpu_idle_percent
    minutes = grant.gpu_idle_minutes
    if minutes is None:
        minutes = template.gpu_idle_minutes
    return {"gpu_idle_percent": percent, "gpu_idle_minutes": minutes if percent else 0}


def _refuse_if_checks_say(ask: Ask) -> None:
    """A launch the registered admission checks refuse (a payer's budget used up) is a 400
    with their reason, in the asker's language."""
    refusal = refusal_for(ask)
    if refusal is not None:
        raise ValidationError({"budget": refusal.render()})


def _refuse_if_never_within_quota(tenant: Tenant, actor: Any, request: quota_math.Request) -> None:
    """A request bigger than a limit of the quota chain could never be admitted, even with
    nothing else running: refuse it now with the quota's reason (as the App Center words it),
    rather than queue it for ever. (One that only needs room others use now may wait.)"""
    quotas, usage = tenant_services._chain(tenant, actor, lock=False)
    levels = tenant_services._levels(quotas, usage)
    idle = [replace(level, used={}, member_used={}) for level in levels]
    never = [r for r in quota_math.refusals(request, idle) if r.resource != "gpu_hours"]
    if not never:
        return
    worst = quota_math.tightest(never)
    assert worst is not None
    key = (worst.tenant, worst.resource, worst.per_member)
    current = next(
        (
            r
            for r in quota_math.refusals(request, levels)
            if (r.tenant, r.resource, r.per_member) == key
        ),
        worst,
    )
    raise ValidationError(
        {
            "workers": _(
                "%(why)s: more than the quota allows even with nothing else running; your "
                "quota allows %(left)s more %(what)s"
            )
            % {
                "why": current.reason.render(),
                "left": f"{max(Decimal(0), current.room).normalize():f}",
                "what": _(RESOURCE_WORDS[worst.resource]),
            }
        }
    )


MAX_COMMAND_CHARS = 256 * 4096
MAX_SHELL_ARGUMENT_CHARS = 128 * 1024 - 1  # Linux's limit on one argument (MAX_ARG_STRLEN)


def parse_command(command: str | Sequence[str]) -> list[str]:
    """A command is one string, run by the shell (``constants.SHELL``) as typed, or a list of
    strings, an argv run without one; nothing else (a number, an object or a list with
    anything but strings in it is refused, never coerced). A string whose quotes do not
    close is refused here rather than by the shell once the job runs."""
    if isinstance(command, str):
        if len(command) > MAX_COMMAND_CHARS:
            raise ValidationError({"command": _("is too long or contains a NUL character")})
        try:
            words = shlex.split(command, comments=True)
        except ValueError as exc:
            raise ValidationError(
                {"command": _("cannot be read: %(error)s") % {"error": exc}}
            ) from None
        if not words:
            raise ValidationError({"command": _("give the command to run, e.g. python train.py")})
        argv = [*SHELL, command.strip()]
        if len(argv[2]) > MAX_SHELL_ARGUMENT_CHARS or unstorable(argv[2]):
            raise ValidationError({"command": _("is too long or contains a NUL character")})
        return argv
    elif isinstance(command, list | tuple) and all(isinstance(a, str) for a in command):
        argv = list(command)
    else:
        raise ValidationError(
            {"command": _("must be a string or a list of strings, e.g. python train.py")}
        )
    if not argv:
        raise ValidationError({"command": _("give the command to run, e.g. python train.py")})
    if len(argv) > 256 or any(len(a) > 4096 or unstorable(a) for a in argv):
        raise ValidationError({"command": _("is too long or contains a NUL character")})
    return argv


def check_env(env: Any) -> dict[str, str]:
    if env in (None, ""):
        return {}
    if not isinstance(env, dict):
        raise ValidationError({"env": _("must be an object of NAME: value")})
    check_env_limits(env)
    for key, value in env.items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise ValidationError(
                {"env": _("%(name)r is not a valid variable name") % {"name": key}}
            )
        if key in RESERVED_ENV:
            raise ValidationError(
                {"env": _("%(name)s is set by Quanta for each worker") % {"name": key}}
            )
        if not isinstance(value, str | int | float) or len(str(value)) > 4096:
            raise ValidationError(
                {"env": _("the value of %(name)s must be a short string") % {"name": key}}
            )
    return {k: str(v) for k, v in env.items()}


def submit_job(
    *,
    actor: Any,
    tenant: Tenant,
    flavor: Flavor,
    command: str | Sequence[str],
    name: str = "",
    env: dict[str, Any] | None = None,
    workers: int = 1,
    max_retries: int = 0,
    datasets: Sequence[Any] | None = None,
) -> Workload:
    """A training job: ``workers`` tasks started together (gang), each running ``command``,
    with the ``datasets`` (slugs) mounted read-only."""
    argv = parse_command(command)
    mounted = datasets_service.for_launch(actor, datasets)
    variables = check_env(env)
    if not 1 <= workers <= MAX_WORKERS:
        raise ValidationError({"workers": _("must be between 1 and %(n)s") % {"n": MAX_WORKERS}})
    if not 0 <= max_retries <= 10:
        raise ValidationError({"max_retries": _("must be between 0 and 10")})
    if not Membership.objects.filter(user=actor, tenant=tenant, tenant__is_active=True).exists():
        raise ValidationError(
            {"tenant": _("you are not a member of %(slug)r") % {"slug": tenant.slug}}
        )
    grant = grants_for(actor).filter(tenant=tenant, flavors=flavor).first()
    if grant is None:
        raise ValidationError(
            {
                "flavor": _("%(flavor)s is not granted to %(tenant)s")
                % {"flavor": flavor.name, "tenant": tenant.name}
            }
        )
    payer = payer_for(grant, actor)
    _refuse_if_checks_say(Ask.launch(payer, flavor, actor))
    _refuse_if_never_within_quota(
        tenant,
        actor,
        quota_math.Request(
            gpus=flavor.gpu_equivalents * workers,
            gpu_memory_mib=flavor.gpu_memory_mib * workers,
            cpu_cores=Decimal(flavor.cpu_milli) / 1000 * workers,
            memory_mib=flavor.memory_mib * workers,
            jobs=1,
        ),
    )
    with transaction.atomic():
        workload = Workload.objects.create(
            kind=WorkloadKind.JOB,
            name=(name or shlex.split(command_text(argv), comments=True)[0])[:100],
            owner=actor,
            tenant=tenant,
            cluster=grant.cluster or default_cluster(),
            grant=grant,
            flavor=flavor,
            image=grant.template.image,
            command=argv,
            env=variables,
            workers=workers,
            max_retries=max_retries,
            priority=grant.priority_class.value if grant.priority_class else 0,
            **gpu_idle_rule(grant, job=True),
            **payer,
        )
        workload.datasets.set(mounted)
        created(
            workload,
            actor=actor,
            reason=R.SUBMITTED(command=f"{command_text(argv)[:200]} × {workers}"),
        )
    return workload
