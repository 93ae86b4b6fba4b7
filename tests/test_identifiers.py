"""One identifier grammar at every door (issue 20 point 3; docs/identifiers.md).

Each hostile id — a dot segment, a bidirectional override, a zero-width space, a run id too long for its replays'
ids, a non-NFC spelling — is refused with one line naming the field and nothing stored, at each door: a run bundle
through `import_run` and the API, an OTLP file (from the OpenTelemetry SDK) naming its run with `n17q.run.id`, a
capture, a scenario package. Runs on SQLite and on PostgreSQL alike.
"""

from __future__ import annotations

import io
import json
import unicodedata
import uuid
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounts.models import HarnessToken
from fixtures_review.models import ScenarioVersion, StagedRecording
from n17q_demo import seed_scenarios
from n17q_engine.identifiers import (
    INSPECT_MAKER,
    MAX_ID_CHARS,
    MAX_RUN_ID_CHARS,
    OTLP_MAKER,
    REPLAY_MAKER,
    derived_run_id_problem,
    derived_run_ids,
    id_problem,
    make_id,
    replay_run_id_problem,
    run_id_problem,
)
from n17q_engine.package import SCENARIO_FORMAT, Package, build_scenario, dump, load_scenario, write_archive
from runs.models import Event, Run
from tests import bundles
from tests.hypothesis_budget import examples
from tests.runs.test_api import token_for

pytestmark = pytest.mark.django_db

# (name, value): every id below must be refused wherever an id is taken.
HOSTILE = [
    ("dot", "."),
    ("dot-dot", ".."),
    ("bidi-override", "run-\u202etxt.exe"),
    ("zero-width-space", "run\u200b-1"),
    ("non-nfc", "caf" + unicodedata.normalize("NFD", "\u00e9")),
    ("slash", "a/b"),
    ("space", "a b"),
    ("nul", "a\x00b"),
]
TOO_LONG_RUN_ID = "r" * (MAX_RUN_ID_CHARS + 26)  # 186: imported today, then every replay of it failed
REAL_IDS = [
    "run-000-recorded",
    "e-003-claim",
    "otlp-" + "0af7651916cd43dd8448eb211c80319c",
    "status.lookup",
    "gen_ai.execute_tool-v2",
    "inspect-adder-2-e1-njaDawEy",
    "2026-07-01T09:00:00Z",
    "docs-research@1",
    "caf\u00e9",
    "\u691c\u7d22",
]


# ------------------------------------------------------------------------------------------------ the grammar


@pytest.mark.parametrize("value", REAL_IDS)
def test_real_ids_are_ids(value):
    assert id_problem(value) is None and run_id_problem(value) is None


@pytest.mark.parametrize(("name", "value"), [*HOSTILE, ("empty", ""), ("long", "x" * (MAX_ID_CHARS + 1))])
def test_hostile_ids_are_refused_in_one_line(name, value):
    problem = id_problem(value, what="a run id")
    assert problem is not None and "\n" not in problem and problem.startswith("must be a run id"), name


def test_a_run_id_leaves_room_for_its_replays_ids():
    longest_ok = "r" * MAX_RUN_ID_CHARS
    assert run_id_problem(longest_ok) is None
    assert replay_run_id_problem(longest_ok, "counterfactual") is None
    assert len(f"{longest_ok}~counterfactual-{2**63 - 1}") <= MAX_ID_CHARS
    assert "leaving room" in (run_id_problem(TOO_LONG_RUN_ID) or "")
    # A replay's run id is a run id too, and a replay of it is refused before it is launched when it cannot fit.
    child = f"{longest_ok}~counterfactual-{2**63 - 1}"
    assert run_id_problem(child) is None
    assert replay_run_id_problem(child, "rerun") is not None


_id_chars = st.characters(codec="utf-8")


@settings(max_examples=examples(400), deadline=None)
@given(st.text(_id_chars, max_size=30) | st.sampled_from(REAL_IDS + [v for _, v in HOSTILE]))
def test_the_grammar_as_a_property(value):
    problem = id_problem(value)
    if problem is None:
        # What is accepted is safe to show and to put in a URL path segment, and is its one spelling.
        assert value not in (".", "..") and 0 < len(value) <= MAX_ID_CHARS
        assert unicodedata.is_normalized("NFC", value)
        assert not any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp") for c in value)
        assert not any(c in value for c in "/\\?#%<>\"' ")
    else:
        assert "\n" not in problem and problem.startswith("must be")
    # An id made from free text (an Inspect task or sample name) is always one.
    assert id_problem("inspect-" + make_id(value, 60)) is None


