from django.db import models
from django.utils.translation import gettext_lazy as _


class EntryKind(models.TextChoices):
    CHARGE = "charge", _("Charge")
    CORRECTION = "correction", _("Correction")
