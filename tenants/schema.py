"""OpenAPI description of the personal token authentication (loaded by TenantsConfig)."""

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class PersonalTokenScheme(OpenApiAuthenticationExtension):
    target_class = "tenants.auth.PersonalTokenAuthentication"
    name = "personalToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A personal API token (qnt_…) created at /account/tokens/.",
        }
