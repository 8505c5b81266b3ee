"""`manage.py volcano-config`: the dashed name the docs use (see volcano_config.py)."""

from scheduling.management.commands.volcano_config import Command

__all__ = ["Command"]
