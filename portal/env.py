"""Typed readers for environment variables.

Every setting of Quanta comes from the environment through these helpers. A malformed value
raises ``ConfigError`` naming the variable, so the process stops at start-up with a message
instead of misbehaving later. A variable ``X`` can also be read from the file named by
``X_FILE`` (for Docker / Kubernetes secrets).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class ConfigError(Exception):
    """An environment variable holds a value Quanta cannot use."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name


def envstr(name: str, default: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """Return the variable's text, or ``X_FILE``'s contents, or ``default``."""
    env = os.environ if env is None else env
    if name in env:
        return env[name]
    file_name = env.get(f"{name}_FILE")
    if file_name:
        try:
            return Path(file_name).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"{name}_FILE", f"cannot read {file_name!r}: {exc}") from exc
    if default is None:
        raise ConfigError(name, "is required but not set")
    return default


def envbool(name: str, default: bool, env: Mapping[str, str] | None = None) -> bool:
    raw = envstr(name, "true" if default else "false", env).strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ConfigError(name, f"expected true/false (or 1/0, yes/no, on/off), got {raw!r}")


def envint(
    name: str,
    default: int,
    env: Mapping[str, str] | None = None,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    raw = envstr(name, str(default), env).strip()
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(name, f"expected a whole number, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ConfigError(name, f"must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(name, f"must be at most {maximum}, got {value}")
    return value


def envlist(name: str, default: str, env: Mapping[str, str] | None = None) -> list[str]:
    """A comma-separated list; blanks are dropped."""
    return [item.strip() for item in envstr(name, default, env).split(",") if item.strip()]


def envchoice(
    name: str, default: str, choices: tuple[str, ...], env: Mapping[str, str] | None = None
) -> str:
    raw = envstr(name, default, env).strip()
    if raw not in choices:
        raise ConfigError(name, f"must be one of {', '.join(choices)}; got {raw!r}")
    return raw


def envurl(
    name: str, default: str, schemes: tuple[str, ...], env: Mapping[str, str] | None = None
) -> str:
    """A URL whose scheme is one of ``schemes``; the empty string means unset."""
    raw = envstr(name, default, env).strip()
    if not raw:
        return ""
    parts = urlsplit(raw)
    if parts.scheme not in schemes:
        raise ConfigError(name, f"scheme must be one of {', '.join(schemes)}; got {raw!r}")
    if not parts.netloc and not parts.path:
        raise ConfigError(name, f"is not a URL: {raw!r}")
    return raw


def envtimezone(name: str, default: str, env: Mapping[str, str] | None = None) -> str:
    raw = envstr(name, default, env).strip()
    try:
        ZoneInfo(raw)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(name, f"unknown time zone {raw!r} (use an IANA name)") from None
    return raw


def secret_from_file(path: Path, generate: bool) -> str | None:
    """Read a secret kept in ``path``; with ``generate``, create it once if missing."""
    if path.exists():
        return path.read_text().strip()
    if not generate:
        return None
    import secrets

    path.parent.mkdir(parents=True, exist_ok=True)
    value = secrets.token_urlsafe(50)
    path.write_text(value + "\n")
    path.chmod(0o600)
    return value
