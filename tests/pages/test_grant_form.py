"""The grant form: create, edit, delete a grant of a class, with the API's validation."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from core.models import AuditEvent
from workloads.models import AppTemplate, Grant

pytestmark = pytest.mark.django_db


@pytest.fixture
def tensorboard(catalog) -> AppTemplate:
    """A template not granted to anyone yet, allowing only the small flavor."""
    template = AppTemplate.objects.create(
        name="TensorBoard",
        slug="tensorboard",
        kind="tensorboard",
        image=catalog.image,
        default_flavor=catalog.small,
    )
    template.allowed_flavors.set([catalog.small])
    return template


def grant_data(**changes: Any) -> dict[str, Any]:
    data = {
        "template": "tensorboard",
        "flavors": ["small"],
        "member_limit": 1,
        "max_duration_minutes": 120,
        "idle_timeout_minutes": 30,
        "max_extensions": 1,
        "expires_on": "",
        "windows-TOTAL_FORMS": 2,
        "windows-INITIAL_FORMS": 0,
        "windows-0-day": "1",
        "windows-0-start": "14:00",
        "windows-0-end": "16:00",
        "windows-1-day": "",
        "windows-1-start": "",
        "windows-1-end": "",
    }
    data.update(changes)
    return data


def test_a_grant_from_the_form_appears_for_bob_and_not_for_charlie(
    world, catalog, tensorboard, signed_in
) -> None:
    response = signed_in(world.alice).post("/teaching/ml-101/grants/new/", grant_data())
    assert response.status_code == 302 and response["Location"] == "/teaching/ml-101/"
    grant = Grant.objects.get(template=tensorboard)
    assert grant.tenant == world.class_a and grant.created_by == world.alice
    assert grant.windows == [{"day": 1, "start": "14:00", "end": "16:00"}]
    assert [f.slug for f in grant.flavors.all()] == ["small"]
    assert AuditEvent.objects.filter(action="grant.create", actor=world.alice).exists()
    assert "TensorBoard" in signed_in(world.bob).get("/apps/").content.decode()
    assert "TensorBoard" not in signed_in(world.charlie).get("/apps/").content.decode()


def test_a_flavor_outside_the_template_is_a_field_error_and_creates_nothing(
    world, catalog, tensorboard, signed_in
) -> None:
    response = signed_in(world.alice).post(
        "/teaching/ml-101/grants/new/", grant_data(flavors=["small", "gpu"])
    )
    page = response.content.decode()
    assert response.status_code == 200 and "not allowed by TensorBoard: gpu" in page
    assert 'value="gpu"' in page  # still shown, so it can be unticked
    assert not Grant.objects.filter(template=tensorboard).exists()


def test_a_window_ending_before_it_starts_is_an_error_and_creates_nothing(
    world, catalog, tensorboard, signed_in
) -> None:
    response = signed_in(world.alice).post(
        "/teaching/ml-101/grants/new/",
        grant_data(**{"windows-0-start": "16:00", "windows-0-end": "14:00"}),
    )
    page = response.content.decode()
    assert response.status_code == 200 and "window 1: ends before it starts" in page
    assert not Grant.objects.filter(template=tensorboard).exists()


def test_a_half_filled_window_row_and_a_past_expiry_are_field_errors(
    world, catalog, tensorboard, signed_in
) -> None:
    yesterday = dt.date.today() - dt.timedelta(days=2)
    response = signed_in(world.alice).post(
        "/teaching/ml-101/grants/new/",
        grant_data(**{"windows-0-end": "", "expires_on": yesterday.isoformat()}),
    )
    page = response.content.decode()
    assert "Give a day, a start and an end" in page and "Choose today or a later day" in page
    assert not Grant.objects.filter(template=tensorboard).exists()


def test_showing_another_templates_sizes_saves_nothing(
    world, catalog, tensorboard, signed_in
) -> None:
    response = signed_in(world.alice).post(
        "/teaching/ml-101/grants/new/", grant_data(flavors=[], choose="1")
    )
    page = response.content.decode()
    assert response.status_code == 200 and "the sizes TensorBoard allows" in page
    assert 'value="small"' in page and 'value="gpu"' not in page
    assert "This field is required" not in page
    assert not Grant.objects.filter(template=tensorboard).exists()


def test_alice_edits_a_grant_and_its_windows(world, catalog, signed_in) -> None:
    client = signed_in(world.alice)
    page = client.get(f"/teaching/grants/{catalog.grant.pk}/edit/").content.decode()
    assert 'value="jupyter" selected' in page and 'value="huge" id="id_flavors_1" checked' in page
    response = client.post(
        f"/teaching/grants/{catalog.grant.pk}/edit/",
        grant_data(template="jupyter", flavors=["small", "half"], member_limit=2),
    )
    assert response.status_code == 302
    catalog.grant.refresh_from_db()
    assert catalog.grant.member_limit == 2 and catalog.grant.windows[0]["day"] == 1
    assert {f.slug for f in catalog.grant.flavors.all()} == {"small", "half"}
    assert AuditEvent.objects.filter(action="grant.update", actor=world.alice).exists()


def test_alice_deletes_a_grant_after_confirming(world, catalog, signed_in) -> None:
    client = signed_in(world.alice)
    url = f"/teaching/grants/{catalog.grant.pk}/delete/"
    assert "Stop granting JupyterLab to ML-101?" in client.get(url).content.decode()
    assert client.post(url).status_code == 302
    assert not Grant.objects.exists()
    assert AuditEvent.objects.filter(action="grant.delete", actor=world.alice).exists()


def test_outsiders_cannot_open_or_change_class_a_grants(world, catalog, signed_in) -> None:
    edit = f"/teaching/grants/{catalog.grant.pk}/edit/"
    delete = f"/teaching/grants/{catalog.grant.pk}/delete/"
    charlie = signed_in(world.charlie)
    assert charlie.get("/teaching/ml-101/grants/new/").status_code == 404
    assert charlie.get(edit).status_code == 404
    assert charlie.post(delete).status_code == 404
    assert signed_in(world.bob).post(delete).status_code == 403
    assert Grant.objects.filter(pk=catalog.grant.pk).exists()
