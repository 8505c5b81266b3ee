"""Demo data: a university with two departments, three classes, an admin, two teachers and
thirty students. Safe to run again: it only adds what is missing."""

from __future__ import annotations

import datetime as dt
import secrets
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from billing import demo as billing_demo
from console import demo_load
from scheduling import demo as scheduling_demo
from scheduling.inventory import sync_backend_nodes
from tenants import services
from tenants.choices import Role, TenantKind
from tenants.models import Membership, Tenant
from workloads import demo as workloads_demo

User = get_user_model()

DEPARTMENTS = [("cs", "Computer Science"), ("ee", "Electrical Engineering")]
# slug, name, department, teacher, students (numbers)
CLASSES = [
    ("ml-101", "ML-101 Introduction to Machine Learning", "cs", "teacher1", range(1, 13)),
    ("dl-201", "DL-201 Deep Learning", "cs", "teacher1", range(13, 23)),
    ("sp-210", "SP-210 Signal Processing with GPUs", "ee", "teacher2", range(23, 31)),
]
QUOTAS: dict[str, dict[str, Any]] = {
    "quanta-u": {"gpus": Decimal(16), "cpu_cores": Decimal(256), "memory_mib": 1024 * 1024},
    "cs": {"gpus": Decimal(10), "gpu_hours_per_term": Decimal(5000)},
    "ee": {"gpus": Decimal(6), "gpu_hours_per_term": Decimal(2000)},
    "ml-101": {
        "gpus": Decimal(4),
        "environments": 12,
        "jobs": 8,
        "member_gpus": Decimal(1),
        "member_environments": 1,
        "member_jobs": 2,
        "member_gpu_hours_per_term": Decimal(40),
    },
    "dl-201": {
        "gpus": Decimal(6),
        "environments": 10,
        "jobs": 10,
        "member_gpus": Decimal(2),
        "member_environments": 1,
        "member_jobs": 2,
        "member_gpu_hours_per_term": Decimal(80),
    },
    "sp-210": {
        "gpus": Decimal(3),
        "environments": 8,
        "jobs": 4,
        "member_gpus": Decimal("0.5"),
        "member_environments": 1,
        "member_jobs": 1,
    },
}


class Command(BaseCommand):
    help = "Create the demo university, classes and users (idempotent) and print the logins."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--url", default="http://127.0.0.1:8000/", help="the address to print for signing in"
        )

    def handle(self, *args: Any, url: str, **options: Any) -> None:
        password, generated = self._password()
        with transaction.atomic():
            created = self._seed(make_password(password))
            self._seed_catalog()
        self.stdout.write(
            self.style.SUCCESS(f"Demo data {'created' if created else 'already present'}.")
        )
        self.stdout.write("")
        self.stdout.write(f"  Quanta is at {url}")
        self.stdout.write("  Sign in as admin, teacher1, teacher2 or student1 … student30")
        note = f" (generated, kept in {settings.DATA_DIR / 'demo_password'})" if generated else ""
        self.stdout.write(f"  Password: {password}{note}")
        if settings.DEMO_LOAD:
            self.stdout.write(
                "  A background load of simulated sessions and jobs runs on the simulated GPU"
                " farm (DEMO_LOAD=false: without)."
            )
        self.stdout.write("")

    def _password(self) -> tuple[str, bool]:
        """DEMO_PASSWORD, else one generated on the first run and kept in DATA_DIR. It is
        given to the demo users when they are created."""
        if settings.DEMO_PASSWORD:
            return settings.DEMO_PASSWORD, False
        path = settings.DATA_DIR / "demo_password"
        if path.exists():
            return path.read_text().strip(), True
        password = secrets.token_urlsafe(12)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(password + "\n")
        path.chmod(0o600)
        return password, True

    def _seed(self, password_hash: str) -> bool:
        if (
            Tenant.objects.filter(slug="quanta-u").exists()
            and User.objects.filter(username="student30").exists()
        ):
            return False
        admin = self._user("admin", "Ada Admin", password_hash, superuser=True)
        today = timezone.localdate()
        term = {
            "term_start": today - dt.timedelta(days=60),
            "term_end": today + dt.timedelta(days=60),
        }
        university = self._tenant(admin, TenantKind.ORGANISATION, "quanta-u", "Quanta University")
        departments = {
            slug: self._tenant(admin, TenantKind.DEPARTMENT, slug, name, university)
            for slug, name in DEPARTMENTS
        }
        services.set_membership(actor=admin, tenant=university, user=admin, role=Role.ADMIN)
        teachers = {
            "teacher1": self._user("teacher1", "Tomás Teacher", password_hash),
            "teacher2": self._user("teacher2", "Tian Teacher", password_hash),
        }
        for slug, name, dept, teacher, numbers in CLASSES:
            klass = self._tenant(admin, TenantKind.CLASS, slug, name, departments[dept], **term)
            services.set_membership(
                actor=admin, tenant=klass, user=teachers[teacher], role=Role.TEACHER
            )
            for n in numbers:
                student = self._user(
                    f"student{n}", f"Student {n}", password_hash, student_number=f"s{2026000 + n}"
                )
                if not Membership.objects.filter(user=student, tenant=klass).exists():
                    services.set_membership(
                        actor=admin, tenant=klass, user=student, role=Role.STUDENT
                    )
        for slug, limits in QUOTAS.items():
            services.set_quota(actor=admin, tenant=Tenant.objects.get(slug=slug), **limits)
        return True

    def _seed_catalog(self) -> None:
        """Clusters and the catalog: each app seeds its own part."""
        admin = User.objects.get(username="admin")
        sync_backend_nodes(scheduling_demo.seed())
        sync_backend_nodes(scheduling_demo.seed_simulated())
        workloads_demo.seed(admin)
        demo_load.seed(admin)  # the background load's tenant; it runs with DEMO_LOAD=true
        billing_demo.seed(admin)

    def _user(
        self,
        username: str,
        name: str,
        password_hash: str,
        *,
        superuser: bool = False,
        student_number: str = "",
    ) -> Any:
        user, _created = User.objects.get_or_create(
            username=username,
            defaults={
                "display_name": name,
                "email": f"{username}@quanta-u.example",
                "student_number": student_number,
                "is_superuser": superuser,
                "is_staff": superuser,
                "password": password_hash,
            },
        )
        return user

    def _tenant(
        self, actor: Any, kind: str, slug: str, name: str, parent: Tenant | None = None, **term: Any
    ) -> Tenant:
        existing = Tenant.objects.filter(slug=slug).first()
        return existing or services.create_tenant(
            actor=actor, kind=kind, name=name, slug=slug, parent=parent, **term
        )
