"""One-time sign-in links for a whole class in one request: a roster of N students imported
(no passwords, so no password hashing), then ``issue_sign_in_links`` for all of them, as a
CSV and as mail (Django's in-memory mail backend: the cost of building the mails, not of an
SMTP server; the mail step as the page does it: issue, then the task
``quanta.tenants.send_sign_in_links``, in-process). Reports seconds and SQL queries for each
step.

    .venv/bin/python bench/sign_in_links.py [--students 500] [--out FILE]

Uses a throw-away SQLite database (DATABASE_URL is ignored).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def setup_django() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ["DEBUG"] = "true"
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("REDIS_URL", None)
    os.environ["DATA_DIR"] = tempfile.mkdtemp(prefix="quanta-bench-")
    os.environ["DJANGO_SETTINGS_MODULE"] = "portal.settings"
    os.environ["EMAIL_BACKEND"] = "django.core.mail.backends.locmem.EmailBackend"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from django.conf import settings

    settings.DEBUG = False  # as in production (DEBUG keeps every statement)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--students", type=int, default=500)
    parser.add_argument("--out")
    args = parser.parse_args()
    setup_django()
    from django.contrib.auth import get_user_model
    from django.core import mail
    from django.db import connection

    from tenants import services, tasks
    from tenants.choices import Role, TenantKind

    User = get_user_model()
    root = User.objects.create_superuser("root", "root@uni.example", "root-pw-12345")
    teacher = User.objects.create_user("teacher", "t@uni.example")
    school = services.create_tenant(actor=root, kind=TenantKind.ORGANISATION, name="U", slug="u")
    klass = services.create_tenant(
        actor=root, kind=TenantKind.CLASS, name="ML-101", slug="ml-101", parent=school
    )
    services.set_membership(actor=root, tenant=klass, user=teacher, role=Role.TEACHER)
    roster = "student_number,name,email,class\n" + "".join(
        f"s{i:05d},Student {i},s{i}@uni.example,ml-101\n" for i in range(args.students)
    )
    mail.outbox = []
    lines = [f"# One-time sign-in links for a class of {args.students}", ""]
    lines += ["| step | seconds | SQL queries |", "|---|---|---|"]

    def step(name: str, fn: Callable[[], object]) -> None:
        count = [0]

        def counted(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            count[0] += 1
            return execute(sql, params, many, context)

        with connection.execute_wrapper(counted):
            started = time.perf_counter()
            fn()
            seconds = time.perf_counter() - started
        lines.append(f"| {name} | {seconds:.2f} | {count[0]} |")

    step("import the roster", lambda: services.import_roster(actor=teacher, data=roster))
    base = "https://gpu.uni.example"
    step(
        "links as CSV",
        lambda: services.issue_sign_in_links(actor=teacher, base_url=base, delivery="csv"),
    )
    mail.outbox = []

    def by_mail() -> None:
        """What the page does: issue, then the task mails (in-process here, as without Redis)."""
        links = services.issue_sign_in_links(actor=teacher, base_url=base, delivery="email")
        recipients = [list(pair) for pair in services.link_recipients(links)]
        tasks.send_sign_in_links.delay(recipients, base)

    step("links by mail", by_mail)
    assert len(mail.outbox) == args.students, len(mail.outbox)
    lines += ["", f"    .venv/bin/python bench/sign_in_links.py --students {args.students}"]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
