from django.db import models
from django.utils.translation import gettext_lazy as _


class BackendKind(models.TextChoices):
    LOCAL = "local", _("Local (this host)")
    KUBERNETES = "kubernetes", _("Kubernetes + Volcano")
    SIMULATED = "simulated", _("Simulated")


class PlacementPolicy(models.TextChoices):
    # The default: fgd-mix where some GPU is shared, else binpack (scheduling.placement).
    AUTO = "auto", _("Automatic: fragmentation-aware (fgd-mix) with shared GPUs, else bin-pack")
    BINPACK = "binpack", _("Bin-pack (fill nodes up)")
    SPREAD = "spread", _("Spread (least allocated)")
    BESTFIT = "bestfit", _("Best fit")
    RANDOM = "random", _("Random")
    FGD = "fgd", _("Fragmentation-aware (FGD, as published)")
    FGD_CPU = "fgd-cpu", _("Fragmentation-aware, CPU-aware (FGD refined)")
    FGD_MIX = "fgd-mix", _("Fragmentation-aware, adapted to the workload mix (recommended)")


class GpuSharing(models.TextChoices):
    EXCLUSIVE = "exclusive", _("Whole devices only")
    FRACTIONAL = "fractional", _("Fractions by memory and compute share")
    MIG = "mig", _("MIG profiles")
