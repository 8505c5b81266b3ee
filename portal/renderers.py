"""The browsable API, with forms that never list objects.

DRF's HTML forms render a related field as a dropdown of its whole queryset: every user,
every tenant, whatever the requester may see. Here a related field is a text input (type the
slug or username), so a form shows nothing that the requester's own, scoped, responses do
not already show; the raw-data (JSON) form is unchanged. See docs/api.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import relations, renderers


class FormRenderer(renderers.HTMLFormRenderer):
    def render_field(self, field: Any, parent_style: Mapping[str, Any]) -> str:
        inner = field._field
        if isinstance(inner, relations.RelatedField | relations.ManyRelatedField):
            # The serializer's own copy of the field (serializers deep-copy declared fields).
            inner.style = {**inner.style, "base_template": "input.html"}
        return str(super().render_field(field, parent_style))


class BrowsableAPIRenderer(renderers.BrowsableAPIRenderer):
    form_renderer_class = FormRenderer
