"""The OpenAPI schema: valid, every operation described, and the API held to it by schemathesis.

Schemathesis walks the schema the console serves, so an endpoint another app adds is tested as soon as it is
routed. It calls the WSGI application in this process (the test's database) as an admin's harness token with
every scope, and checks every answer: no 5xx, status codes, content types, headers and bodies as the schema says.
"""

from __future__ import annotations

import json

import pytest
import schemathesis
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from drf_spectacular.validation import validate_schema
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from accounts.models import HarnessToken
from replays.heartbeat import heartbeat_beat
from runs.importer import run_import_from_path
from tests import bundles
from tests.hypothesis_budget import examples


def served_schema() -> dict:
    """The schema as /api/v1/schema/ serves it (same generator, same renderer), without a request."""
    return json.loads(OpenApiJsonRenderer().render(SchemaGenerator().get_schema(request=None, public=True)))


def operations(schema: dict):
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            if method in ("get", "post", "put", "patch", "delete"):
                yield f"{method.upper()} {path}", operation


def test_the_schema_is_valid_openapi_3():
    schema = served_schema()
    validate_schema(schema)  # raises on anything the OpenAPI 3 meta-schema refuses
    assert schema["openapi"].startswith("3.")


def test_every_operation_is_described_with_its_errors():
    schema = served_schema()
    undescribed = [name for name, op in operations(schema) if not (op.get("summary") or op.get("description"))]
    assert undescribed == []
    for name, op in operations(schema):
        assert {"401", "429"} <= set(op["responses"]), name
        assert "403" in op["responses"] or name == "GET /health/", name  # the one operation open to anyone
        assert any(code.startswith("2") for code in op["responses"]), name
        if "{" in name:
            assert "404" in op["responses"], name


def test_the_schema_is_served_to_a_signed_in_person(client, role_user):
    client.force_login(role_user("viewer"))
    response = client.get("/api/v1/schema/?format=json")
    assert response.status_code == 200
    assert set(json.loads(response.content)["paths"]) == set(served_schema()["paths"])


def _schema() -> schemathesis.schemas.BaseSchema:
    from n17q_site.wsgi import application

    loaded = schemathesis.openapi.from_dict(served_schema())
    loaded.app = application  # calls go to the WSGI application in this process
    return loaded


# Loaded when the module is collected (no database needed): one test per operation the console routes.
schema = _schema()


@pytest.fixture
def in_process_requests():
    """Keep the test's database connection open across the in-process calls, as Django's test client does.

    Outside the test client every request ends by closing old connections, which on PostgreSQL would close the
    connection that holds this test's transaction (SQLite's in-memory test database ignores the close).
    """
    from django.core import signals
    from django.db import close_old_connections

    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def admin_token(db, settings, django_user_model, in_process_requests) -> str:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        # Schemathesis makes hundreds of calls with one token in seconds; the throttle has tests of its own.
        "DEFAULT_THROTTLE_RATES": {"harness_token": None, "harness_token_failure": None},
    }
    run_import_from_path(bundles.EXAMPLE)  # so that the documented example id finds a run
    # A console in good health (a worker beating), so that /health/ answers 200: its 503 is tested on its own.
    heartbeat_beat("schemathesis@test")
    user = django_user_model.objects.create_superuser("schemathesis", password="a-long-test-password")
    key = HarnessToken.new_key()
    HarnessToken.objects.create(
        name="schemathesis",
        user=user,
        key_digest=HarnessToken.digest_key(key),
        prefix=key[:9],
        scopes=list(HarnessToken.Scope.values),
    )
    return key


@schema.parametrize()
@settings(max_examples=examples(30), deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_the_api_answers_as_its_schema_says(case, admin_token):
    # positive_data_acceptance expects 2xx for any body the schema allows; an upload is only a bundle when its
    # bytes are one, which a schema cannot say, so a refused random "bundle" (400, documented) is correct.
    case.call_and_validate(
        headers={"Authorization": f"Token {admin_token}"}, excluded_checks=[positive_data_acceptance]
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("offset=abc", "offset: 'abc' is not a whole number"),
        ("limit=0", "limit: must be at least 1"),
        ("offset=-1", "offset: must be at least 0"),
        ("offset=1&offset=2", "offset: give it once"),
    ],
)
def test_it_refuses_a_page_it_cannot_read_instead_of_guessing(client, role_user, query, error):
    client.force_login(role_user("viewer"))
    response = client.get(f"/api/v1/runs/?{query}")
    assert (response.status_code, response.json()) == (400, {"error": error})


@pytest.mark.django_db
def test_it_pages_runs_by_limit_and_offset(client, role_user):
    run_import_from_path(bundles.EXAMPLE)
    client.force_login(role_user("viewer"))
    assert [r["id"] for r in client.get("/api/v1/runs/?limit=1&offset=0").json()["results"]] == ["run-example-docs"]
    assert client.get("/api/v1/runs/?limit=1&offset=1").json()["results"] == []


def test_the_schema_describes_the_capture_format_field_by_field_with_its_example():
    # Issue 16: the capture body was described as a free-form map. Now the served schema holds n17q.capture/1 as
    # intake checks it, with the shared example; each field it calls required is one intake refuses without.
    import copy
    from pathlib import Path

    import pytest

    from fixtures_review.intake import CaptureError, parse_capture

    body = served_schema()["paths"]["/api/v1/captures/"]["post"]["requestBody"]["content"]
    capture = body["application/json"]["schema"]["anyOf"][0]
    if "$ref" in capture:
        capture = served_schema()["components"]["schemas"][capture["$ref"].rsplit("/", 1)[1]]
    example = capture["example"]
    shared = json.loads((Path(__file__).resolve().parent / "data" / "example-capture.json").read_text())
    assert example == shared
    parse_capture(example)  # the example is a valid capture
    # The record policy's keys (issue 19) are additive and optional: the shared example does without them.
    additive = {"source_class", "account_scope", "result_class", "capture_failure"}
    assert set(capture["properties"]) == set(example) | additive and not additive & set(capture["required"])
    for name in capture["required"]:
        broken = copy.deepcopy(example)
        del broken[name]
        with pytest.raises(CaptureError, match=name):
            parse_capture(broken)
    for part in ("request", "response"):
        for name in capture["properties"][part]["required"]:
            broken = copy.deepcopy(example)
            del broken[part][name]
            with pytest.raises(CaptureError, match=f"{part}.{name}"):
                parse_capture(broken)
    assert capture["properties"]["response"]["properties"]["status"]["maximum"] == 599
    assert "multipart/form-data" in body and "application/yaml" in body
