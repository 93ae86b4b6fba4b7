"""A run exported as OTLP JSON (issue 38, point 5): `manage.py export_run --format otlp-json`, the run page's second
link (`/runs/<id>/export/?format=otlp-json`) and `GET /api/v1/runs/<id>/otlp/` write one ExportTraceServiceRequest
(n17q_engine/formats/otlp/export.py, docs/formats/otlp.md "Export"). It is a valid request for the real
opentelemetry-proto and for this console's receiver, it imports again through the OTLP file door with the same tool
calls, names, order and outcomes, every event of the run rides in it whole, and a replay's scope note is on its
resource (seed 000)."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from accounts.models import AuditEntry, HarnessToken
from n17q_engine.formats.otlp.export import trace_id_for
from otlp_receiver.models import ReceivedTrace
from runs.bundle_export import SCOPE_NOTE_FIELDS
from runs.importer import run_import_from_path
from runs.models import Event, Run
from tests.runs.test_api import token_for

pytestmark = pytest.mark.django_db

EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "example-bundle"


def export(run_id: str, out: Path) -> dict:
    answer = io.StringIO()
    call_command("export_run", run_id, str(out), "--format", "otlp-json", "--json", stdout=answer)
    return json.loads(answer.getvalue())


def import_file(path: Path) -> dict:
    answer = io.StringIO()
    call_command("import_run", str(path), "--json", stdout=answer)
    return json.loads(answer.getvalue())


def spans_of(request: dict) -> list[dict]:
    return [s for rs in request["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def resource_of(request: dict) -> dict[str, Any]:
    (resource_spans,) = request["resourceSpans"]
    return {a["key"]: next(iter(a["value"].values())) for a in resource_spans["resource"]["attributes"]}


def carried_events(request: dict) -> list[dict]:
    """Every event the file carries whole (`n17q.event` on a span event), in seq order."""
    found = []
    for span in spans_of(request):
        for event in span.get("events", []):
            for item in event["attributes"]:
                if item["key"] == "n17q.event":
                    found.append(json.loads(item["value"]["stringValue"]))
    return sorted(found, key=lambda e: e["seq"])


def as_proto(data: bytes) -> ExportTraceServiceRequest:
    """The file parsed by the real opentelemetry-proto: OTLP/JSON writes ids in hex, protobuf's JSON in base64."""
    request = json.loads(data)
    for span in spans_of(request):
        for key in ("traceId", "spanId", "parentSpanId"):
            if key in span:
                span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return json_format.Parse(json.dumps(request), ExportTraceServiceRequest())


def tool_story(run: Run) -> list[tuple[str, Any]]:
    """A run's tool calls and results, in order: ("call", tool) and ("result", outcome)."""
    story = []
    for body in (
        Event.objects.filter(run=run, kind__in=("tool.call", "tool.result"))
        .order_by("seq")
        .values_list("body", flat=True)
    ):
        story.append(("call", body["tool"]) if body["kind"] == "tool.call" else ("result", body["outcome"]))
    return story


def stored_events(run: Run) -> list[dict]:
    return list(Event.objects.filter(run=run).order_by("seq").values_list("body", flat=True))


def round_trip(run: Run, tmp_path: Path) -> tuple[dict, dict, bytes]:
    """Export `run` as OTLP JSON, check it whole, import it again: (the export's answer, the import's, the bytes)."""
    out = tmp_path / f"{run.run_id}.json"
    answer = export(run.run_id, out)
    data = out.read_bytes()
    request = json.loads(data)
    proto = as_proto(data)
    assert len(proto.resource_spans[0].scope_spans[0].spans) == answer["spans"] == len(spans_of(request))
    # Every event of the run, whole and as stored, once.
    assert carried_events(request) == stored_events(run)
    assert {s["traceId"] for s in spans_of(request)} == {trace_id_for(run.run_id)}
    imported = import_file(out)
    again = Run.objects.get(run_id=imported["run"])
    assert again.run_id == f"otlp-{trace_id_for(run.run_id)}"
    assert tool_story(again) == tool_story(run) and tool_story(run)
    return answer, imported, data


