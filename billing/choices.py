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


class BudgetPeriod(models.TextChoices):
    MONTH = "month", _("Month")
    TERM = "term", _("Term")


class BudgetPolicy(models.TextChoices):
    """What happens when a budget is used up (``billing.budgets``)."""

    BLOCK = "block", _("Block new launches")
    DOWNGRADE = "downgrade", _("Only CPU-only sizes")
    STOP = "stop", _("Stop running work after a warning")


class CreditSource(models.TextChoices):
    ALLOWANCE = "allowance", _("Allowance of a period")
    MANUAL = "manual", _("Credit granted by an admin")
