"""The language selector switches the portal to Chinese, and the choice stays with the person."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from playwright.sync_api import expect

if TYPE_CHECKING:
    from tests.browser.conftest import SignIn

HAN = re.compile(r"[\u4e00-\u9fff]")  # any Chinese character: the wording is the translators'


def test_switching_to_chinese_shows_the_pages_in_chinese(sign_in: SignIn) -> None:
    page = sign_in("student7")
    html, title = page.locator("html"), page.locator("main h1")
    launch = page.locator('section[data-template="jupyter-pytorch"] button[type=submit]')
    expect(html).to_have_attribute("lang", "en")
    expect(title).to_have_text("App Center")
    expect(launch).to_have_text("Launch")

    page.locator("select#language").select_option(label="简体中文")

    expect(html).to_have_attribute("lang", "zh-hans")
    expect(page).to_have_url(re.compile(r"/apps/$"))
    expect(page.locator("select#language option:checked")).to_have_text("简体中文")
    expect(title).to_have_text(HAN)
    expect(launch).to_have_text(HAN)
    expect(page.locator("header nav a").first).to_have_text(HAN)  # "Home"
    expect(page.locator("header nav")).not_to_contain_text("App Center")

    # Kept with the account: the next page, and the next sign-in, are in Chinese too.
    page.goto("/workloads/")
    expect(html).to_have_attribute("lang", "zh-hans")
    expect(title).to_have_text(HAN)
    again = sign_in("student7")
    expect(again.locator("html")).to_have_attribute("lang", "zh-hans")
    expect(again.locator("main h1")).to_have_text(HAN)
