"""`manage.py volcano-manifests`: the dashed name the docs use (see volcano_manifests.py)."""

from console.management.commands.volcano_manifests import Command

__all__ = ["Command"]
