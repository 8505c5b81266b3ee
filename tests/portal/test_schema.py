"""The OpenAPI schema is generated without warnings and its docs page works offline."""

import pytest
import yaml
from django.core.management import call_command


def test_the_schema_generates_without_warnings_and_validates(tmp_path) -> None:
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    schema = yaml.safe_load(out.read_text())
    assert "/api/v1/tenants/{slug}/quota/" in schema["paths"]
    assert "/api/v1/roster-import/" in schema["paths"]


@pytest.mark.django_db
def test_the_api_docs_page_loads_its_assets_from_this_server(client, world) -> None:
    client.force_login(world.bob)
    page = client.get("/api/docs/").content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/" in page
    assert "cdn" not in page.lower()


@pytest.mark.django_db
def test_the_models_and_migrations_agree() -> None:
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)
