"""A teacher imports a roster on the embedded default (no campus sign-in), downloads the
students' one-time sign-in links as a CSV, and a student opens theirs in a browser of their
own, chooses a password and lands on their home page; the used link then says so."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import TYPE_CHECKING

from playwright.sync_api import Browser, expect

if TYPE_CHECKING:
    from tests.browser.conftest import Portal, SignIn

ROSTER = (
    "student_number,name,email,class\n"
    "L2026001,Link One,l1@uni.example,ML-101\n"
    "L2026002,Link Two,l2@uni.example,ML-101\n"
)


def test_an_imported_student_signs_in_through_the_link_from_the_csv(
    sign_in: SignIn, chromium: Browser, portal: Portal
) -> None:
    teacher = sign_in("teacher1", next="/roster/import/")
    teacher.get_by_label("Roster file (CSV or Excel .xlsx)").set_input_files(
        {"name": "roster.csv", "mimeType": "text/csv", "buffer": ROSTER.encode()}
    )
    teacher.get_by_role("button", name="Import").click()
    status = teacher.get_by_role("status")
    expect(status).to_contain_text("Give each student their one-time sign-in link")

    with teacher.expect_download() as download:
        teacher.get_by_role("button", name="Download 2 sign-in links (CSV)").click()
    assert download.value.suggested_filename == "sign-in-links.csv"
    text = Path(download.value.path()).read_text(encoding="utf-8-sig")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["student_number"] for r in rows] == ["l2026001", "l2026002"]
    link = rows[0]["link"]
    assert link.startswith(portal.url + "/account/welcome/")

    student_context = chromium.new_context(locale="en-US", timezone_id="UTC")
    try:
        student = student_context.new_page()
        student.goto(link)
        expect(student.get_by_role("heading", name="Choose your password")).to_be_visible()
        expect(student.locator("main")).to_contain_text("Your username is l2026001")
        student.locator("#id_new_password1").fill("teal-heron-2026")
        student.locator("#id_new_password2").fill("teal-heron-2026")
        student.get_by_role("button", name="Set password and sign in").click()

        expect(student).to_have_url(portal.url + "/")
        expect(student.get_by_text("Your password is set. Welcome!")).to_be_visible()
        expect(student.get_by_role("heading", name="Your running work")).to_be_visible()

        student.goto(link)  # used: a clear page, not an error
        expect(
            student.get_by_role("heading", name="This sign-in link no longer works")
        ).to_be_visible()
        expect(student.locator("main")).to_contain_text("Ask your teacher for a new link.")
    finally:
        student_context.close()
