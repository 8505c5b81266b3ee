"""Notices: short messages to people (a budget at 80 %, a budget used up), shown on the home
page and counted in the navigation, and sent by email where the person has an address.

A notice is a reason (``core.reasons``): stored as code and parameters with the English text
beside them, rendered in the reader's language on the page and in the language of the
person's preferences (``User.language``, else ``LANGUAGE_CODE``) in the email. ``dedupe_key``
makes it once-only per person: a caller that runs again (a retried task, the next tick) with
the same key adds nothing and sends nothing.

Lowest layer: the apps above call :func:`notify`; nothing here imports them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone, translation

from core.models import Notice
from core.reasons import Reason

logger = logging.getLogger(__name__)

SUBJECT = "Quanta: "


def notify(
    users: Iterable[Any],
    reason: Reason,
    *,
    level: str = Notice.Level.INFO,
    dedupe_key: str = "",
    link: str = "",
) -> list[Notice]:
    """A notice of ``reason`` to each of ``users`` (once per person and ``dedupe_key``); an
    email to each new recipient with an address, after commit. The notices made."""
    people = {u.pk: u for u in users if getattr(u, "pk", None)}
    if not people:
        return []
    if dedupe_key:
        had = set(
            Notice.objects.filter(user_id__in=people, dedupe_key=dedupe_key).values_list(
                "user_id", flat=True
            )
        )
        people = {pk: u for pk, u in people.items() if pk not in had}
    text = reason.text()[:500]
    made = []
    for user in people.values():
        try:
            with transaction.atomic():
                made.append(
                    Notice.objects.create(
                        user=user,
                        level=level,
                        reason_code=reason.code,
                        reason_params=reason.to_json()["params"],
                        text=text,
                        link=link[:300],
                        dedupe_key=dedupe_key[:200],
                    )
                )
        except IntegrityError:  # the same key, made meanwhile by another run: skip it
            if not dedupe_key:
                raise
    recipients = [n.user for n in made if n.user.email]
    if recipients:
        transaction.on_commit(lambda: _send(recipients, reason, link))
    return made


def _send(users: list[Any], reason: Reason, link: str) -> None:
    for user in users:
        language = user.language or settings.LANGUAGE_CODE
        with translation.override(language):
            message = reason.render()
        body = message if not link else f"{message}\n\n{settings.PORTAL_URL.rstrip('/')}{link}"
        try:
            send_mail(SUBJECT + message[:120], body, settings.DEFAULT_FROM_EMAIL, [user.email])
        except Exception:  # a mail server down must not undo the notice or the caller
            logger.exception("could not send a notice to %s", user.email)


def reason_of(notice: Notice) -> Reason:
    return Reason.from_json({"code": notice.reason_code, "params": notice.reason_params})


def unread(user: Any) -> QuerySet[Notice]:
    return Notice.objects.filter(user=user, read_at__isnull=True)


def recent(user: Any, n: int = 10) -> list[Notice]:
    """The newest notices of ``user``, each with ``message`` rendered in the active language."""
    notices = list(Notice.objects.filter(user=user)[:n])
    for notice in notices:
        notice.message = reason_of(notice).render()  # type: ignore[attr-defined]
    return notices


def mark_read(*, actor: Any, ids: Iterable[int] | None = None) -> int:
    """Mark ``actor``'s notices read (``ids``: those only; None: all); how many changed. Only
    one's own notices: another person's id changes nothing."""
    notices = unread(actor)
    if ids is not None:
        notices = notices.filter(pk__in=list(ids))
    return notices.update(read_at=timezone.now())
