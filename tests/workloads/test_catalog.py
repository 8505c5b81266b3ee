"""workloads.catalog: images, flavors and templates change in one transaction with an audit
row naming the actor; the API calls the same functions (superusers only)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from core.models import AuditEvent
from workloads import catalog as services
from workloads.models import AppTemplate, Flavor, Image

pytestmark = pytest.mark.django_db


def actions(actor) -> list[str]:
    return list(AuditEvent.objects.filter(actor=actor).values_list("action", flat=True))


def test_an_image_is_created_changed_and_deleted_with_audit_rows(world) -> None:
    image = services.create_image(actor=world.root, name="TF", slug="tf", framework="TF")
    services.update_image(actor=world.root, image=image, framework_version="2.16")
    assert Image.objects.get().framework_version == "2.16"
    services.delete_image(actor=world.root, image=image)
    assert not Image.objects.exists()
    images = AuditEvent.objects.filter(actor=world.root, action__startswith="image.")
    assert sorted(images.values_list("action", flat=True)) == [
        "image.create",
        "image.delete",
        "image.update",
    ]


def test_a_flavor_with_whole_gpus_and_a_share_is_refused_and_not_created(world) -> None:
    with pytest.raises(ValidationError) as raised:
        services.create_flavor(
            actor=world.root,
            name="both",
            slug="both",
            cpu_milli=1000,
            memory_mib=1024,
            gpus=1,
            gpu_milli=500,
        )
    assert "gpu_milli" in raised.value.message_dict
    assert not Flavor.objects.exists() and "flavor.create" not in actions(world.root)


def test_a_flavor_update_keeps_whole_or_share(world, catalog) -> None:
    with pytest.raises(ValidationError):
        services.update_flavor(actor=world.root, flavor=catalog.gpu, gpu_milli=500)
    assert Flavor.objects.get(slug="gpu").gpu_milli == 0
    with pytest.raises(ValidationError) as raised:
        services.update_flavor(actor=world.root, flavor=catalog.gpu, gpu_models=["", 3])
    assert "gpu_models" in raised.value.message_dict


def test_a_templates_default_must_be_allowed_and_nothing_is_half_written(world, catalog) -> None:
    with pytest.raises(ValidationError) as raised:
        services.update_template(
            actor=world.root,
            template=catalog.jupyter,
            name="Renamed",
            allowed_flavors=[catalog.gpu],
        )
    assert "default_flavor" in raised.value.message_dict
    jupyter = AppTemplate.objects.get(slug="jupyter")
    assert jupyter.name == "JupyterLab" and jupyter.allowed_flavors.count() == 4
    services.update_template(
        actor=world.root, template=catalog.jupyter, allowed_flavors=[catalog.small]
    )
    assert list(AppTemplate.objects.get(slug="jupyter").allowed_flavors.all()) == [catalog.small]
    assert AuditEvent.objects.get(action="apptemplate.update").actor == world.root


def test_the_api_writes_the_catalog_through_the_services(world, catalog, api) -> None:
    template = {
        "name": "Terminal",
        "slug": "terminal",
        "kind": "terminal",
        "image": "pytorch",
        "default_flavor": "small",
        "allowed_flavors": ["small", "gpu"],
    }
    response = api(world.root).post("/api/v1/templates/", template, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["allowed_flavors"] == ["small", "gpu"]
    assert AuditEvent.objects.get(action="apptemplate.create").actor == world.root
    bad = template | {"slug": "bad", "default_flavor": "huge"}
    response = api(world.root).post("/api/v1/templates/", bad, format="json")
    assert response.status_code == 400 and "default_flavor" in response.json()
    assert not AppTemplate.objects.filter(slug="bad").exists()
    assert api(world.charlie).delete("/api/v1/templates/terminal/").status_code == 403
    assert api(world.root).delete("/api/v1/templates/terminal/").status_code == 204
    assert AuditEvent.objects.get(action="apptemplate.delete").actor == world.root


def test_a_desktop_template_names_a_safe_program(world, catalog, api) -> None:
    desktop = {
        "name": "Desktop",
        "slug": "desktop",
        "kind": "desktop",
        "image": "pytorch",
        "default_flavor": "small",
        "allowed_flavors": ["small"],
    }
    for program in ("", "xterm; rm -rf ~", "xterm  -ls", "$(id)", "x" * 201):
        response = api(world.root).post(
            "/api/v1/templates/", desktop | {"program": program}, format="json"
        )
        assert response.status_code == 400 and "program" in response.json(), program
    assert not AppTemplate.objects.filter(slug="desktop").exists()
    response = api(world.root).post(
        "/api/v1/templates/", desktop | {"program": "xterm -ls"}, format="json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["program"] == "xterm -ls"
