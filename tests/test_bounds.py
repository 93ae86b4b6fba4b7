"""Every integer and string a door writes fits its column on both databases, checked before the insert (issue 20
point 4): 2^31 and 2^63 where a column is 32 or 64 bits, -1 where a value cannot be negative, NUL in strings (no
PostgreSQL text or JSON value holds one), a 10,000-character string for a 200-character column. Each is one line
(a CommandError or an HTTP 400) with nothing stored; the largest value that fits is stored, on SQLite and on
PostgreSQL alike.
"""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from accounts.models import HarnessToken
from fixtures_review.models import ScenarioVersion, StagedRecording
from n17q_engine.identifiers import INT32_MAX, INT64_MAX
from runs.models import Event, Run
from tests import bundles
from tests.runs.test_api import token_for
from tests.test_identifiers import CAPTURE, _import_refused, _nothing_stored, _package_files, _unchecked_package

pytestmark = pytest.mark.django_db

LONG = "v" * 10_000


# ------------------------------------------------------------------------------------------------ run bundles


def _bundle(tmp_path: Path, change) -> Path:
    manifest, events, blobs = bundles.example_parts()
    change(manifest, events)
    return bundles.write_folder(tmp_path / uuid.uuid4().hex, manifest, events, blobs)


def _set_seq(value):
    def change(manifest, events):
        events[-1]["seq"] = value

    return change


def _set_event_field(kind: str, field: str, value):
    def change(manifest, events):
        event = next(e for e in events if e["kind"] == kind)
        event[field] = value

    return change


def _set_run(path: list[str], value):
    def change(manifest, events):
        target = manifest["run"]
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


REFUSED_BUNDLES = {
    "seq 2^63": (_set_seq(2**63), "seq"),
    "contract_revision 2^63": (_set_event_field("tool.call", "contract_revision", 2**63), "contract_revision"),
    "contract_revision 2^64": (_set_event_field("tool.call", "contract_revision", 2**64), "contract_revision"),
    "scenario version 2^31": (_set_run(["scenario", "version"], 2**31), "run.scenario.version"),
    "scenario version 2^63": (_set_run(["scenario", "version"], 2**63), "run.scenario.version"),
    "NUL in task id": (_set_run(["task", "id"], "task\x00x"), "NUL"),
    "NUL in an event string": (_set_event_field("tool.call", "tool", "docs\x00search"), "NUL"),
    "10,000-char policy revision": (_set_run(["policy_revision"], LONG), "run.policy_revision"),
    "10,000-char model version": (_set_run(["model", "version"], LONG), "run.model.version"),
}


def _with_scenario(change):
    def both(manifest, events):
        manifest["run"]["scenario"] = {"name": "docs-research", "version": 1}
        change(manifest, events)

    return both


@pytest.mark.parametrize("case", sorted(REFUSED_BUNDLES))
def test_import_run_refuses_a_value_beyond_its_column(tmp_path, _blob_store, case):
    change, field = REFUSED_BUNDLES[case]
    message = _import_refused(_bundle(tmp_path, _with_scenario(change)))
    assert field in message, message
    _nothing_stored(_blob_store)


@pytest.mark.parametrize("case", ["seq 2^63", "scenario version 2^31", "NUL in task id", "10,000-char policy revision"])
def test_the_api_refuses_a_value_beyond_its_column_with_a_400(client, role_user, tmp_path, _blob_store, case):
    change, field = REFUSED_BUNDLES[case]
    folder = _bundle(tmp_path, _with_scenario(change))
    upload = io.BytesIO(bundles.zip_folder(folder, tmp_path / "b.zip").read_bytes())
    upload.name = "bundle.zip"
    key = token_for(role_user("operator", f"harness-{uuid.uuid4().hex[:8]}"), HarnessToken.Scope.IMPORT_RUNS)
    response = client.post(reverse("api-runs"), {"bundle": upload}, HTTP_AUTHORIZATION=f"Token {key}")
    assert response.status_code == 400, response.content[:300]
    assert field in response.json()["error"] and "\n" not in response.json()["error"]
    _nothing_stored(_blob_store)


def test_the_largest_values_that_fit_are_stored(tmp_path):
    def change(manifest, events):
        manifest["run"]["scenario"] = {"name": "docs-research", "version": INT32_MAX}
        events[-1]["seq"] = INT64_MAX
        next(e for e in events if e["kind"] == "tool.call")["contract_revision"] = INT64_MAX
        manifest["run"]["policy_revision"] = "p" * 200

    call_command("import_run", str(_bundle(tmp_path, change)), "--json", stdout=io.StringIO())
    run = Run.objects.get()
    assert run.scenario_version == INT32_MAX and run.policy_revision == "p" * 200
    assert Event.objects.filter(run=run, seq=INT64_MAX).exists()