def test_the_example_run_exports_as_otlp_json_and_imports_again_with_its_tool_calls(tmp_path):
    original = run_import_from_path(EXAMPLE).run
    answer, _imported, data = round_trip(original, tmp_path)
    assert answer == {
        "run": original.run_id,
        "events": original.event_count,
        "spans": answer["spans"],
        "blobs": 0,
        "expired": [],
        "masked_on_import": 0,
        "trace_id": trace_id_for(original.run_id),
        "path": str(tmp_path / f"{original.run_id}.json"),
        "format": "otlp-json",
    }
    request = json.loads(data)
    resource = resource_of(request)
    manifest = json.loads((EXAMPLE / "manifest.json").read_text())
    assert resource["service.name"] == "n17q" and resource["n17q.export.run"] == original.run_id
    assert resource["n17q.mode"] == "recorded" and resource["n17q.environment"] == "live"
    assert json.loads(resource["n17q.run"]) == manifest["run"]
    assert json.loads(resource["n17q.blobs"]) == manifest["blobs"]
    assert "n17q.scope_note" not in resource  # a recorded run has none
    assert json.loads(resource["n17q.exported"])["by"] == "export_run"
    spans = spans_of(request)
    (root,) = [s for s in spans if "parentSpanId" not in s]
    attempts = [s for s in spans if s.get("parentSpanId") == root["spanId"] and s["name"].startswith("attempt ")]
    assert [a["name"] for a in attempts] == ["attempt a1"]
    tools = [s for s in spans if any(a["value"].get("stringValue") == "execute_tool" for a in s["attributes"])]
    assert [s["parentSpanId"] for s in tools] == [attempts[0]["spanId"]] * 2
    # Stringified int64 nanoseconds from `at.wall`: the first tool call at 2026-07-01T09:00:03Z.
    assert tools[0]["startTimeUnixNano"] == "1782896403000000000"
    assert tools[0]["endTimeUnixNano"] == "1782896404000000000"
    attrs = {a["key"]: next(iter(a["value"].values())) for a in tools[0]["attributes"]}
    result = next(e for e in stored_events(original) if e["kind"] == "tool.result" and e["outcome"] == "ok")
    assert attrs["gen_ai.tool.name"] == "docs.search" and attrs["n17q.tool.outcome"] == "ok"
    assert attrs["n17q.tool.result.blob"] == result["blob"]  # named by digest, not inlined
    # The same run exports to the same spans (only the note's moment differs).
    second = tmp_path / "second.json"
    export(original.run_id, second)
    assert spans_of(json.loads(second.read_bytes())) == spans
    entries = AuditEntry.objects.filter(action="run.exported", target=original.run_id)
    assert [e.detail["format"] for e in entries] == ["otlp-json", "otlp-json"]


def test_the_demo_story_003_run_round_trips_and_a_replay_carries_its_scope_note(tmp_path, capsys):
    call_command("load_demo", "--json")
    capsys.readouterr()
    round_trip(Run.objects.get(run_id="run-003-review-request"), tmp_path)

    replay = Run.objects.get(run_id="run-000-fail-open-replay")
    out = tmp_path / "replay.json"
    export(replay.run_id, out)
    resource = resource_of(json.loads(out.read_bytes()))
    scope = Event.objects.get(run=replay, kind="replay.scope").body
    note = {k: scope[k] for k in SCOPE_NOTE_FIELDS if k in scope}
    assert json.loads(resource["n17q.scope_note"]) == note and note["scenario"] == scope["scenario"]
    assert json.loads(resource["n17q.exported"])["scope_note"] == note
    assert resource["n17q.mode"] == replay.manifest_run["mode"]
    assert json.loads(resource["n17q.scenario"]) == replay.manifest_run["scenario"]


def test_the_receiver_accepts_the_export(client, role_user, tmp_path):
    original = run_import_from_path(EXAMPLE).run
    out = tmp_path / "x.json"
    answer = export(original.run_id, out)
    key = token_for(role_user("operator", "exporter"), HarnessToken.Scope.IMPORT_RUNS)
    response = client.post(
        reverse("otlp:export-traces"),
        data=out.read_bytes(),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )
    assert response.status_code == 200, response.content[:300]
    assert "rejectedSpans" not in json.dumps(response.json().get("partialSuccess") or {})
    trace = ReceivedTrace.objects.get(trace_id=trace_id_for(original.run_id))
    assert trace.span_count == answer["spans"]


def test_the_web_and_api_doors_export_otlp_json_to_those_who_may_read_it(client, role_user):
    run = run_import_from_path(EXAMPLE).run
    client.force_login(role_user("viewer"))
    page = client.get(f"/runs/{run.run_id}/").content.decode()
    assert f'href="/runs/{run.run_id}/export/?format=otlp-json"' in page
    response = client.get(f"/runs/{run.run_id}/export/?format=otlp-json")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert response["Content-Disposition"] == f'attachment; filename="{run.run_id}.otlp.json"'
    request = json.loads(b"".join(response.streaming_content))
    assert json.loads(resource_of(request)["n17q.exported"])["by"] == "web"
    bad = client.get(f"/runs/{run.run_id}/export/?format=pdf")
    assert bad.status_code == 400 and b"format must be one of" in bad.content
    entry = AuditEntry.objects.get(action="run.exported")
    assert entry.detail["by"] == "web" and entry.detail["format"] == "otlp-json"

    client.logout()
    key = token_for(role_user("operator", "harness"), HarnessToken.Scope.IMPORT_RUNS)
    api = client.get(f"/api/v1/runs/{run.run_id}/otlp/", HTTP_AUTHORIZATION=f"Token {key}")
    assert api.status_code == 200 and api["Content-Type"] == "application/json"
    assert carried_events(json.loads(b"".join(api.streaming_content))) == stored_events(run)
    capture_only = token_for(role_user("operator", "recorder"), HarnessToken.Scope.CAPTURE)
    refused = client.get(f"/api/v1/runs/{run.run_id}/otlp/", HTTP_AUTHORIZATION=f"Token {capture_only}")
    assert refused.status_code == 403
    assert client.get("/api/v1/runs/no-such-run/otlp/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 404


def test_export_run_otlp_refuses_a_wrong_file_name_in_one_line(tmp_path):
    run_import_from_path(EXAMPLE)
    with pytest.raises(CommandError, match=r"name it OUT\.json") as caught:
        call_command("export_run", "run-example-docs", str(tmp_path / "a.zip"), "--format", "otlp-json")
    assert "\n" not in str(caught.value)
    assert [p for p in tmp_path.iterdir() if p.is_file()] == []  # nothing written, no partial file
    assert not AuditEntry.objects.filter(action="run.exported").exists()
