"""One-time sign-in links: a student without a password opens theirs, sets a password and is
signed in.

The token is Django's password-reset token (``default_token_generator``): an HMAC over the
account's id, password hash, last sign-in and the time it was made. Setting the password or
signing in changes the hash input, so a link works once; ``PASSWORD_RESET_TIMEOUT``
(``SIGN_IN_LINK_DAYS``) ends it unused. Nothing is stored: the audit row names who issued
links for whom, never the token.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import UNUSABLE_PASSWORD_PREFIX
from django.contrib.auth.tokens import default_token_generator
from django.core.mail import EmailMessage, get_connection
from django.db import transaction
from django.db.models import Prefetch, Q
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import translation
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode
from guardian.models import UserObjectPermission

from core.audit import record
from tenants.choices import MANAGING_ROLES
from tenants.models import Membership, Tenant
from tenants.permissions import Access

User = get_user_model()
DELIVERIES = ("csv", "email")


@dataclass(frozen=True)
class SignInLink:
    user: Any
    tenant: Tenant
    url: str


def link_candidates(
    *, actor: Any, tenant: Tenant | None = None, usernames: Iterable[str] | None = None
) -> list[Any]:
    """People who may get a link from ``actor``, by username: members of a class ``actor``
    manages (of ``tenant`` when given; named in ``usernames`` when given) who have no usable
    password and never signed in; never a superuser, staff or inactive account.

    A link hands the account to whoever holds it, so ``actor`` must be able to give every
    role the account has, wherever it has one: a TA gets none for a teacher, and a teacher
    of class A none for a student of A who teaches class B. Accounts with permissions of
    their own (django-guardian) get none either."""
    access = Access.of(actor)
    memberships = Membership.objects.filter(access.tenant_filter(MANAGING_ROLES, "tenant__"))
    if tenant is not None:
        if not access.can_manage(tenant):
            return []
        memberships = memberships.filter(tenant=tenant)
    people = (
        User.objects.filter(
            pk__in=memberships.values("user"),
            is_active=True,
            is_superuser=False,
            is_staff=False,
            last_login__isnull=True,
        )
        # Django stores an unusable password as "!" + random characters.
        .filter(Q(password__startswith=UNUSABLE_PASSWORD_PREFIX) | Q(password=""))
        .exclude(pk__in=UserObjectPermission.objects.values("user"))
        .prefetch_related(
            Prefetch("memberships", queryset=Membership.objects.select_related("tenant"))
        )
        .order_by("username")
    )
    if usernames is not None:
        people = people.filter(username__in=list(usernames))
    return [
        user
        for user in people
        if all(access.can_assign_role(m.tenant, m.role) for m in user.memberships.all())
    ]


def needs_sign_in_link(user: Any) -> bool:
    """The account's half of ``link_candidates``'s rule, for one already loaded: no usable
    password, never signed in (the class page counts these; who may issue is not checked)."""
    return (
        user.is_active
        and not (user.is_superuser or user.is_staff)
        and user.last_login is None
        and not user.has_usable_password()
    )


def link_path(user: Any) -> str:
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    token = default_token_generator.make_token(user)
    return reverse("sign-in-link", kwargs={"uidb64": uid, "token": token})


def issue_sign_in_links(
    *,
    actor: Any,
    base_url: str,
    delivery: str,
    tenant: Tenant | None = None,
    usernames: Iterable[str] | None = None,
) -> list[SignInLink]:
    """Links for the candidates (``link_candidates``), optionally only those named in
    ``usernames``; one audit row ``user.sign_in_link`` per person with the delivery (``csv``
    or ``email``). Anyone not a candidate is left out silently. With ``email`` nothing is sent
    here: the caller enqueues ``tenants.tasks.send_sign_in_links`` with ``link_recipients(links)``
    (ids only), which mails each person with an address in their own language."""
    if delivery not in DELIVERIES:
        raise ValueError(delivery)
    people = link_candidates(actor=actor, tenant=tenant, usernames=usernames)
    access = Access.of(actor)
    base = base_url.rstrip("/")
    links = []
    with transaction.atomic():
        for user in people:
            where = tenant or min(
                (m.tenant for m in user.memberships.all() if access.can_manage(m.tenant)),
                key=lambda t: t.path,
            )
            links.append(SignInLink(user=user, tenant=where, url=base + link_path(user)))
            record(
                "user.sign_in_link",
                actor=actor,
                target=user,
                tenant=where,
                delivery=delivery,
                emailed=delivery == "email" and bool(user.email),
            )
    return links


def link_recipients(links: Iterable[SignInLink]) -> list[tuple[int, int]]:
    """(user id, tenant id) of each link whose person has an email address: what
    ``send_sign_in_links`` takes, so that a task's message carries ids, never a token."""
    return [(link.user.pk, link.tenant.pk) for link in links if link.user.email]


def send_sign_in_links(*, recipients: Iterable[tuple[int, int]], base_url: str) -> int:
    """Mail each (user id, tenant id) a fresh link to ``base_url``, in their language, over
    one connection; the number sent. The link is made here, when it is sent, and only for
    someone who still needs one (``needs_sign_in_link``) and has an address: a person who
    set a password or signed in since it was issued gets none, as a link made for them now
    would work. Nothing is written (``issue_sign_in_links`` audited the issue)."""
    wanted = list(recipients)
    users = User.objects.in_bulk([user_id for user_id, _ in wanted])
    tenants = Tenant.objects.in_bulk([tenant_id for _, tenant_id in wanted])
    base = base_url.rstrip("/")
    links = [
        SignInLink(user=user, tenant=tenant, url=base + link_path(user))
        for user_id, tenant_id in wanted
        if (user := users.get(user_id)) is not None
        and (tenant := tenants.get(tenant_id)) is not None
        and user.email
        and needs_sign_in_link(user)
    ]
    return _mail(links)


def _mail(links: list[SignInLink]) -> int:
    messages = []
    days = max(1, settings.PASSWORD_RESET_TIMEOUT // 86400)
    for link in links:
        language = link.user.language or settings.LANGUAGE_CODE
        with translation.override(language):
            context = {"user": link.user, "tenant": link.tenant, "url": link.url, "days": days}
            subject = render_to_string("tenants/email/sign_in_link_subject.txt", context)
            body = render_to_string("tenants/email/sign_in_link.txt", context)
        messages.append(
            EmailMessage(
                " ".join(subject.split()), body, settings.DEFAULT_FROM_EMAIL, [link.user.email]
            )
        )
    if not messages:
        return 0
    return get_connection(fail_silently=False).send_messages(messages) or 0


def set_password_from_link(*, user: Any, password: str) -> None:
    """The student's own password, set through their link (the actor is the student)."""
    with transaction.atomic():
        user.set_password(password)
        user.save(update_fields=["password"])
        record("user.set_password", actor=user, target=user, source="sign_in_link")
