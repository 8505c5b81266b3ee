"""The living demo: a background load of simulated sessions and jobs on the simulated GPU farm,
so that queues, fragmentation and GPUs-over-time have something to show a minute after
`make run`.

``seed`` (called by ``manage.py seed_demo``) makes a tenant of its own, "Simulated research
load", outside the university, with eight users, GPU sizes shaped like openb's requests and a
grant of them on the farm. ``tick`` (the ``quanta.console.demo_load`` periodic task, on only
with ``DEMO_LOAD=true``, which `make run` sets) keeps that load going: it draws pods from the
openb sample the what-if page ships (``scheduling/data/openb_sample_pods.csv``), submits each
as a job or a session through the same launch functions a person's launch uses, stops the
sessions whose time is up, and deletes its own finished work after a day.

It is bounded: at most ``MAX_ACTIVE`` of its workloads wait or run at once, the tenant's quota
is ``QUOTA_GPUS`` (24 of the farm's 128 GPUs; the rest stays free for the students' own
simulated GPU sessions, and the load's work over it waits with the quota as its reason), and
its finished rows are pruned.
"""

from __future__ import annotations

import csv
import datetime as dt
import logging
import random
import zlib
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db.models import Count
from django.utils import timezone

from scheduling.models import Cluster, GpuDevice
from scheduling.whatif import SAMPLE_DIR
from tenants import services as tenant_services
from tenants.choices import Role, TenantKind
from tenants.models import Membership, Tenant
from workloads import services
from workloads.choices import ACTIVE, State, WorkloadKind
from workloads.models import AppTemplate, Flavor, Grant, Image, Workload

logger = logging.getLogger(__name__)

CLUSTER = "sim"
ORGANISATION = ("sim-load", "Simulated research load")
PROJECT = ("sim-openb", "openb replay (simulated)")
USERS = [f"simuser{n}" for n in range(1, 9)]
TEMPLATE = "jupyter-sim-load"
MAX_ACTIVE = 48
# The load's GPU quota (at most half the farm): its steady state is about this much, so some
# of its work waits in the queue with the quota as its reason.
QUOTA_GPUS = 24
SUBMITS_PER_TICK = 2  # every DEMO_LOAD_SECONDS: a start of ~20 workloads in the first minute
SESSION_SHARE = 0.25  # of the submissions: sessions (stopped when their time is up)
LIFETIME_S = (40, 240)  # real seconds a drawn workload runs, from its openb duration
KEEP_FINISHED = dt.timedelta(hours=24)
# Demo students who also try the classes' simulated GPU template, so that the teachers'
# dashboards have sessions to show: a few of each class, never the ones the docs and the
# browser tests sign in as (student1 … student6). At most CLASS_SESSIONS at once, one started
# a tick while fewer run, each stopped after its lifetime like the load's own.
CLASS_USERS = [
    f"student{n}"
    for trio in zip(range(7, 13), range(17, 23), range(25, 31), strict=True)
    for n in trio
]
CLASS_TEMPLATE = "jupyter-sim"
CLASS_FLAVOR = "vgpu-8g"
CLASS_SESSIONS = 6

# openb's requests rounded to sizes: a share of one GPU, or whole GPUs.
FLAVORS: list[dict[str, Any]] = [
    {"slug": "sim-share-25", "name": "¼ GPU share (simulated)", "gpu_milli": 250},
    {"slug": "sim-share-50", "name": "½ GPU share (simulated)", "gpu_milli": 500},
    {"slug": "sim-gpu-1", "name": "1 GPU (simulated)", "gpus": 1},
    {"slug": "sim-gpu-2", "name": "2 GPUs (simulated)", "gpus": 2},
    {"slug": "sim-gpu-4", "name": "4 GPUs (simulated)", "gpus": 4},
    {"slug": "sim-gpu-8", "name": "8 GPUs (simulated)", "gpus": 8},
]


@dataclass(frozen=True)
class Draw:
    """One pod of the openb sample as the load submits it."""

    flavor: str
    lifetime_s: int


def flavor_for(num_gpu: int, gpu_milli: int) -> str:
    """The load's size nearest to an openb request (CPU-only pods are not drawn)."""
    if num_gpu == 1 and gpu_milli <= 375:
        return "sim-share-25"
    if num_gpu == 1 and gpu_milli <= 750:
        return "sim-share-50"
    whole = next(n for n in (1, 2, 4, 8) if n >= min(num_gpu, 8))
    return f"sim-gpu-{whole}"


