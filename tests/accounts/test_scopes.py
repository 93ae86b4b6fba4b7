"""Tokens read only what their scopes name (issue 33): every API operation declares the scopes a harness token needs
(accounts.auth.scoped), the schema lists them per operation (`x-required-scopes`), and the URLconf is walked so that
a route added without a declaration fails here the day it is added."""

from __future__ import annotations

import re

import pytest
from django.test import RequestFactory
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.views import APIView

from accounts.models import HarnessToken
from console.openapi import declared_token_scopes
from runs.importer import run_import_from_path
from tests import bundles
from tests.runs.test_api import token_for
from tests.test_openapi import operations, served_schema

IMPORT, CAPTURE = HarnessToken.Scope.IMPORT_RUNS.value, HarnessToken.Scope.CAPTURE.value
LAUNCH, READ_REPLAYS = HarnessToken.Scope.LAUNCH_REPLAYS.value, HarnessToken.Scope.READ_REPLAYS.value
ANNOTATE = HarnessToken.Scope.ANNOTATE_RUNS.value

# The audit of issue 33, operation by operation: what a token needs, all of it ([]: no token needed or any token).
AUDITED = {
    "GET /api/v1/runs/": [IMPORT],
    "POST /api/v1/runs/": [IMPORT],
    "GET /api/v1/runs/{run_id}/": [IMPORT],
    "GET /api/v1/runs/{run_id}/lineage/": [IMPORT],
    "GET /api/v1/runs/{run_id}/findings/": [IMPORT],
    "GET /api/v1/approvals/pending/": [IMPORT],
    # The run as a bundle: reading a run (issue 38's export), like its summary.
    "GET /api/v1/runs/{run_id}/bundle/": [IMPORT],
    # The run as OTLP JSON: the same reading, the same scope.
    "GET /api/v1/runs/{run_id}/otlp/": [IMPORT],
    # Issue 38: a run's annotations are read like its findings; appending one needs its own scope (the answer is the
    # annotation just made, nothing else of the run).
    "GET /api/v1/runs/{run_id}/annotations/": [IMPORT],
    "POST /api/v1/runs/{run_id}/annotations/": [ANNOTATE],
    # It answers with the run's result events and tools: reading a run, not only capturing.
    "POST /api/v1/runs/{run_id}/captures/": [CAPTURE, IMPORT],
    "POST /api/v1/captures/": [CAPTURE],
    # Scenario from a trace (issue 37 point 3): its status reads the run; proposing mints contracts from the run's
    # contents (a capture's scope, and reading); launching is POST /api/v1/replays/'s.
    "GET /api/v1/runs/{run_id}/scenario/": [IMPORT],
    "POST /api/v1/runs/{run_id}/scenario/": [CAPTURE, IMPORT],
    "POST /api/v1/runs/{run_id}/scenario/launch/": [LAUNCH, READ_REPLAYS],
    # Stages a model answer for a replay's stop (issue 36) and answers with what its run holds: capturing and reading.
    "POST /api/v1/replays/{replay_id}/missing/model-answer/": [CAPTURE, IMPORT],
    "POST /v1/traces": [IMPORT],
    # Issue 36: launching answers the launch summary (the run's facts), so it reads as well as launches.
    "POST /api/v1/replays/": [LAUNCH, READ_REPLAYS],
    "GET /api/v1/replays/{replay_id}/": [READ_REPLAYS],
    # The missing fixtures' full requests: what the missing-fixture page shows.
    "GET /api/v1/replays/{replay_id}/missing/": [READ_REPLAYS],
    "GET /health/": [],
    # Issue 39: what carried forward into each retry, from the run's facts: reading a run.
    "GET /api/v1/runs/{run_id}/retries/": [IMPORT],
    # Issue 39: qualitative assessments are read like annotations; posting one (or asking a model reviewer) appends to
    # the run like an annotation, with its scope.
    "GET /api/v1/runs/{run_id}/assessments/": [IMPORT],
    "POST /api/v1/runs/{run_id}/assessments/": [ANNOTATE],
}


_PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>")  # <str:run_id> in a route is {run_id} in the schema


def _api_operations():
    """(operation, view) for every DRF operation the URLconf serves, the schema's own views included."""
    factory = RequestFactory()
    for route, p in _all_patterns():
        cls = getattr(p.callback, "cls", None)
        if not (isinstance(cls, type) and issubclass(cls, APIView)):
            continue
        for method in cls.http_method_names:
            if method in ("options", "head") or not hasattr(cls, method):
                continue
            view = cls(**getattr(p.callback, "initkwargs", {}))
            view.request = factory.generic(method.upper(), "/")  # type: ignore[assignment]  # its method is read
            yield method.upper() + " /" + _PARAMETER.sub(r"{\1}", route), view


def _all_patterns(patterns=None, prefix: str = ""):
    for p in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(p, URLResolver):
            yield from _all_patterns(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern), p


def test_every_api_operation_in_the_urlconf_declares_the_scopes_it_needs():
    declared = {name: declared_token_scopes(view) for name, view in _api_operations()}
    assert set(AUDITED) <= set(declared), sorted(declared)  # the walk finds the whole API
    assert [name for name, scopes in declared.items() if scopes is None] == []
    assert {name: list(declared[name] or ()) for name in AUDITED} == AUDITED


def test_the_schema_lists_each_operations_scopes_as_audited():
    listed = {name: op.get("x-required-scopes") for name, op in operations(served_schema())}
    assert listed == {name: AUDITED[name] for name in listed}
    assert set(AUDITED) - set(listed) == {"POST /v1/traces"}  # the OTLP receiver is described by OTLP, not here


@pytest.mark.django_db
def test_a_token_naming_no_scope_reads_no_run(client, role_user):
    # On 89ef8a5 reading needed only "not a capture-only token": a token holding no scope at all read every run.
    run_import_from_path(bundles.EXAMPLE)
    nothing = token_for(role_user("viewer", "nothing"), *[])
    reader = token_for(role_user("viewer", "reader"), IMPORT)
    for url in ("/api/v1/runs/", "/api/v1/runs/run-example-docs/", "/api/v1/runs/run-example-docs/findings/"):
        assert client.get(url, HTTP_AUTHORIZATION=f"Token {nothing}").status_code == 403, url
        assert client.get(url, HTTP_AUTHORIZATION=f"Token {reader}").status_code == 200, url  # positive control


@pytest.mark.django_db
def test_any_signed_in_token_reads_the_schema(client, role_user):
    key = token_for(role_user("operator", "capturer"), CAPTURE)
    assert client.get("/api/v1/schema/?format=json", HTTP_AUTHORIZATION=f"Token {key}").status_code == 200
