"""tenants.services is a package of topic modules; callers keep importing from the top."""

from __future__ import annotations

import importlib
import pkgutil

from tenants import services


def test_every_re_export_is_the_topic_modules_own() -> None:
    modules = [
        importlib.import_module(f"tenants.services.{info.name}")
        for info in pkgutil.iter_modules(services.__path__)
    ]
    for name in services.__all__:
        assert any(getattr(m, name, None) is getattr(services, name) for m in modules), name


def test_the_functions_callers_use_are_where_they_were() -> None:
    for name in ("create_tenant", "set_membership", "set_quota", "reserve", "release"):
        assert callable(getattr(services, name))
    assert services.QUOTA_LIMIT_FIELDS[0] == "gpus" and services.TOKEN_PREFIX == "qnt_"