# ------------------------------------------------------------------------------------------------ run bundles


def _bundle(tmp_path: Path, *, run_id: str | None = None, event_id: str | None = None, object_id: str | None = None):
    manifest, events, blobs = bundles.example_parts()
    if run_id is not None:
        manifest["run"]["id"] = run_id
    if event_id is not None:
        events[1]["id"] = event_id
    if object_id is not None:
        assert events[0]["kind"] == "attempt.started"
        events[0]["attempt"] = object_id
    return bundles.write_folder(tmp_path / uuid.uuid4().hex, manifest, events, blobs)


def _import_refused(path: Path) -> str:
    with pytest.raises(CommandError) as caught:
        call_command("import_run", str(path), "--json", stdout=io.StringIO())
    message = str(caught.value)
    assert "\n" not in message
    return message


def _nothing_stored(store: Path) -> None:
    assert Run.objects.count() == 0 and Event.objects.count() == 0
    assert not [p for p in store.rglob("*") if p.is_file()] if store.exists() else True


@pytest.mark.parametrize(("name", "value"), [*HOSTILE, ("too-long", TOO_LONG_RUN_ID)])
def test_import_run_refuses_a_hostile_run_id(tmp_path, _blob_store, name, value):
    message = _import_refused(_bundle(tmp_path, run_id=value))
    assert "run.id" in message, message
    _nothing_stored(_blob_store)


@pytest.mark.parametrize(("name", "value"), HOSTILE)
def test_import_run_refuses_a_hostile_event_id(tmp_path, _blob_store, name, value):
    message = _import_refused(_bundle(tmp_path, event_id=value))
    assert "events.jsonl line 2" in message and "field id" in message, message
    _nothing_stored(_blob_store)


@pytest.mark.parametrize(("name", "value"), HOSTILE)
def test_import_run_refuses_a_hostile_attempt_id(tmp_path, _blob_store, name, value):
    message = _import_refused(_bundle(tmp_path, object_id=value))
    assert "events.jsonl line 1" in message and "field attempt" in message, message
    _nothing_stored(_blob_store)


def test_the_longest_run_id_imports(tmp_path):
    call_command("import_run", str(_bundle(tmp_path, run_id="r" * MAX_RUN_ID_CHARS)), "--json", stdout=io.StringIO())
    assert Run.objects.get().run_id == "r" * MAX_RUN_ID_CHARS


@pytest.mark.parametrize(("name", "value"), [*HOSTILE, ("too-long", TOO_LONG_RUN_ID)])
def test_the_api_refuses_a_hostile_run_id_with_a_400(client, role_user, tmp_path, _blob_store, name, value):
    folder = _bundle(tmp_path, run_id=value)
    data = bundles.zip_folder(folder, tmp_path / "b.zip").read_bytes()
    key = token_for(role_user("operator", f"harness-{uuid.uuid4().hex[:8]}"), HarnessToken.Scope.IMPORT_RUNS)
    upload = io.BytesIO(data)
    upload.name = "bundle.zip"
    response = client.post(reverse("api-runs"), {"bundle": upload}, HTTP_AUTHORIZATION=f"Token {key}")
    assert response.status_code == 400, response.content[:300]
    error = response.json()["error"]
    assert "\n" not in error and "run.id" in error
    _nothing_stored(_blob_store)


# ------------------------------------------------------------------------------------------------ OTLP files


