from django.db import models
from django.utils.translation import gettext_lazy as _


class EntryKind(models.TextChoices):
    CHARGE = "charge", _("Charge")
    CORRECTION = "correction", _("Correction")


class InvoiceState(models.TextChoices):
    OPEN = "open", _("Open")
    CLOSED = "closed", _("Closed")


class LineKind(models.TextChoices):
    CHARGE = "charge", _("Charge")
    CORRECTION = "correction", _("Correction")
    CREDIT = "credit", _("Credit")
