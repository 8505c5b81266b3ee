"""`manage.py volcano-manifests`: the dashed name the docs use (see volcano_manifests.py)."""

from scheduling.management.commands.volcano_manifests import Command

__all__ = ["Command"]
