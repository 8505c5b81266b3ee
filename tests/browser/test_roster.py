"""A teacher imports a roster whose class column says ML-101, as the demo's pages name the
class, and sees the new members on the class page in natural order."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from playwright.sync_api import expect

if TYPE_CHECKING:
    from tests.browser.conftest import SignIn

ROSTER = (
    "student_number,name,email,class\n"
    "R2026010,Roster Ten,r10@uni.example,ML-101\n"
    "R2026002,Roster Two,r2@uni.example,ML-101\n"
    "R2026001,Roster One,r1@uni.example,ML-101\n"
)


def test_a_teacher_imports_a_roster_for_ML_101_and_sees_the_members(sign_in: SignIn) -> None:
    teacher = sign_in("teacher1", next="/teaching/")
    teacher.get_by_role("link", name="Import a roster").first.click()
    expect(teacher.get_by_role("heading", name="Import a class roster")).to_be_visible()
    expect(teacher.get_by_role("link", name="sample Excel workbook")).to_be_visible()

    teacher.get_by_label("Roster file (CSV or Excel .xlsx)").set_input_files(
        {"name": "ml-roster.csv", "mimeType": "text/csv", "buffer": ROSTER.encode()}
    )
    teacher.get_by_role("button", name="Import").click()

    status = teacher.get_by_role("status")
    expect(status).to_contain_text("3 new accounts, 3 new memberships")
    expect(status).to_contain_text("How the imported students sign in")
    expect(status.locator("li").first).to_have_text("r2026001 → ml-101 (student)")

    teacher.get_by_role("link", name="ml-101").click()
    expect(teacher).to_have_url(re.compile(r"/teaching/ml-101/$"))
    rows = teacher.locator("section[aria-labelledby=roster-h] tbody tr")
    expect(rows.filter(has_text="r2026")).to_have_count(3)
    names = [text.split()[0] for text in rows.filter(has_text="r2026").all_inner_texts()]
    assert names == ["r2026001", "r2026002", "r2026010"]
