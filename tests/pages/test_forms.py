"""Every form renders its errors inside the field they belong to (core/forms.py): under the
field's own label and input, never above the next field's label."""

from __future__ import annotations

import pytest
from lxml import html

pytestmark = pytest.mark.django_db


def wrapper_of(page: str, name: str) -> html.HtmlElement:
    """The ``div.field`` that holds the input named ``name``."""
    (found,) = html.fromstring(page).xpath(
        f'//div[contains(concat(" ", @class, " "), " field ")][.//*[@name="{name}"]]'
    )
    return found


def test_a_missing_command_is_reported_inside_the_command_field(world, catalog, client) -> None:
    client.force_login(world.bob)
    page = client.post(
        "/workloads/new-job/",
        {"tenant": world.class_a.pk, "flavor": catalog.small.pk, "workers": 1, "max_retries": 0},
    ).content.decode()
    command = wrapper_of(page, "command")
    assert "has-error" in command.get("class")
    assert command.xpath('.//*[@role="alert"]')[0].text_content().strip() == (
        "This field is required."
    )
    # The optional name above it carries no error, and the error follows the command's input.
    assert not wrapper_of(page, "name").xpath('.//*[@role="alert"]')
    text = command.text_content()
    assert text.index("Command") < text.index("This field is required.")


def test_an_error_of_no_single_field_is_shown_at_the_top_of_the_form(world, client) -> None:
    page = client.post("/login/", {"username": "bob", "password": "wrong"})
    tree = html.fromstring(page.content.decode())
    (form,) = tree.xpath('//form[.//*[@name="password"]]')
    banner = form.xpath('./div[contains(@class, "banner")][@role="alert"]')
    assert banner and "correct username and password" in banner[0].text_content()
    assert not wrapper_of(page.content.decode(), "username").xpath('.//*[@role="alert"]')


def test_the_quota_form_keeps_in_use_and_the_error_in_the_field(world, client) -> None:
    client.force_login(world.root)
    page = client.post(f"/console/tenants/{world.class_a.slug}/quota/", {"gpus": "-1"})
    assert page.status_code == 200
    gpus = wrapper_of(page.content.decode(), "gpus")
    assert gpus.xpath('.//*[@role="alert"]') and "In use" in gpus.text_content()
