"""The first hour (issue 16, point 6): what a new operator meets between `git clone` and the README's commands.

On 775880e the demo kept its data in ./var/demo while the CLI read ./var, so the README's commands after `make demo`
answered with a `no such table` traceback and left an empty database behind; a bare `migrate` on a fresh clone
failed with "unable to open database file"; a second demo kept the last one's state with no way to reset it; the
demo showed Django's debug 404 page; /favicon.ico was a 404; a 403 logged its traceback; every request was logged
twice.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.test import RequestFactory

ROOT = Path(__file__).resolve().parent.parent
BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


def _env(**overrides: str) -> dict[str, str]:
    # A user's shell: none of the test run's N17Q_* or database variables, only what the test names.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("N17Q_", "DATABASE_URL", "REDIS_URL"))}
    env.update(overrides)
    return env


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=_env(**env), capture_output=True, text=True, timeout=120
    )


def test_a_bare_migrate_on_a_fresh_clone_makes_its_data_folder(tmp_path):
    data = tmp_path / "clone" / "var"
    done = _manage("migrate", "--noinput", N17Q_DATA_DIR=str(data))
    assert done.returncode == 0, done.stderr
    assert (data / "n17q.sqlite3").is_file()


def test_a_command_without_a_database_says_so_in_one_line_and_creates_none(tmp_path):
    done = _manage("lineage", "run-003-review-request", N17Q_DATA_DIR=str(tmp_path))
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        f"CommandError: there is no database at {tmp_path / 'n17q.sqlite3'} yet: run `python manage.py migrate` "
        "(or `make demo`), or point N17Q_DATA_DIR or DATABASE_URL at the database you meant"
    ]
    assert not (tmp_path / "n17q.sqlite3").exists()  # no empty database left where the demo's was expected


@pytest.mark.parametrize(
    ("env", "line"),
    [
        ({"N17Q_DEBUG": "0"}, "ConfigurationError: environment variable N17Q_SECRET_KEY is required"),
        (
            {"N17Q_DEBUG": "0", "N17Q_SECRET_KEY": "k" * 50, "N17Q_ALLOW_DEGRADED_ISOLATION": "1"},
            "ConfigurationError: N17Q_ALLOW_DEGRADED_ISOLATION=1 is refused with production settings (N17Q_DEBUG=0): "
            "a replay without its own network namespace is for development only",
        ),
        (
            {"N17Q_DEBUG": "perhaps"},
            "ConfigurationError: N17Q_DEBUG='perhaps' is not a boolean (use 1/0, true/false, yes/no, on/off)",
        ),
    ],
)
def test_a_command_with_a_missing_or_bad_setting_says_which_in_one_line(tmp_path, env, line):
    """Production settings without their secret key (or a setting that does not parse): one line naming the variable,
    for every command, Django's own included; never a traceback."""
    for args in (("lineage", "run-1"), ("check",)):
        done = _manage(*args, N17Q_DATA_DIR=str(tmp_path), **env)
        assert done.returncode == 1
        assert done.stderr.strip().splitlines() == [line]


def test_a_command_on_a_database_with_no_tables_says_so_in_one_line(tmp_path):
    sqlite3.connect(tmp_path / "n17q.sqlite3").close()
    (tmp_path / "bundle").mkdir()
    done = _manage("import_run", str(tmp_path / "bundle"), "--json", N17Q_DATA_DIR=str(tmp_path))
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        f"CommandError: the database at {tmp_path / 'n17q.sqlite3'} has no tables yet: "
        "run `python manage.py migrate` (or `make demo`)"
    ]
    assert done.stdout == ""


