#!/usr/bin/env python
"""Django's command-line utility for Quanta."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    from django.core.management import execute_from_command_line

    from portal.env import ConfigError

    try:
        execute_from_command_line(sys.argv)
    except ConfigError as exc:
        sys.exit(f"Quanta cannot start: configuration error in {exc}")


if __name__ == "__main__":
    main()
