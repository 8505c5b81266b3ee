"""One-time sign-in links: a teacher hands imported students (no password) a link; each
opens theirs, chooses a password and is signed in. Links end after SIGN_IN_LINK_DAYS, after
use and after the password changes; only members of the teacher's classes without a password
get one."""

from __future__ import annotations

import csv
import io
import re
from datetime import datetime, timedelta
from typing import Any
from unittest import mock

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.test import Client

from core.models import AuditEvent
from tenants import services, tasks
from tenants.choices import Role

pytestmark = pytest.mark.django_db
User = get_user_model()
ROSTER = (
    "student_number,name,email,class\n"
    "s1,Ann Lee,ann@uni.example,ml-101\n"
    "s2,张三,zhang@uni.example,ml-101\n"
)


@pytest.fixture
def imported(world: Any) -> list[Any]:
    services.import_roster(actor=world.alice, data=ROSTER)
    return list(User.objects.filter(username__in=["s1", "s2"]).order_by("username"))


def links_csv(client: Client, **data: Any) -> list[dict[str, str]]:
    response = client.post("/roster/sign-in-links/", {"delivery": "csv", **data})
    assert response.status_code == 200, response.content
    assert response["Cache-Control"] == "no-store"
    text = response.content.decode("utf-8-sig")
    return list(csv.DictReader(io.StringIO(text)))


def path_of(url: str) -> str:
    return re.sub(r"^https?://[^/]+", "", url)


def test_a_teacher_downloads_links_for_the_imported_students(world, imported, client) -> None:
    client.force_login(world.alice)

    rows = links_csv(client, user=["s1", "s2", "bob"])

    assert [(r["student_number"], r["name"], r["email"]) for r in rows] == [
        ("s1", "Ann Lee", "ann@uni.example"),
        ("s2", "张三", "zhang@uni.example"),
    ]  # bob has a password of his own: no link
    assert all(r["link"].startswith("http://testserver/account/welcome/") for r in rows)
    events = AuditEvent.objects.filter(action="user.sign_in_link")
    assert sorted(e.target_id for e in events) == sorted(str(u.pk) for u in imported)
    assert {e.actor for e in events} == {world.alice}
    token = path_of(rows[0]["link"]).rstrip("/").rsplit("/", 1)[1]
    assert all(token not in str(e.data) for e in events)  # the token is not in the audit log


def test_a_student_opens_the_link_sets_a_password_and_lands_home(world, imported) -> None:
    teacher, student = Client(), Client()
    teacher.force_login(world.alice)
    link = path_of(links_csv(teacher, user=["s1"])[0]["link"])

    form = student.get(link, follow=True)
    assert "Choose your password" in form.content.decode()
    form_url = form.redirect_chain[-1][0]  # the token moves to the session
    done = student.post(
        form_url,
        {"new_password1": "purple-otter-91", "new_password2": "purple-otter-91"},
        follow=True,
    )

    assert done.redirect_chain[-1][0] == "/"
    assert done.context["user"].username == "s1"
    assert "Your password is set" in done.content.decode()
    s1 = User.objects.get(username="s1")
    assert s1.check_password("purple-otter-91")
    assert AuditEvent.objects.filter(action="user.set_password", target_id=str(s1.pk)).exists()
    # Used: the same link now says so.
    again = Client().get(link, follow=True).content.decode()
    assert "This sign-in link no longer works" in again
    assert "Ask your teacher for a new link" in again


def test_a_weak_password_is_refused_on_the_field(world, imported) -> None:
    teacher, student = Client(), Client()
    teacher.force_login(world.alice)
    link = path_of(links_csv(teacher, user=["s1"])[0]["link"])
    form_url = student.get(link, follow=True).redirect_chain[-1][0]

    page = student.post(form_url, {"new_password1": "12345678", "new_password2": "12345678"})

    assert page.status_code == 200
    assert "This password is entirely numeric." in page.context["form"].errors["new_password2"]
    assert not User.objects.get(username="s1").has_usable_password()


def test_an_expired_link_says_to_ask_the_teacher(world, imported, settings) -> None:
    teacher = Client()
    teacher.force_login(world.alice)
    link = path_of(links_csv(teacher, user=["s2"])[0]["link"])
    later = datetime.now() + timedelta(days=settings.SIGN_IN_LINK_DAYS, hours=1)

    with mock.patch("django.contrib.auth.tokens.PasswordResetTokenGenerator._now") as now:
        now.return_value = later
        page = Client().get(link, follow=True)

    assert page.status_code == 200
    assert "This sign-in link no longer works" in page.content.decode()
    # Within the time it still works.
    assert "Choose your password" in Client().get(link, follow=True).content.decode()


