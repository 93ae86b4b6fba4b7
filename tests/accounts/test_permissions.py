"""Reading needs a role (issue 14, third attack): on 775880e pages checked only that someone was signed in, so a user
whose role was removed still read every run, replay, comparison and scenario. Every URL pattern the console
serves is walked here, for a signed-in user without a role: each answers 403, by GET and by POST, before its view
runs. A new route is walked the day it is added."""

from __future__ import annotations

import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from accounts.models import HarnessToken
from runs.importer import run_import_from_path
from tests import bundles
from tests.runs.test_api import token_for

pytestmark = pytest.mark.django_db

# Open to anyone by design: signing in, signing out, the load balancer's health check (no details without a role),
# the icon browsers ask for.
PUBLIC = {"login", "logout", "health", "favicon"}
_CONVERTERS = {"int": "1", "str": "x", "slug": "x", "path": "x/y", "uuid": "00000000-0000-0000-0000-000000000000"}


def _routes(patterns=None, prefix: str = "", namespaces: tuple[str, ...] = ()):
    for p in get_resolver().url_patterns if patterns is None else patterns:
        route = str(p.pattern)
        if isinstance(p, URLResolver):
            yield from _routes(p.url_patterns, prefix + route, namespaces + ((p.namespace,) if p.namespace else ()))
        elif isinstance(p, URLPattern):
            yield prefix + route, p.name, namespaces


def _concrete(route: str) -> str:
    path = re.sub(r"<(?:(\w+):)?\w+>", lambda m: _CONVERTERS.get(m.group(1) or "str", "x"), route)
    return "/" + path.lstrip("^").rstrip("$").replace("\\Z", "")


def _console_routes():
    for route, name, namespaces in _routes():
        if "admin" in namespaces or name in PUBLIC or "(?P<" in route or "\\" in route.replace("\\Z", ""):
            continue
        yield _concrete(route), name


def test_the_walk_covers_the_console(client):
    names = {name for _path, name in _console_routes()}
    assert {"runs:run-detail", "run-detail", "replay-list", "review-queue", "api-runs", "api-docs"} & names, names
    assert len(names) >= 20, sorted(n for n in names if n)


def test_every_page_and_api_operation_refuses_a_signed_in_user_without_a_role(client, django_user_model):
    run_import_from_path(bundles.EXAMPLE)  # something there to read
    user = django_user_model.objects.create_user("no-role", password="a-long-test-password")
    client.force_login(user)
    allowed = []
    for path, name in _console_routes():
        for method in ("get", "post"):
            status = getattr(client, method)(path).status_code
            if status != 403:
                allowed.append((method.upper(), path, name, status))
    assert allowed == []


def test_a_harness_token_whose_user_lost_the_role_reads_nothing(client, django_user_model):
    run_import_from_path(bundles.EXAMPLE)
    user = django_user_model.objects.create_user("former-operator", password="a-long-test-password")
    key = token_for(user, HarnessToken.Scope.IMPORT_RUNS)
    for path in ("/api/v1/runs/", "/api/v1/runs/run-example-docs/", "/api/v1/runs/run-example-docs/lineage/"):
        assert client.get(path, HTTP_AUTHORIZATION=f"Token {key}").status_code == 403, path


def test_the_refusal_says_why_and_signing_out_still_works(client, django_user_model):
    user = django_user_model.objects.create_user("no-role", password="a-long-test-password")
    client.force_login(user)
    response = client.get("/")
    assert response.status_code == 403 and b"holds no role" in response.content
    assert client.post("/logout/").status_code == 302


def test_a_viewer_still_reads(client, role_user):
    run_import_from_path(bundles.EXAMPLE)
    client.force_login(role_user("viewer"))
    assert client.get("/").status_code == 200
    assert client.get("/runs/run-example-docs/").status_code == 200
    assert client.get("/api/v1/runs/").status_code == 200
