"""Settings come from the environment; a malformed value stops start-up naming the variable."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from portal.env import ConfigError, envbool, envchoice, envint, envstr, envtimezone, envurl

ROOT = Path(__file__).resolve().parents[2]


def test_typed_readers_parse_good_values() -> None:
    env = {"A": "yes", "N": "12", "C": "local", "U": "redis://h:6379/0", "TZ": "Asia/Shanghai"}
    assert envbool("A", False, env) is True
    assert envint("N", 0, env) == 12
    assert envchoice("C", "x", ("local", "kubernetes"), env) == "local"
    assert envurl("U", "", ("redis",), env) == "redis://h:6379/0"
    assert envtimezone("TZ", "UTC", env) == "Asia/Shanghai"
    assert envbool("MISSING", True, env) is True


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda env: envbool("DEBUG", False, env), "DEBUG: expected true/false"),
        (lambda env: envint("PORT", 1, env, minimum=1), "PORT: expected a whole number"),
        (lambda env: envchoice("CLUSTER_BACKEND", "local", ("local",), env), "CLUSTER_BACKEND"),
        (lambda env: envurl("REDIS_URL", "", ("redis",), env), "REDIS_URL: scheme"),
        (lambda env: envtimezone("TIME_ZONE", "UTC", env), "TIME_ZONE: unknown time zone"),
    ],
)
def test_malformed_values_name_the_variable(call, words) -> None:
    env = {
        "DEBUG": "maybe",
        "PORT": "eighty",
        "CLUSTER_BACKEND": "k8s",
        "REDIS_URL": "http://x",
        "TIME_ZONE": "Mars/Olympus",
    }
    with pytest.raises(ConfigError, match=words):
        call(env)


def test_a_secret_can_come_from_a_file(tmp_path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    assert envstr("SECRET_KEY", "", {"SECRET_KEY_FILE": str(secret)}) == "s3cret"
    with pytest.raises(ConfigError, match="SECRET_KEY_FILE: cannot read"):
        envstr("SECRET_KEY", "", {"SECRET_KEY_FILE": str(tmp_path / "missing")})


def run_check(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``manage.py check`` (or ``args``) as on a fresh checkout: none of Quanta's settings but
    ``env``, and a DATA_DIR of its own."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DEBUG")
    }
    clean.update({"DATA_DIR": str(tmp_path)}, **env)
    return subprocess.run(
        [sys.executable, "manage.py", *(args or ("check",))],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"DEBUG": "banana"}, "DEBUG: expected true/false"),
        ({"DATA_DIR": "/proc/quanta"}, "SECRET_KEY: is not set, and /proc/quanta/secret_key"),
        ({"DEBUG": "true", "DATABASE_URL": "mysql://x/y"}, "DATABASE_URL: scheme must be"),
        ({"DEBUG": "true", "OIDC_RP_CLIENT_ID": "quanta"}, "OIDC_OP_AUTHORIZATION_ENDPOINT"),
        ({"DEBUG": "true", "METRICS_ALLOW": "10.0.0.0/8,campus"}, "METRICS_ALLOW: 'campus'"),
    ],
)
def test_the_portal_refuses_to_start_with_a_bad_setting(tmp_path, env, words) -> None:
    result = run_check(tmp_path, **env)
    assert result.returncode != 0
    assert "configuration error" in result.stderr and words in result.stderr
    assert "Traceback" not in result.stderr


def test_the_embedded_default_starts_with_nothing_set(tmp_path) -> None:
    result = run_check(tmp_path, DEBUG="true")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "secret_key").exists()


def test_a_fresh_checkout_passes_the_deployment_checks_with_nothing_set(tmp_path) -> None:
    """DEBUG off, no SECRET_KEY: a key is generated once into DATA_DIR and kept."""
    result = run_check(tmp_path, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout, result.stdout
    key = (tmp_path / "secret_key").read_text()
    assert len(key.strip()) >= 50 and (tmp_path / "secret_key").stat().st_mode & 0o077 == 0
    assert run_check(tmp_path).returncode == 0
    assert (tmp_path / "secret_key").read_text() == key  # the same key the second time


def test_every_command_runs_on_a_fresh_checkout(tmp_path) -> None:
    result = run_check(tmp_path, "replay", "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: manage.py replay" in result.stdout and "Traceback" not in result.stderr