def test_a_link_ends_when_the_password_is_set_another_way(world, imported) -> None:
    teacher = Client()
    teacher.force_login(world.alice)
    link = path_of(links_csv(teacher, user=["s2"])[0]["link"])
    s2 = User.objects.get(username="s2")
    s2.set_password("set-by-an-admin-7")
    s2.save()

    assert "no longer works" in Client().get(link, follow=True).content.decode()


def test_a_tampered_link_is_a_clear_page_not_a_500(world, imported) -> None:
    for link in ("/account/welcome/MQ/garbage-token/", "/account/welcome/!!/x-y/"):
        page = Client().get(link, follow=True)
        assert page.status_code == 200
        assert "no longer works" in page.content.decode()


def test_the_email_goes_to_each_student_in_their_language(world, imported, client) -> None:
    services.update_preferences(actor=imported[1], language="zh-hans")
    client.force_login(world.alice)

    response = client.post(
        "/roster/sign-in-links/", {"delivery": "email", "user": ["s1", "s2"]}, follow=True
    )

    assert "2 sign-in links are being emailed." in response.content.decode()
    by_to = {m.to[0]: m for m in mail.outbox}
    assert set(by_to) == {"ann@uni.example", "zhang@uni.example"}
    english, chinese = by_to["ann@uni.example"], by_to["zhang@uni.example"]
    assert english.subject == "Your sign-in link for ML-101"
    assert "Your username is s1" in english.body
    assert "http://testserver/account/welcome/" in english.body
    assert "ML-101" in chinese.subject and "Your sign-in link" not in chinese.subject
    assert "s2" in chinese.body and "http://testserver/account/welcome/" in chinese.body
    assert {e.data["delivery"] for e in AuditEvent.objects.filter(action="user.sign_in_link")} == {
        "email"
    }


def test_the_page_enqueues_the_mails_by_ids_and_says_they_are_being_sent(
    world, imported, client
) -> None:
    client.force_login(world.alice)
    with mock.patch.object(tasks.send_sign_in_links, "delay") as delay:
        page = client.post("/roster/sign-in-links/", {"delivery": "email"}, follow=True)

    assert "2 sign-in links are being emailed." in page.content.decode()
    [(recipients, base_url)] = [c.args for c in delay.call_args_list]
    assert recipients == [[u.pk, world.class_a.pk] for u in imported]  # ids only, no token
    assert base_url == "http://testserver/"
    assert mail.outbox == []  # the task sends them, not the request
    # Run as a worker would (a JSON message's lists), the task mails each their link.
    assert tasks.send_sign_in_links.apply(args=(recipients, base_url)).get() == 2
    assert sorted(m.to[0] for m in mail.outbox) == ["ann@uni.example", "zhang@uni.example"]
    link = path_of(re.search(r"https?://\S+/account/welcome/\S+", mail.outbox[0].body)[0])
    assert "Choose your password" in Client().get(link, follow=True).content.decode()


def test_the_task_mails_nobody_who_set_a_password_or_lost_their_address_meanwhile(
    world, imported
) -> None:
    s1, s2 = imported
    recipients = [[s1.pk, world.class_a.pk], [s2.pk, world.class_a.pk], [999999, 1]]
    s1.set_password("chosen-meanwhile-3")
    s1.save()
    assert tasks.send_sign_in_links.apply(args=(recipients, "https://gpu.uni.example")).get() == 1
    [sent] = mail.outbox
    assert (
        sent.to == ["zhang@uni.example"] and "https://gpu.uni.example/account/welcome/" in sent.body
    )
    s2.email = ""
    s2.save()
    assert tasks.send_sign_in_links.apply(args=(recipients, "https://gpu.uni.example")).get() == 0


def test_outsiders_cannot_have_the_mails_sent(world, imported, make_user) -> None:
    olga = make_user("olga")
    world.add(world.class_b, olga, Role.TEACHER)  # a teacher, of another class
    with mock.patch.object(tasks.send_sign_in_links, "delay") as delay:
        for person in (world.bob, world.charlie, olga):
            client = Client()
            client.force_login(person)
            for data in ({}, {"user": ["s1", "s2"]}, {"class": "ml-101"}):
                response = client.post("/roster/sign-in-links/", {"delivery": "email", **data})
                assert response.status_code in (302, 403, 404)
        Client().post("/roster/sign-in-links/", {"delivery": "email"})  # signed out
    assert delay.call_count == 0
    assert mail.outbox == []
    assert not AuditEvent.objects.filter(action="user.sign_in_link").exists()


def test_a_mail_server_that_is_down_tells_the_teacher(world, imported, client) -> None:
    client.force_login(world.alice)
    with mock.patch(
        "django.core.mail.backends.locmem.EmailBackend.send_messages",
        side_effect=ConnectionRefusedError,
    ):
        page = client.post("/roster/sign-in-links/", {"delivery": "email"}, follow=True)

    assert page.status_code == 200
    assert "The mail could not be sent" in page.content.decode()