@cache
def openb_mix() -> tuple[tuple[int, int, int], ...]:
    """(num_gpu, gpu_milli, duration in seconds) of the sample's GPU pods."""
    rows = []
    with (SAMPLE_DIR / "openb_sample_pods.csv").open() as f:
        for row in csv.DictReader(f):
            num_gpu = int(row["num_gpu"])
            if num_gpu:
                duration = int(row["deletion_time"] or 0) - int(row["creation_time"] or 0)
                rows.append((num_gpu, int(row["gpu_milli"]), max(0, duration)))
    return tuple(rows)


def draw(rng: random.Random) -> Draw:
    """A pod of the openb mix: its size, and a lifetime that grows with its openb duration
    (a day or more in the trace is the longest here)."""
    num_gpu, gpu_milli, duration = rng.choice(openb_mix())
    low, high = LIFETIME_S
    share = min(1.0, duration / 86400)
    return Draw(flavor_for(num_gpu, gpu_milli), int(low + (high - low) * share))


# --- Seeding -----------------------------------------------------------------------------------


def seed(admin: Any) -> Tenant | None:
    """The load's tenant, users, sizes and grant on the simulated farm (idempotent); None
    when there is no simulated farm."""
    cluster = Cluster.objects.filter(slug=CLUSTER).first()
    if cluster is None:
        return None
    organisation = Tenant.objects.filter(slug=ORGANISATION[0]).first()
    if organisation is None:
        organisation = tenant_services.create_tenant(
            actor=admin, kind=TenantKind.ORGANISATION, slug=ORGANISATION[0], name=ORGANISATION[1]
        )
        farm = GpuDevice.objects.filter(node__cluster=cluster).count() or 128
        tenant_services.set_quota(
            actor=admin, tenant=organisation, gpus=Decimal(min(QUOTA_GPUS, farm // 2))
        )
    project = Tenant.objects.filter(slug=PROJECT[0]).first() or tenant_services.create_tenant(
        actor=admin,
        kind=TenantKind.PROJECT,
        slug=PROJECT[0],
        name=PROJECT[1],
        parent=organisation,
    )
    User = get_user_model()
    for username in USERS:
        user, created = User.objects.get_or_create(
            username=username,
            defaults={"display_name": f"Simulated user {username[7:]}", "password": "!"},
        )
        if not Membership.objects.filter(user=user, tenant=project).exists():
            tenant_services.set_membership(
                actor=admin, tenant=project, user=user, role=Role.STUDENT
            )
    for spec in FLAVORS:
        gpus, milli = spec.get("gpus", 0), spec.get("gpu_milli", 0)
        Flavor.objects.get_or_create(
            slug=spec["slug"],
            defaults={
                "name": spec["name"],
                "gpus": gpus,
                "gpu_milli": milli,
                "gpu_memory_mib": milli * 16 if milli else 0,
                "cpu_milli": max(2000, 8000 * gpus) if gpus else 4000,
                "memory_mib": max(8192, 32768 * gpus) if gpus else 16384,
            },
        )
    flavors = Flavor.objects.filter(slug__in=[f["slug"] for f in FLAVORS])
    image = Image.objects.filter(slug="pytorch-2-13").first() or Image.objects.first()
    if image is None:
        return None  # no catalog seeded: nothing to launch from
    template, created = AppTemplate.objects.get_or_create(
        slug=TEMPLATE,
        defaults={
            "name": "Simulated research load",
            "kind": "jupyter",
            "image": image,
            "default_flavor": flavors.get(slug="sim-share-25"),
            "description": "The demo's background load on the simulated GPU farm.",
        },
    )
    if created:
        template.allowed_flavors.set(flavors)
    grant, created = Grant.objects.get_or_create(
        tenant=project,
        template=template,
        cluster=cluster,
        defaults={"created_by": admin, "member_limit": MAX_ACTIVE, "max_duration_minutes": 60},
    )
    if created:
        grant.flavors.set(flavors)
    return project


# --- The load ----------------------------------------------------------------------------------


def _lifetime(workload: Workload) -> dt.timedelta:
    """A session's lifetime, drawn from its id (no column to keep it in)."""
    low, high = LIFETIME_S
    return dt.timedelta(seconds=low + zlib.crc32(str(workload.pk).encode()) % (high - low))


def tick(*, now: dt.datetime | None = None, rng: random.Random | None = None) -> dict[str, int]:
    """One step of the load: stop sessions whose time is up, prune old finished work,
    submit up to ``SUBMITS_PER_TICK`` new workloads while fewer than ``MAX_ACTIVE`` of its
    own are active. What it did, counted."""
    now = now or timezone.now()
    rng = rng or random.Random()
    done = {"stopped": 0, "submitted": 0, "refused": 0, "pruned": 0, "class_sessions": 0}
    project = Tenant.objects.filter(slug=PROJECT[0]).first()
    template = AppTemplate.objects.filter(slug=TEMPLATE).first()
    if project is None or template is None:
        return done
    mine = Workload.objects.filter(tenant=project)
    in_class = Workload.objects.filter(
        template__slug=CLASS_TEMPLATE, owner__username__in=CLASS_USERS
    )
    running = (mine | in_class).filter(kind=WorkloadKind.NOTEBOOK, state=State.RUNNING)
    for session in running.exclude(started_at=None):
        assert session.started_at is not None
        if session.started_at + _lifetime(session) <= now:
            done["stopped"] += services.stop(actor=None, workload=session, reason="")
    done["pruned"] = services.delete_finished(
        actor=None, tenant=project, finished_before=now - KEEP_FINISHED
    )
    done["class_sessions"] = _class_session(in_class)
    active = dict(
        mine.filter(state__in=ACTIVE).values_list("owner__username").annotate(n=Count("pk"))
    )
    room = MAX_ACTIVE - sum(active.values())
    users = {u.username: u for u in get_user_model().objects.filter(username__in=USERS)}
    flavors = {f.slug: f for f in Flavor.objects.filter(slug__in=[f["slug"] for f in FLAVORS])}
    for _ in range(max(0, min(room, SUBMITS_PER_TICK))):
        if not users:
            break
        # The least busy user submits: the load spreads over all of them.
        username = min(users, key=lambda name: (active.get(name, 0), rng.random()))
        picked = draw(rng)
        flavor = flavors.get(picked.flavor)
        if flavor is None:
            continue
        try:
            if rng.random() < SESSION_SHARE:
                services.launch_environment(
                    actor=users[username], template=template, flavor=flavor, name="sim session"
                )
            else:
                services.submit_job(
                    actor=users[username],
                    tenant=project,
                    flavor=flavor,
                    command=["python", "train.py"],
                    name=f"openb {flavor.slug.removeprefix('sim-')}",
                    env={"QUANTA_SIM_DURATION": str(int(picked.lifetime_s * _speedup()))},
                )
        except ValidationError as exc:  # a limit said no: the next tick tries again
            done["refused"] += 1
            logger.info("demo load: %s", exc)
            continue
        active[username] = active.get(username, 0) + 1
        done["submitted"] += 1
    return done


def _class_session(in_class: Any) -> int:
    """Start one demo student's simulated GPU session while fewer than CLASS_SESSIONS run
    (the first student in CLASS_USERS with none); how many were started (0 or 1)."""
    busy = set(in_class.filter(state__in=ACTIVE).values_list("owner__username", flat=True))
    if len(busy) >= CLASS_SESSIONS:
        return 0
    template = AppTemplate.objects.filter(slug=CLASS_TEMPLATE).first()
    flavor = Flavor.objects.filter(slug=CLASS_FLAVOR).first()
    free = [name for name in CLASS_USERS if name not in busy]
    users = {u.username: u for u in get_user_model().objects.filter(username__in=free)}
    user = next((users[name] for name in free if name in users), None)
    if template is None or flavor is None or user is None:
        return 0
    try:
        services.launch_environment(actor=user, template=template, flavor=flavor)
    except ValidationError as exc:  # the class's quota or budget said no: fine for a demo
        logger.info("demo load, %s: %s", user.username, exc)
        return 0
    return 1


def _speedup() -> float:
    cluster = Cluster.objects.filter(slug=CLUSTER).first()
    return float((cluster.config or {}).get("speedup", 60)) if cluster else 60.0


def enabled() -> bool:
    return bool(settings.DEMO_LOAD)
