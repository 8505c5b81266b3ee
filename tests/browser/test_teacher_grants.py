"""A teacher grants a template to one class: its students see it, other classes do not."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from playwright.sync_api import expect

if TYPE_CHECKING:
    from tests.browser.conftest import SignIn

DATA_SCIENCE = 'section[data-template="jupyter-ds"]'


def test_a_teacher_grants_a_template_and_only_students_of_that_class_see_it(
    sign_in: SignIn,
) -> None:
    student = sign_in("student13")  # DL-201
    other_class = sign_in("student1")  # ML-101, also taught by teacher1
    expect(student.locator("section[data-template]").first).to_be_visible()
    expect(student.locator(DATA_SCIENCE)).to_have_count(0)

    teacher = sign_in("teacher1", next="/teaching/dl-201/")
    teacher.get_by_role("link", name="Grant a template").click()
    teacher.get_by_label("Template").select_option(label="JupyterLab · data science")
    teacher.get_by_role("button", name="Show its sizes").click()
    teacher.get_by_role("checkbox", name=re.compile(r"^½ CPU, 1 GiB")).check()
    teacher.get_by_role("button", name="Grant", exact=True).click()
    expect(teacher).to_have_url(re.compile(r"/teaching/dl-201/$"))
    expect(teacher.locator(".messages")).to_contain_text(
        "JupyterLab · data science is granted to DL-201 Deep Learning."
    )

    student.reload()
    card = student.locator(DATA_SCIENCE)
    expect(card).to_be_visible()
    expect(card.locator("h2")).to_have_text("JupyterLab · data science")
    expect(card).to_contain_text("DL-201 Deep Learning")
    expect(card.locator("tr[data-flavor=cpu-small]")).to_contain_text("starts now")

    other_class.reload()
    expect(other_class.locator('section[data-template="jupyter-pytorch"]')).to_be_visible()
    expect(other_class.locator(DATA_SCIENCE)).to_have_count(0)
