"""The bounds of what a person may ask for (docs/api.md, "Limits")."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

# A flavor's whole GPUs: no node has more, and quotas count GPU equivalents in 6 digits.
MAX_FLAVOR_GPUS = 64
# A job's (or a template's) environment variables: how many, and their names and values
# together in UTF-8 bytes. They end up in a pod spec or a process environment.
MAX_ENV_VARIABLES = 64
MAX_ENV_BYTES = 32 * 1024
# A job's command typed as one string is run by this shell, on every backend (the same argv
# goes to a local process and to a Volcano Job's container): loops, pipes, `&&` and `$VAR` work
# as typed. A list of strings (the API) is an argv run as it is, without a shell.
SHELL = ("/bin/sh", "-c")
# Where a log read may start: past the end is an empty read, past this is a mistake.
MAX_LOG_OFFSET = 2**40


def check_env_limits(env: dict[str, Any], *, field: str = "env") -> None:
    """Refuse more than ``MAX_ENV_VARIABLES`` variables or more than ``MAX_ENV_BYTES`` of
    names and values (the rules on each name and value are ``launch.check_env``'s)."""
    if len(env) > MAX_ENV_VARIABLES:
        raise ValidationError({field: _("at most %(n)s variables") % {"n": MAX_ENV_VARIABLES}})
    size = sum(
        len(str(k).encode("utf-8", "replace")) + len(str(v).encode("utf-8", "replace"))
        for k, v in env.items()
    )
    if size > MAX_ENV_BYTES:
        raise ValidationError(
            {
                field: _("the variables take %(size)s bytes; at most %(n)s")
                % {"size": size, "n": MAX_ENV_BYTES}
            }
        )


# A desktop template's program: words of safe characters separated by single spaces.
PROGRAM_PATTERN = r"^[A-Za-z0-9_./+=:,-]+( [A-Za-z0-9_./+=:,-]+)*$"


def command_text(argv: list[str] | tuple[str, ...]) -> str:
    """A command as the person typed it: the script a shell runs, or the argv quoted so
    that it reads back the same (``shlex.join``)."""
    import shlex

    if len(argv) == 3 and tuple(argv[:2]) == SHELL:
        return str(argv[2])
    return shlex.join(argv)
