"""How every form of the portal renders: one field template (label, widget, help, then the
field's own errors, inside the field's wrapper) and one form template (errors that belong to
no field at the top). ``FORM_RENDERER`` in portal/settings.py points here, so ``{{ form }}``,
``{{ form.as_p }}`` and ``{{ field.as_field_group }}`` all render the same way."""

from __future__ import annotations

from django.forms.renderers import TemplatesSetting


class QuantaFormRenderer(TemplatesSetting):
    form_template_name = "forms/form.html"
    field_template_name = "forms/field.html"
