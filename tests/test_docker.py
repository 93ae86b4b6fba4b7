"""docker/: the compose file is valid Compose and has the production shape; the image runs as non-root.

No Docker daemon runs on the test machines, so the file is validated against the Compose Specification's JSON
Schema (vendored in docker/compose-spec/ with its licence) and checked for what this project needs; where
`docker compose` is installed its own `config` check runs too. gunicorn is started for real with the image's
configuration file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.conftest import xdist_worker_index

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
LONG_RUNNING = ("postgres", "redis", "web", "worker", "beat")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def command_of(service: dict) -> list[str]:
    command = service["command"]
    return command if isinstance(command, list) else command.split()


def test_the_compose_file_is_valid_against_the_compose_specification(compose):
    schema = json.loads((DOCKER / "compose-spec" / "compose_spec.json").read_text())
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(compose), key=lambda e: list(e.path))
    assert [f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors] == []


def test_the_compose_file_passes_docker_compose_config_where_installed(tmp_path):
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        tool = ["docker", "compose"]
    elif shutil.which("docker-compose"):
        tool = ["docker-compose"]
    else:
        pytest.skip("no Docker Compose here; the file is validated against the vendored schema instead")
    env_file = tmp_path / ".env"
    env_file.write_text("N17Q_SECRET_KEY=" + "k" * 50 + "\nPOSTGRES_PASSWORD=pw\n")
    done = subprocess.run(
        [*tool, "--env-file", str(env_file), "-f", str(DOCKER / "compose.yaml"), "config", "--quiet"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def test_every_long_running_service_has_a_health_check(compose):
    services = compose["services"]
    assert set(LONG_RUNNING) <= set(services)
    for name, service in services.items():
        if name in LONG_RUNNING:
            check = service.get("healthcheck", {})
            assert check.get("test") and not check.get("disable"), name
        else:  # one-shot (migrate): others wait for it to complete, it is never restarted
            assert service.get("restart") == "no", name


def test_web_and_worker_wait_for_healthy_services_and_the_migrations(compose):
    for name in ("web", "worker"):
        depends = compose["services"][name]["depends_on"]
        assert depends["postgres"]["condition"] == "service_healthy"
        assert depends["redis"]["condition"] == "service_healthy"
        assert depends["migrate"]["condition"] == "service_completed_successfully"


def test_redis_never_evicts_queued_replays(compose):
    command = command_of(compose["services"]["redis"])
    assert command[0] == "redis-server"
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"
    assert command[command.index("--appendonly") + 1] == "yes"


def test_web_runs_gunicorn_with_the_image_configuration(compose):
    command = command_of(compose["services"]["web"])
    assert command[0] == "gunicorn" and command[-1] == "n17q_site.wsgi:application"
    assert command[command.index("--config") + 1] == "docker/gunicorn.conf.py"
    assert "/health/" in " ".join(compose["services"]["web"]["healthcheck"]["test"])


def test_the_worker_has_what_the_sandbox_needs_and_nothing_more(compose):
    worker = compose["services"]["worker"]
    command = command_of(worker)
    assert command[:4] == ["celery", "-A", "n17q_site", "worker"] and "--pool=prefork" in command
    assert worker["cap_drop"] == ["ALL"] and "cap_add" not in worker and not worker.get("privileged")
    assert "no-new-privileges:true" in worker["security_opt"]
    # unshare(CLONE_NEWUSER|CLONE_NEWNET) needs the default seccomp filter lifted (documented beside it).
    assert "seccomp=unconfined" in worker["security_opt"]
    assert "unshare" in (DOCKER / "compose.yaml").read_text()


def test_every_service_talks_to_the_stack_s_own_database_and_broker(compose):
    env = compose["x-n17q-environment"]
    assert env["N17Q_DEBUG"] == "0"
    assert "@postgres:5432/" in env["DATABASE_URL"] and env["REDIS_URL"].startswith("redis://redis:6379/")
    assert "${N17Q_SECRET_KEY:?" in env["N17Q_SECRET_KEY"]  # required: no key is written in the file
    for name in ("migrate", "web", "worker"):
        service_env = compose["services"][name]["environment"]
        assert service_env["DATABASE_URL"] == env["DATABASE_URL"], name


def dockerfile_stages() -> list[list[str]]:
    lines = re.sub(r"\\\n", " ", (DOCKER / "Dockerfile").read_text()).splitlines()
    stages: list[list[str]] = []
    for line in (line.strip() for line in lines):
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append([])
        stages[-1].append(line)
    return stages


def test_the_image_is_slim_collects_static_files_and_runs_as_a_user_that_is_not_root():
    final = dockerfile_stages()[-1]
    base = final[0].split()[1]
    assert "slim" in base
    users = [line.split()[1] for line in final if line.upper().startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    run_lines = [line for line in final if line.upper().startswith("RUN ")]
    assert any("collectstatic --noinput" in line for line in run_lines)
    assert final[-1].startswith("CMD") and "gunicorn" in final[-1]
    # Nothing in the image runs as root after the switch: every RUN comes before USER.
    user_at = max(i for i, line in enumerate(final) if line.upper().startswith("USER "))
    assert all(final.index(line) < user_at for line in run_lines)
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", ".git", "var", "docker/.env"} <= set(ignored)


def test_make_stack_starts_the_compose_file():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^stack:\n\tbash docker/stack\.sh$", makefile, re.M)
    script = (DOCKER / "stack.sh").read_text()
    assert "docker compose --env-file .env up --build --detach --wait" in script


def free_port() -> int:
    first = 18710 + 100 * xdist_worker_index()  # helper D's range, one of its own for each xdist worker
    for port in range(first, first + 20):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                return port
    raise RuntimeError(f"no free port in {first}-{first + 19}")


def test_gunicorn_serves_the_console_with_the_image_configuration(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_ALLOW_ASYNC_UNSAFE")}
    port = free_port()
    env.update(
        N17Q_DATA_DIR=str(tmp_path),
        N17Q_DEBUG="0",
        N17Q_SECRET_KEY="a-production-secret-key-for-the-test-only-" + "k" * 30,
        N17Q_ALLOWED_HOSTS="localhost,127.0.0.1",
        N17Q_BIND=f"127.0.0.1:{port}",
        WEB_CONCURRENCY="2",
    )
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    gunicorn = Path(sys.executable).with_name("gunicorn")
    server = subprocess.Popen(
        [str(gunicorn), "--config", "docker/gunicorn.conf.py", "n17q_site.wsgi:application"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/?check=database", timeout=2) as answer:
                    body = json.loads(answer.read())
                    headers = dict(answer.headers)
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "gunicorn did not answer"
                time.sleep(0.3)
        # Served over plain HTTP although SSL redirect is on in production: the health check is exempt.
        assert body == {"status": "ok", "checks": {"database": {"ok": True}}}
        assert "Content-Security-Policy" in headers and "X-Request-ID" in headers
    finally:
        server.terminate()
        server.wait(timeout=30)