def test_a_large_integer_in_a_field_of_any_json_value_is_kept(tmp_path):
    """Only the vocabulary's integer and number fields are bounded (they feed columns and comparisons); a field
    that holds any JSON value (evidence `scope`, a result's `response`) keeps a large integer, top level or nested,
    as JSON on both databases."""
    big = 10**30

    def change(manifest, events):
        events.insert(
            -1,
            {
                "seq": 9,
                "id": "e-evidence",
                "kind": "evidence.observed",
                "at": dict(events[-1]["at"]),
                "attempt": "a1",
                "source": "ci",
                "workspace_id": None,
                "tree_digest": None,
                "scope": big,
            },
        )
        events[-1]["seq"] = 10
        next(e for e in events if e["kind"] == "tool.result")["response"] = {"count": [big, -big]}

    call_command("import_run", str(_bundle(tmp_path, change)), "--json", stdout=io.StringIO())
    run = Run.objects.get()
    assert Event.objects.get(run=run, event_id="e-evidence").body["scope"] == big


# ------------------------------------------------------------------------------------------------ captures


def _post_capture(client, role_user, **changes) -> tuple[int, str]:
    capture = {**json.loads(json.dumps(CAPTURE)), **changes}
    key = token_for(role_user("operator", f"harness-{uuid.uuid4().hex[:8]}"), HarnessToken.Scope.CAPTURE)
    response = client.post(
        "/api/v1/captures/",
        data=json.dumps(capture),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {key}",
    )
    assert response.status_code in (201, 400), response.content[:300]
    return response.status_code, response.json().get("error", "") if response.status_code == 400 else ""


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("contract_revision", 2**31),
        ("contract_revision", 2**63),
        ("contract_revision", -1),
        ("contract_revision", 0),
        ("world_revision", 2**31),
        ("world_revision", 2**63),
        ("world_revision", -1),
        ("source_revision", LONG),
        ("source_revision", "status\x00118"),
        ("connection", LONG),
        ("connection", "status\x00service"),
        ("tool", LONG),
    ],
    ids=lambda v: str(v)[:20],
)
def test_a_capture_value_beyond_its_column_is_a_400(client, role_user, field, value):
    status, error = _post_capture(client, role_user, **{field: value})
    assert status == 400 and "\n" not in error and error, error
    assert StagedRecording.objects.count() == 0


def test_a_capture_with_the_largest_revisions_that_fit_is_staged(client, role_user, reviewed_connections):
    status, _ = _post_capture(
        client, role_user, contract_revision=INT32_MAX, world_revision=INT32_MAX, source_revision="s" * 200
    )
    assert status == 201
    staged = StagedRecording.objects.get()
    assert staged.contract_revision == INT32_MAX and staged.world_revision == INT32_MAX


def test_a_nul_in_a_capture_body_is_a_400(client, role_user):
    response = {**CAPTURE["response"], "body": {"note": "a\x00b"}}
    status, error = _post_capture(client, role_user, response=response)
    assert status == 400 and "NUL" in error
    assert StagedRecording.objects.count() == 0


# ------------------------------------------------------------------------------------------------ scenario packages


def _import_package(tmp_path: Path, files: dict) -> tuple[str | None, str]:
    path = tmp_path / f"{uuid.uuid4().hex}.zip"
    from n17q_engine.package import write_archive

    write_archive(_unchecked_package(files), path)
    out = io.StringIO()
    try:
        call_command("import_package", str(path), "--json", stdout=out)
    except CommandError as exc:
        assert "\n" not in str(exc)
        return str(exc), ""
    return None, out.getvalue()


@pytest.mark.parametrize("version", [2**31, 2**63, 2**64, -1, 0])
def test_a_scenario_version_beyond_its_column_is_refused_in_one_line(tmp_path, version):
    files = _package_files()
    files["scenario.json"]["version"] = version
    message, _ = _import_package(tmp_path, files)
    assert message is not None and "version" in message, message
    assert ScenarioVersion.objects.count() == 0


def test_the_largest_scenario_version_is_stored(tmp_path):
    files = _package_files()
    files["scenario.json"]["version"] = INT32_MAX
    message, _ = _import_package(tmp_path, files)
    assert message is None and ScenarioVersion.objects.get().version == INT32_MAX


def test_a_contract_revision_beyond_its_column_is_refused(tmp_path):
    files = _package_files()
    tool = files["contracts.json"][0]["tool"]
    files["contracts.json"][0]["revision"] = 2**31
    for item in files["fixtures.json"]:
        if item["tool"] == tool:
            item["contract_revision"] = 2**31
    message, _ = _import_package(tmp_path, files)
    assert message is not None and "revision" in message, message
    assert ScenarioVersion.objects.count() == 0


def test_a_nul_in_a_package_is_refused(tmp_path):
    files = _package_files()
    files["scenario.json"]["description"] = "a\x00b"
    message, _ = _import_package(tmp_path, files)
    assert message is not None and "NUL" in message, message
    assert ScenarioVersion.objects.count() == 0


# ------------------------------------------------------------------------------------------------ scenario references


@pytest.mark.parametrize(
    "path", ["/scenarios/docs-research@99999999999999999999/", "/scenarios/docs-research@2147483648/"]
)
def test_a_scenario_url_past_the_column_is_not_a_500(client, role_user, path):
    client.force_login(role_user("viewer"))
    assert client.get(path).status_code == 404
