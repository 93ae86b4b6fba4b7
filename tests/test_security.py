"""The security baseline: a strict CSP on every page, `check --deploy` clean in production, secure cookies and
HSTS, and throttled token authentication."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.urls import reverse

from accounts.models import HarnessToken
from runs.importer import run_import_from_path
from tests import bundles

ROOT = Path(__file__).resolve().parent.parent
PRODUCTION_ENV = {
    "N17Q_DEBUG": "0",
    "N17Q_SECRET_KEY": "a-production-secret-key-for-the-test-only-" + "k" * 30,
    "N17Q_ALLOWED_HOSTS": "n17q.example.org",
}


def production(tmp_path, code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "N17Q_CACHE_URL")}
    env.update(PRODUCTION_ENV, N17Q_DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="n17q_site.settings")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


# --- Content-Security-Policy -------------------------------------------------------------------------------


def policy_of(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    return {part.split()[0]: part.split()[1:] for part in header.split(";") if part.strip()}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "who", "status"),
    [
        ("/login/", None, 200),
        ("/", "viewer", 200),
        ("/runs/run-example-docs/", "viewer", 200),
        ("/runs/run-example-docs/?focus=e-claim", "viewer", 200),
        ("/runs/import/", "operator", 200),
        ("/runs/import/", "viewer", 403),  # the 403 page
        ("/runs/no-such-run/", "viewer", 404),  # the 404 page
        ("/api/v1/docs/", "viewer", 200),
        ("/api/v1/docs/?script=", "viewer", 200),
        ("/api/v1/schema/", "viewer", 200),
        ("/api/v1/runs/", "viewer", 200),
        ("/admin/", "admin", 200),
        ("/admin/accounts/auditentry/", "admin", 200),
        ("/replays/", "operator", 200),
        ("/review/", "reviewer", 200),
        ("/scenarios/", "viewer", 200),
        ("/health/", None, 503),
    ],
)
def test_it_sends_a_strict_csp_on_every_page(client, role_user, url, who, status):
    run_import_from_path(bundles.EXAMPLE)
    if who:
        client.force_login(role_user(who))
    response = client.get(url)
    assert response.status_code == status  # /health/ answers 503 here: no worker is running
    policy = policy_of(response)
    for directive in ("default-src", "script-src", "style-src"):
        assert policy[directive] == ["'self'"], directive
    assert "'unsafe-inline'" not in response["Content-Security-Policy"]
    assert "'unsafe-eval'" not in response["Content-Security-Policy"]
    assert policy["object-src"] == ["'none'"] and policy["frame-ancestors"] == ["'none'"]
    if response["Content-Type"].startswith("text/html"):
        html = response.content.decode()
        # Nothing in the page that the policy would block: every script has a src, no <style>, no style=,
        # no on*= handler, no javascript: URL.
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "inline <script>"
        assert "<style" not in html and " style=" not in html
        assert not re.search(r"\son[a-z]+\s*=", html), "inline event handler"
        assert "javascript:" not in html


def test_it_keeps_inline_script_and_style_out_of_every_template():
    """Every template of ours, including ones no test renders yet (a new page of another app)."""
    offending = []
    for path in sorted(ROOT.glob("*/templates/**/*.html")) + sorted((ROOT / "templates").glob("**/*.html")):
        if ".venv" in path.parts:
            continue
        text = path.read_text()
        if (
            re.search(r"<script(?![^>]*\bsrc=)[^>]*>", text)
            or "<style" in text
            or re.search(r"\sstyle\s*=", text)
            or re.search(r"\son[a-z]+\s*=", text)
        ):
            offending.append(str(path.relative_to(ROOT)))
    assert offending == []


@pytest.mark.django_db
def test_the_api_docs_start_swagger_ui_from_a_script_file(client, role_user):
    client.force_login(role_user("viewer"))
    page = client.get("/api/v1/docs/").content.decode()
    scripts = re.findall(r'<script src="([^"]+)"', page)
    assert any("swagger-ui-bundle.js" in s for s in scripts)
    start = next(s for s in scripts if "script" in s.split("?", 1)[-1])
    script = client.get(start.replace("&amp;", "&"))
    assert script.status_code == 200 and script["Content-Type"].startswith("application/javascript")
    assert b"SwaggerUIBundle" in script.content and b"/api/v1/schema/" in script.content
    assert "api-docs.css" in page  # the stylesheet that replaced the inline <style>


# --- production settings ------------------------------------------------------------------------------------


def test_check_deploy_is_clean_under_production_settings(tmp_path):
    # DJANGO_ALLOW_ASYNC_UNSAFE is the browser tests' (tests/browser/conftest.py), never a deployment's.
    dropped = ("DATABASE_URL", "REDIS_URL", "N17Q_CACHE_URL", "DJANGO_ALLOW_ASYNC_UNSAFE")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(PRODUCTION_ENV, N17Q_DATA_DIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert "System check identified no issues" in done.stdout


def test_it_refuses_to_start_in_production_without_a_secret_key(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("N17Q_SECRET_KEY",)}
    env.update(N17Q_DEBUG="0", N17Q_DATA_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode != 0 and "N17Q_SECRET_KEY" in done.stderr


SECURE_PROBE = """
import django, json
django.setup()
from django.conf import settings
from django.test import Client
from django.test.utils import override_settings
# Static files are not collected here; their manifest is not what this probe is about.
override_settings(STORAGES={**settings.STORAGES, "staticfiles": {
    "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}).enable()
c = Client(HTTP_HOST="n17q.example.org")
plain = c.get("/login/")
https = c.get("/login/", secure=True)
csrf = https.cookies.get("csrftoken")
print(json.dumps({
    "plain_status": plain.status_code, "plain_location": plain.get("Location"),
    "https_status": https.status_code, "hsts": https.get("Strict-Transport-Security"),
    "csrf_secure": bool(csrf and csrf["secure"]),
    "session_cookie_secure": settings.SESSION_COOKIE_SECURE,
    "session_cookie_httponly": settings.SESSION_COOKIE_HTTPONLY,
    "csrf_cookie_secure": settings.CSRF_COOKIE_SECURE, "proxy_header": settings.SECURE_PROXY_SSL_HEADER,
    "nosniff": https.get("X-Content-Type-Options"), "frame": https.get("X-Frame-Options"),
    "referrer": https.get("Referrer-Policy"), "coop": https.get("Cross-Origin-Opener-Policy"),
}))
"""


def test_production_sends_hsts_redirects_to_https_and_marks_cookies_secure(tmp_path):
    done = production(tmp_path, SECURE_PROBE)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["plain_status"] == 301 and seen["plain_location"] == "https://n17q.example.org/login/"
    assert seen["https_status"] == 200
    assert seen["hsts"] == "max-age=31536000; includeSubDomains"
    assert seen["csrf_secure"] and seen["session_cookie_secure"] and seen["csrf_cookie_secure"]
    assert seen["session_cookie_httponly"]
    assert seen["proxy_header"] == ["HTTP_X_FORWARDED_PROTO", "https"]
    assert (seen["nosniff"], seen["frame"], seen["referrer"], seen["coop"]) == (
        "nosniff",
        "DENY",
        "same-origin",
        "same-origin",
    )


# --- throttled token authentication ------------------------------------------------------------------------


def token_for(user, *scopes: str) -> str:
    key = HarnessToken.new_key()
    HarnessToken.objects.create(
        name="ci", user=user, key_digest=HarnessToken.digest_key(key), prefix=key[:9], scopes=list(scopes)
    )
    return key


@pytest.fixture
def rates(settings):
    def set_rates(**rates: str) -> None:
        settings.REST_FRAMEWORK = {
            **settings.REST_FRAMEWORK,
            "DEFAULT_THROTTLE_RATES": {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], **rates},
        }

    return set_rates


@pytest.mark.django_db
def test_it_answers_429_when_a_token_goes_past_its_rate(client, role_user, rates):
    rates(harness_token="3/min")
    key = token_for(role_user("viewer", "harness"), "runs:import")
    other = token_for(role_user("viewer", "other-harness"), "runs:import")
    answers = [client.get("/api/v1/runs/", HTTP_AUTHORIZATION=f"Token {key}").status_code for _ in range(4)]
    assert answers == [200, 200, 200, 429]
    limited = client.get("/api/v1/runs/", HTTP_AUTHORIZATION=f"Token {key}")
    assert limited.status_code == 429 and int(limited["Retry-After"]) > 0
    assert "throttled" in limited.json()["error"]
    # Per token: another harness is not slowed by the first one, and people in a session are not limited.
    assert client.get("/api/v1/runs/", HTTP_AUTHORIZATION=f"Token {other}").status_code == 200
    client.force_login(role_user("viewer", "person"))
    assert [client.get("/api/v1/runs/").status_code for _ in range(5)] == [200] * 5


@pytest.mark.django_db
def test_it_answers_429_to_a_client_guessing_token_keys_before_looking_them_up(
    client, role_user, rates, django_assert_num_queries
):
    rates(harness_token_failure="3/min")
    good = token_for(role_user("viewer", "harness"), "runs:import")
    answers = [client.get("/api/v1/runs/", HTTP_AUTHORIZATION=f"Token n17q_guess{i}").status_code for i in range(4)]
    assert answers == [401, 401, 401, 429]
    # Once blocked, even a right key from that address waits: no lookup is made at all.
    with django_assert_num_queries(0):
        blocked = client.get("/api/v1/runs/", HTTP_AUTHORIZATION=f"Token {good}")
    assert blocked.status_code == 429 and int(blocked["Retry-After"]) > 0
    # Another address is not affected.
    elsewhere = client.get("/api/v1/runs/", HTTP_AUTHORIZATION=f"Token {good}", REMOTE_ADDR="10.9.8.7")
    assert elsewhere.status_code == 200


@pytest.mark.django_db
def test_it_does_not_believe_a_forwarded_address_from_the_client(client, role_user, rates):
    """With no trusted proxy, X-Forwarded-For is the client's word: it cannot buy a fresh allowance."""
    rates(harness_token_failure="2/min")
    answers = [
        client.get(
            "/api/v1/runs/", HTTP_AUTHORIZATION="Token n17q_guess", HTTP_X_FORWARDED_FOR=f"198.51.100.{i}"
        ).status_code
        for i in range(3)
    ]
    assert answers == [401, 401, 429]


@pytest.mark.django_db
def test_an_import_with_a_token_is_throttled_too(client, role_user, rates, tmp_path):
    import io

    rates(harness_token="1/min")
    key = token_for(role_user("operator", "harness"), "runs:import")
    folder = bundles.write_folder(tmp_path / "b", *bundles.example_parts())
    data = bundles.zip_folder(folder, tmp_path / "b.zip").read_bytes()

    def post():
        f = io.BytesIO(data)
        f.name = "b.zip"
        return client.post(reverse("api-runs"), {"bundle": f}, HTTP_AUTHORIZATION=f"Token {key}")

    assert post().status_code == 201
    assert post().status_code == 429


@pytest.mark.django_db
def test_a_token_is_let_through_while_the_throttle_cache_is_away(client, role_user, rates, settings):
    """Redis restarting must not turn every harness request into a 500: the brake fails open, and says so."""
    rates(harness_token="1/min", harness_token_failure="1/min")
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": "redis://127.0.0.1:1/0"}
    }
    key = token_for(role_user("viewer", "harness"), "runs:import")
    assert [client.get("/api/v1/runs/", HTTP_AUTHORIZATION=f"Token {key}").status_code for _ in range(3)] == [200] * 3
    assert client.get("/api/v1/runs/", HTTP_AUTHORIZATION="Token n17q_wrong").status_code == 401