def _otlp_file(tmp_path: Path, run_id: str | None) -> Path:
    """A trace the OpenTelemetry SDK made and its OTLP exporter encoded, naming its run with `n17q.run.id`."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tests.otlp_receiver.conftest import agent_turn

    attributes = {"service.name": "support-agent"}
    if run_id is not None:
        attributes["n17q.run.id"] = run_id  # a resource attribute: the converter reads it there too
    provider = TracerProvider(resource=Resource.create(attributes))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    agent_turn(provider.get_tracer("n17q-tests"))
    provider.shutdown()
    path = tmp_path / f"{uuid.uuid4().hex}.pb"
    path.write_bytes(encode_spans(memory.get_finished_spans()).SerializeToString())
    return path


def test_an_otlp_file_naming_a_good_run_id_imports(tmp_path):
    call_command("import_run", str(_otlp_file(tmp_path, "run-from-otlp")), "--json", stdout=io.StringIO())
    assert Run.objects.get().run_id == "run-from-otlp"


@pytest.mark.parametrize(("name", "value"), [*HOSTILE, ("too-long", TOO_LONG_RUN_ID)])
def test_an_otlp_file_naming_a_hostile_run_id_is_refused(tmp_path, _blob_store, name, value):
    message = _import_refused(_otlp_file(tmp_path, value))
    assert "n17q.run.id" in message, message
    _nothing_stored(_blob_store)


# ------------------------------------------------------------------------------------------------ derived run ids
# Issue 33: a run id a subsystem derives is reserved to it in one place (identifiers.DERIVED_RUN_IDS), and every door
# asks it. Before, only `~` was reserved (by a check in the importer): a bundle named `otlp-<trace id>` was imported
# and then adopted as that trace's run.

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
DERIVED = [
    ("replay", "run-000-recorded~rerun-4", REPLAY_MAKER),
    ("replay-of-a-trace", f"otlp-{TRACE_ID}~counterfactual-9", REPLAY_MAKER),  # the separator decides
    ("trace", f"otlp-{TRACE_ID}", OTLP_MAKER),
    ("inspect-sample", "inspect-adder-2-e1-njaDawEy", INSPECT_MAKER),
]


@pytest.mark.parametrize(("name", "value", "maker"), DERIVED)
def test_each_derived_run_id_is_reserved_to_the_one_subsystem_that_derives_it(name, value, maker):
    assert derived_run_ids(value).maker == maker, name
    assert derived_run_id_problem(value, made_by=maker) is None
    for other in (None, *({REPLAY_MAKER, OTLP_MAKER, INSPECT_MAKER} - {maker})):
        problem = derived_run_id_problem(value, made_by=other)
        assert problem is not None and problem.startswith("must not be") and "reserved" in problem


@pytest.mark.parametrize("value", ["run-000-recorded", "my-otlp-run", "OTLP-export", "inspected", "e-003-claim"])
def test_a_name_a_harness_gives_is_in_no_derived_namespace(value):
    assert derived_run_ids(value) is None and derived_run_id_problem(value, made_by=None) is None


@pytest.mark.parametrize(("name", "value", "maker"), DERIVED)
def test_import_run_refuses_a_hand_written_bundle_under_a_derived_run_id(tmp_path, _blob_store, name, value, maker):
    message = _import_refused(_bundle(tmp_path, run_id=value))
    assert "run.id" in message and "reserved" in message, message
    _nothing_stored(_blob_store)


@pytest.mark.parametrize("value", [f"otlp-{TRACE_ID}", "inspect-adder-2-e1-x", "run-000-recorded~rerun-4"])
def test_an_otlp_file_naming_another_subsystems_run_id_is_refused(tmp_path, _blob_store, value):
    message = _import_refused(_otlp_file(tmp_path, value))
    assert "n17q.run.id" in message and "reserved" in message, message
    _nothing_stored(_blob_store)


def test_an_otlp_file_imports_under_the_run_id_the_converter_derives(tmp_path):
    call_command("import_run", str(_otlp_file(tmp_path, None)), "--json", stdout=io.StringIO())
    run_id = Run.objects.get().run_id
    assert derived_run_ids(run_id).maker == OTLP_MAKER and len(run_id) == len("otlp-") + 32


# ------------------------------------------------------------------------------------------------ captures

CAPTURE = json.loads((bundles.EXAMPLE.parent / "example-capture.json").read_text())


def _post_capture(client, role_user, **changes) -> tuple[int, str]:
    capture = {**json.loads(json.dumps(CAPTURE)), **changes}
    key = token_for(role_user("operator", f"harness-{uuid.uuid4().hex[:8]}"), HarnessToken.Scope.CAPTURE)
    response = client.post(
        "/api/v1/captures/",
        data=json.dumps(capture),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {key}",
    )
    return response.status_code, response.json().get("error", "") if response.status_code == 400 else ""


@pytest.mark.parametrize(("name", "value"), [*HOSTILE, ("long", "t" * (MAX_ID_CHARS + 1))])
def test_a_capture_naming_a_hostile_tool_is_a_400(client, role_user, name, value):
    status, error = _post_capture(client, role_user, tool=value)
    assert status == 400 and "\n" not in error and ("tool" in error or "NUL" in error), (status, error)
    assert StagedRecording.objects.count() == 0


@pytest.mark.parametrize(("name", "value"), [*HOSTILE, ("at-sign", "docs@1"), ("upper", "Docs")])
def test_a_capture_naming_a_hostile_scenario_is_a_400(client, role_user, name, value):
    status, error = _post_capture(client, role_user, scenario=value)
    assert status == 400 and "\n" not in error and ("scenario" in error or "NUL" in error), (status, error)
    assert StagedRecording.objects.count() == 0


def test_a_good_capture_is_staged(client, role_user, reviewed_connections):
    assert _post_capture(client, role_user)[0] == 201
    assert StagedRecording.objects.count() == 1


# ------------------------------------------------------------------------------------------------ scenario packages


def _package_files() -> dict:
    package = seed_scenarios.seed_packages()[0]
    return {name: package.json(name) for name in package.files}


def _unchecked_package(files: dict) -> Package:
    """The package as a harness could send it: built without the checks `build_scenario` makes first."""
    scenario = files["scenario.json"]
    header = {"scenario": {"name": scenario.get("name"), "version": scenario.get("version")}}
    return Package.build(SCENARIO_FORMAT, header, {name: dump(value) for name, value in files.items()})


def _import_package(tmp_path: Path, files: dict) -> str:
    path = write_archive(_unchecked_package(files), tmp_path / f"{uuid.uuid4().hex}.zip")
    with pytest.raises(CommandError) as caught:
        call_command("import_package", str(path), "--json", stdout=io.StringIO())
    message = str(caught.value)
    assert "\n" not in message
    assert ScenarioVersion.objects.count() == 0
    return message


def test_the_seed_package_is_valid_as_it_is():
    files = _package_files()
    assert load_scenario(build_scenario(files)).name == files["scenario.json"]["name"]
    assert SCENARIO_FORMAT


@pytest.mark.parametrize(("name", "value"), [*HOSTILE, ("at-sign", "name@1"), ("long", "s" * 101)])
def test_a_package_with_a_hostile_scenario_name_is_refused(tmp_path, name, value):
    files = _package_files()
    files["scenario.json"]["name"] = value
    assert "name" in _import_package(tmp_path, files)


@pytest.mark.parametrize(("name", "value"), HOSTILE)
def test_a_package_with_a_hostile_tool_name_is_refused(tmp_path, name, value):
    files = _package_files()
    files["contracts.json"][0]["tool"] = value
    message = _import_package(tmp_path, files)
    assert "contracts.json" in message and "tool" in message, message


@pytest.mark.parametrize(("name", "value"), HOSTILE)
def test_a_package_with_a_hostile_fixture_id_is_refused(tmp_path, name, value):
    files = _package_files()
    assert files["fixtures.json"], "the seed scenario has fixtures"
    files["fixtures.json"][0]["id"] = value
    message = _import_package(tmp_path, files)
    assert "fixtures.json" in message and "id" in message, message


# ------------------------------------------------------------------------------------------------ URLs


@pytest.mark.parametrize("path", ["/runs/./", "/runs/../", "/runs/%E2%80%AE/", "/replays/99999999999999999999999/"])
def test_urls_of_ids_no_run_can_have_are_not_a_500(client, role_user, path):
    client.force_login(role_user("viewer"))
    assert client.get(path).status_code in (200, 301, 302, 400, 404)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.text(_id_chars, min_size=1, max_size=20))
def test_the_bundle_door_and_the_grammar_agree(tmp_path, value):
    """Whatever the run id, the reader takes it exactly when the grammar does (no database: the manifest only)."""
    from n17q_engine.bundle import BundleError, parse_manifest

    manifest, _events, _blobs = bundles.example_parts()
    manifest["run"]["id"] = value
    try:
        parse_manifest(json.dumps(manifest).encode())
        accepted = True
    except BundleError as exc:
        assert "\n" not in str(exc)
        accepted = False
    assert accepted == (run_id_problem(value) is None)
