"""Serializer fields for what people type about tenants."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.utils.encoding import smart_str
from rest_framework import serializers

from tenants.models import Tenant


class TenantCodeField(serializers.SlugRelatedField[Tenant]):
    """A tenant by its code (slug) in any letter case: "ML-101", as pages show a class's
    name, names the class ``ml-101``. Codes are unique ignoring case (a database
    constraint), so the lookup finds one tenant at most."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("slug_field", "slug")
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> Tenant:
        if not isinstance(data, str):
            self.fail("invalid")
        queryset = self.get_queryset()
        assert queryset is not None  # every use passes one: the field is writable
        try:
            return queryset.get(slug__iexact=data.strip())
        except ObjectDoesNotExist:
            self.fail("does_not_exist", slug_name=self.slug_field, value=smart_str(data))