def test_the_class_page_offers_links_for_members_who_never_signed_in(
    world, imported, client
) -> None:
    client.force_login(world.alice)
    page = client.get("/teaching/ml-101/").content.decode()
    assert "2 members have no password and have never signed in" in page

    rows = links_csv(client, **{"class": "ml-101"})

    assert [r["student_number"] for r in rows] == ["s1", "s2"]


def test_no_link_for_a_local_account_a_superuser_or_someone_signed_in(
    world, imported, client
) -> None:
    ghost = User.objects.create_user(username="ghost")  # no password, but a superuser
    ghost.is_superuser = True
    ghost.save()
    world.add(world.class_a, ghost, Role.STUDENT)
    s2 = imported[1]
    s2.last_login = s2.date_joined
    s2.save()  # signed in already (campus sign-in, say)
    client.force_login(world.alice)

    rows = links_csv(client, **{"class": "ml-101"})

    assert [r["student_number"] for r in rows] == ["s1"]  # not bob, ghost nor s2


def test_an_outsider_teacher_gets_no_links_for_another_class(world, imported, make_user) -> None:
    other = make_user("olga")
    world.add(world.class_b, other, Role.TEACHER)
    client = Client()
    client.force_login(other)

    # A class she cannot see is a 404, as on the class pages.
    assert (
        client.post("/roster/sign-in-links/", {"delivery": "csv", "class": "ml-101"}).status_code
        == 404
    )
    page = client.post("/roster/sign-in-links/", {"delivery": "csv", "user": ["s1", "s2"]})
    assert page.status_code == 302  # nobody of hers: nothing issued
    assert not AuditEvent.objects.filter(action="user.sign_in_link").exists()


def test_students_and_outsiders_cannot_issue_links(world, imported) -> None:
    for person in (world.bob, world.charlie):
        client = Client()
        client.force_login(person)
        for data in ({"delivery": "csv"}, {"delivery": "email", "class": "ml-101"}):
            assert client.post("/roster/sign-in-links/", data).status_code == 403
    assert Client().post("/roster/sign-in-links/", {"delivery": "csv"}).status_code == 302
    assert not AuditEvent.objects.filter(action="user.sign_in_link").exists()
    assert mail.outbox == []


def test_bad_input_is_a_400_or_404_not_a_500(world, imported, client) -> None:
    client.force_login(world.alice)
    assert client.post("/roster/sign-in-links/", {"delivery": "fax"}).status_code == 400
    assert (
        client.post("/roster/sign-in-links/", {"delivery": "csv", "class": "nope"}).status_code
        == 404
    )
    assert client.get("/roster/sign-in-links/").status_code == 405


def test_the_roster_page_offers_the_links_after_an_import(world, client) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    client.force_login(world.alice)
    page = client.post(
        "/roster/import/", {"file": SimpleUploadedFile("r.csv", ROSTER.encode())}
    ).content.decode()

    assert "Give each student their one-time sign-in link" in page
    assert "Download 2 sign-in links (CSV)" in page
    assert "cannot sign in yet" not in page


def test_the_roster_page_names_the_links_in_chinese(world, client) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    services.update_preferences(actor=world.alice, language="zh-hans")
    client.force_login(world.alice)
    page = client.post(
        "/roster/import/", {"file": SimpleUploadedFile("r.csv", ROSTER.encode())}
    ).content.decode()

    assert "请把一次性登录链接发给每位学生" in page
    assert "下载 2 个登录链接（CSV）" in page


def test_no_link_for_an_account_with_a_role_the_issuer_cannot_give(world, imported) -> None:
    """A link hands over the account: a TA gets none for an imported teacher, and alice
    none for her student s2 who also teaches class B (she has no say there)."""
    ta = User.objects.create_user(username="tara", password="pw-tara-123")
    world.add(world.class_a, ta, Role.TA)
    new_teacher = User.objects.create_user(username="tess")  # no password, never signed in
    world.add(world.class_a, new_teacher, Role.TEACHER)
    world.add(world.class_b, imported[1], Role.TEACHER)
    as_ta, as_alice = Client(), Client()
    as_ta.force_login(ta)
    as_alice.force_login(world.alice)

    assert [r["student_number"] for r in links_csv(as_ta, **{"class": "ml-101"})] == ["s1"]
    names = {r["email"] for r in links_csv(as_alice, **{"class": "ml-101"})}
    assert names == {"ann@uni.example"}  # not s2 (teaches DL-201), not tess (a teacher)
    as_dean = Client()
    as_dean.force_login(world.dean)  # admin of the department: may give every role
    assert len(links_csv(as_dean, **{"class": "ml-101"})) == 3  # s1, s2, tess