def test_the_demo_and_the_cli_share_one_data_folder():
    # Nothing set, as after a clone: the demo's folder is the one `python manage.py …` uses.
    demo = subprocess.run(
        ["bash", "docker/demo.sh", "--data-dir"], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=60
    )
    assert demo.returncode == 0, demo.stderr
    cli = subprocess.run(
        [sys.executable, "-c", "from django.conf import settings; print(settings.DATA_DIR)"],
        cwd=ROOT,
        env=_env(DJANGO_SETTINGS_MODULE="n17q_site.settings"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert demo.stdout.strip() == cli.stdout.strip() == str(ROOT / "var")


def test_a_command_reads_the_key_the_demo_wrote_into_its_data_folder(tmp_path):
    # The demo runs with N17Q_DEBUG=0 and a key of its own; a command on its folder must digest with that key.
    (tmp_path / "secret_key").write_text("a-demo-key-written-by-demo-sh-" + "k" * 40 + "\n")
    probe = "from django.conf import settings; print(settings.SECRET_KEY)"
    for debug in ("0", "1"):
        done = subprocess.run(
            [sys.executable, "-c", probe],
            cwd=ROOT,
            env=_env(DJANGO_SETTINGS_MODULE="n17q_site.settings", N17Q_DATA_DIR=str(tmp_path), N17Q_DEBUG=debug),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.stdout.strip() == "a-demo-key-written-by-demo-sh-" + "k" * 40, done.stderr


def test_demo_reset_removes_only_a_demo_folder(tmp_path):
    (tmp_path / "notes.txt").write_text("someone's files")
    done = subprocess.run(
        ["bash", "docker/demo.sh", "--reset", "0"],
        cwd=ROOT,
        env=_env(N17Q_DATA_DIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "Not removing" in done.stderr
    assert (tmp_path / "notes.txt").read_text() == "someone's files"


def test_the_server_error_page_is_the_consoles_own():
    from django.views.defaults import server_error

    response = server_error(RequestFactory().get("/runs/"))
    html = response.content.decode()
    assert response.status_code == 500
    assert "<title>Server error · N17Q</title>" in html and 'rel="icon"' in html and "Back to the runs" in html


@pytest.mark.django_db
def test_browsers_get_the_consoles_icon(client):
    assert finders.find("favicon.svg")
    response = client.get("/favicon.ico")  # no sign-in: a browser asks before anyone has one
    assert response.status_code == 302 and response["Location"] == "/static/favicon.svg"
    page = client.get("/login/").content.decode()
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in page


@pytest.mark.django_db
def test_a_browser_opening_the_api_or_health_gets_json(client, role_user):
    for path in ("/health/?check=database", "/health/?check=nonsense"):
        response = client.get(path, HTTP_ACCEPT=BROWSER_ACCEPT)
        assert response["Content-Type"] == "application/json", path
    client.force_login(role_user("viewer"))
    for path in ("/api/v1/runs/", "/api/v1/runs/?format=api", "/api/v1/runs/no-such-run/", "/health/"):
        response = client.get(path, HTTP_ACCEPT=BROWSER_ACCEPT)
        assert not response["Content-Type"].startswith("text/html"), path
        assert response.status_code == 404 or response["Content-Type"] == "application/json", path


@pytest.mark.django_db
def test_each_request_is_one_record_and_a_403_has_no_traceback(client, django_user_model, role_user, caplog):
    client.force_login(django_user_model.objects.create_user("no-role", password="a-long-test-password"))
    with caplog.at_level(logging.INFO):
        refused = client.get("/")
        client.force_login(role_user("viewer"))
        missing = client.get("/runs/no-such-run/")
    assert (refused.status_code, missing.status_code) == (403, 404)
    assert [(r.name, r.getMessage()) for r in caplog.records] == [
        ("n17q.request", "GET / 403"),
        ("n17q.request", "GET /runs/no-such-run/ 404"),
    ]
    assert not any(r.exc_info for r in caplog.records)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Demo:
    """`docker/demo.sh` as `make demo` starts it, on a port and a data folder of the test's own."""

    def __init__(self, data: Path, *args: str, until: str = "Quit the server") -> None:
        self.port = _free_port()
        self.log = data.parent / f"demo-{self.port}.log"
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                ["bash", "docker/demo.sh", *args, str(self.port)],
                cwd=ROOT,
                env=_env(N17Q_DATA_DIR=str(data)),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # the worker and the server are stopped with the script's group
            )
        deadline = time.monotonic() + 120
        while until not in self.output():
            assert self.process.poll() is None and time.monotonic() < deadline, self.output()
            time.sleep(0.3)

    def output(self) -> str:
        return self.log.read_text()

    def get(self, path: str) -> tuple[int, str, str]:
        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None

        opener = urllib.request.build_opener(NoRedirect)
        try:
            with opener.open(f"http://127.0.0.1:{self.port}{path}", timeout=10) as response:
                return response.status, response.headers["Content-Type"], response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.headers["Content-Type"], error.read().decode()

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(timeout=30)


def test_make_demo_then_the_readme_commands_work_and_a_reset_starts_afresh(tmp_path):
    data = tmp_path / "var"
    demo = _Demo(data)
    try:
        assert f"Starting a fresh demo in {data}" in demo.output()
        status, kind, html = demo.get("/no-such-page/")
        # The console's own page, not Django's debug page (the demo runs with N17Q_DEBUG=0).
        assert status == 404 and "<title>Not found · N17Q</title>" in html and "technical_404" not in html
        assert "Using the URLconf" not in html
        status, kind, _ = demo.get("/static/n17q.css")
        assert status == 200 and kind.startswith("text/css")  # served by WhiteNoise without debug
        assert demo.get("/favicon.ico")[0] == 302
        # The README's commands, as printed, from the same checkout: they read the demo's database.
        lineage = _manage("lineage", "run-003-review-request", "--json", N17Q_DATA_DIR=str(data))
        assert lineage.returncode == 0 and '"run": "run-003-review-request"' in lineage.stdout, lineage.stderr
        deadline = time.monotonic() + 60  # the request's log line, once the server has written it
        while "n17q.request GET /no-such-page/ 404" not in demo.output() and time.monotonic() < deadline:
            time.sleep(0.1)
        # One line per request in the demo's log: runserver's access line and django.request's are gone.
        assert [line for line in demo.output().splitlines() if "/no-such-page/" in line] == [
            line for line in demo.output().splitlines() if "n17q.request GET /no-such-page/ 404" in line
        ]
        assert len([line for line in demo.output().splitlines() if "/no-such-page/" in line]) == 1
    finally:
        demo.stop()

    # The next two only need to be seen starting: what they say, and what is left of the folder.
    again = _Demo(data, until="\n")
    try:
        assert f"Keeping the data of the last start in {data}" in again.output()
        assert "make demo-reset" in again.output()
    finally:
        again.stop()

    (data / "left-by-the-last-session").write_text("x")
    reset = _Demo(data, "--reset", until="Starting a fresh demo")
    try:
        assert f"Removing the demo's data folder {data}" in reset.output()
        assert f"Starting a fresh demo in {data}" in reset.output()
        assert not (data / "left-by-the-last-session").exists()
    finally:
        reset.stop()


@pytest.mark.parametrize("command", [("createsuperuser", "--noinput", "--username", "ada", "--email", "a@example.com")])
def test_djangos_own_commands_without_a_database_say_so_in_one_line_and_leave_nothing(tmp_path, command):
    # Issue 16: N17Q's commands checked first; Django's own (createsuperuser…) still printed a `no such table`
    # traceback and left an empty database file behind.
    done = _manage(*command, N17Q_DATA_DIR=str(tmp_path))
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith(f"CommandError: there is no database at {tmp_path / 'n17q.sqlite3'} yet")
    assert not list(tmp_path.glob("n17q.sqlite3*"))


def test_djangos_own_commands_on_an_unmigrated_database_say_so_in_one_line(tmp_path):
    sqlite3.connect(tmp_path / "n17q.sqlite3").execute("CREATE TABLE keep_me (x)").connection.close()
    done = _manage(
        "createsuperuser", "--noinput", "--username", "ada", "--email", "a@example.com", N17Q_DATA_DIR=str(tmp_path)
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"CommandError: the database at {tmp_path / 'n17q.sqlite3'} has no tables yet")
    assert (tmp_path / "n17q.sqlite3").is_file()  # someone's file: never removed
