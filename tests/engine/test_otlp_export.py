"""The run -> OTLP/JSON writer (n17q_engine/formats/otlp/export.py) on its own: ids, times, attribute values, every
event carried once, a request the real opentelemetry-proto parses, the importer's reading of it, and a 100,000-event
run written without holding its spans."""

from __future__ import annotations

import base64
import hashlib
import json
import tracemalloc
from collections.abc import Iterator
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from n17q_engine.formats.otlp import convert_otlp
from n17q_engine.formats.otlp.export import (
    EVENTS_PER_SPAN,
    attr,
    otlp_json_chunks,
    span_id_for,
    trace_id_for,
    unix_nanos,
)

RUN: dict[str, Any] = {
    "id": "run-export-unit",
    "task": {"id": "task-x", "revision": "r1"},
    "environment": "fixture",
    "mode": "rerun",
    "scenario": {"name": "s", "version": "1"},
    "model": {"name": "m", "version": "m-1"},
    "policy_revision": "p@1",
    "created_at": "2026-07-01T09:00:00Z",
    "parent_run": "run-src",
}


def at(second: int) -> dict[str, str]:
    wall = f"2026-07-01T09:{second // 60 % 60:02d}:{second % 60:02d}.{second // 3600:06d}Z"
    return {"logical": f"L{second}", "wall": wall}


def events(tool_calls: int, *, extra_every: int = 1) -> Iterator[dict[str, Any]]:
    """An attempt: a proposal, `tool_calls` calls and results, a budget charge after every `extra_every`-th call,
    then its end."""
    seq = 0

    def nxt(kind: str, **fields: Any) -> dict[str, Any]:
        nonlocal seq
        seq += 1
        return {"seq": seq, "id": f"e{seq}", "kind": kind, "at": at(seq), "attempt": "a1", **fields}

    yield nxt("attempt.started", number=1, reason="start", parent_attempt_id=None)
    yield nxt("model.proposal", context_digest="sha256:0", proposal={"type": "tool_call"}, accepted=True)
    for n in range(tool_calls):
        call = nxt("tool.call", tool=f"t{n % 3}", contract_revision=1, request={"n": n}, request_digest="sha256:0")
        yield call
        yield nxt("tool.result", call_id=call["id"], origin="fixture", outcome=("ok", "not_found")[n % 2], blob=None)
        if n % extra_every == 0:
            yield nxt("budget.charged", resource="tokens", amount=n)
    yield nxt("run.state", state="completed", reason="done")
    yield nxt("attempt.ended", outcome="completed")


def written(evs: Iterator[dict[str, Any]], **options: Any) -> bytes:
    return b"".join(otlp_json_chunks({"format": "n17q.run-bundle/1", "run": RUN, "blobs": {}}, evs, **options))


def spans_of(request: dict) -> list[dict]:
    return request["resourceSpans"][0]["scopeSpans"][0]["spans"]


def test_ids_times_and_values_follow_the_otlp_json_mapping():
    assert trace_id_for("r") == hashlib.sha256(b"r").hexdigest()[:32]
    assert span_id_for("r", "run") == hashlib.sha256(b"r/run").hexdigest()[:16]
    assert unix_nanos("1970-01-01T00:00:01.5Z") == 1_500_000_000
    assert unix_nanos("1970-01-01T01:00:00+01:00") == 0
    assert unix_nanos("1970-01-01T00:00:02") == 2_000_000_000  # naive: UTC
    assert unix_nanos("yesterday") is None and unix_nanos(None) is None
    assert attr("k", 2**40) == {"key": "k", "value": {"intValue": str(2**40)}}
    assert attr("k", True) == {"key": "k", "value": {"boolValue": True}}
    assert attr("k", 0.5) == {"key": "k", "value": {"doubleValue": 0.5}}
    assert attr("k", {"b": 1, "a": [None]}) == {"key": "k", "value": {"stringValue": '{"a":[null],"b":1}'}}


def test_every_event_is_carried_once_in_a_request_the_real_proto_parses():
    source = list(events(4))
    data = written(iter(source), scope_note={"scope": "x"})
    request = json.loads(data)
    spans = spans_of(request)
    carried = [
        json.loads(a["value"]["stringValue"])
        for s in spans
        for e in s["events"]
        for a in e["attributes"]
        if a["key"] == "n17q.event"
    ]
    assert sorted(carried, key=lambda e: e["seq"]) == source
    for span in spans:
        assert span["traceId"] == trace_id_for(RUN["id"]) and len(span["spanId"]) == 16
        assert int(span["startTimeUnixNano"]) <= int(span["endTimeUnixNano"])
        for key in ("traceId", "spanId", "parentSpanId"):
            if key in span:
                span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    parsed = json_format.Parse(json.dumps(request), ExportTraceServiceRequest())
    assert len(parsed.resource_spans[0].scope_spans[0].spans) == len(spans)
    resource = {a["key"]: a["value"] for a in request["resourceSpans"][0]["resource"]["attributes"]}
    assert resource["n17q.scope_note"] == {"stringValue": '{"scope":"x"}'}
    assert resource["n17q.mode"] == {"stringValue": "rerun"} and "n17q.run.id" not in resource

    # The importer reads it back: the same tool calls, in order, with their outcomes; the run's task, policy and
    # model (from the proposal's chat span).
    (run,) = convert_otlp(data, content_type="application/json")
    story = [(e["kind"], e.get("tool") or e.get("outcome")) for e in run.events if e["kind"].startswith("tool.")]
    assert story == [(e["kind"], e.get("tool") or e.get("outcome")) for e in source if e["kind"].startswith("tool.")]
    assert run.run["task"] == RUN["task"] and run.run["model"] == RUN["model"]
    assert run.run["policy_revision"] == RUN["policy_revision"]


def test_a_call_without_result_says_unknown_and_a_receipt_answers_as_a_command():
    source = [
        {"seq": 1, "id": "c1", "kind": "tool.call", "at": at(1), "attempt": None, "tool": "shell.run", "request": {}},
        {
            "seq": 2,
            "id": "r1",
            "kind": "command.receipt",
            "at": at(2),
            "attempt": None,
            "call_id": "c1",
            "command": "pytest -q",
            "completion": "completed",
            "exit_code": 0,
            "results": {"passed": 3, "failed": 0, "skipped": 0},
            "suites": ["unit"],
        },
        {"seq": 3, "id": "c2", "kind": "tool.call", "at": at(3), "attempt": None, "tool": "lost", "request": {}},
    ]
    data = written(iter(source))
    (run,) = convert_otlp(data, content_type="application/json")
    kinds = [(e["kind"], e.get("tool") or e.get("outcome") or e.get("command")) for e in run.events]
    assert ("tool.call", "shell.run") in kinds and ("command.receipt", "pytest -q") in kinds
    assert kinds.index(("tool.call", "shell.run")) < kinds.index(("command.receipt", "pytest -q"))
    assert [k for k in kinds if k[0] == "tool.result"] == [("tool.result", "unknown")]  # c2's, not c1's


def test_a_100000_event_run_is_written_without_holding_its_spans():
    calls = 40_000  # 40,000 calls and results, 20,000 budget charges: 100,004 events
    traced_from = 90_000  # memory traced over the last ~10,000 events (tracing all of them takes a minute)

    def traced(evs: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for n, event in enumerate(evs):
            if n == traced_from:
                tracemalloc.start()
            yield event

    counts: dict[str, int] = {}
    size = traced_size = 0
    try:
        for piece in otlp_json_chunks(
            {"format": "n17q.run-bundle/1", "run": RUN, "blobs": {}},
            traced(events(calls, extra_every=2)),
            counts=counts,
        ):
            size += len(piece)
            if tracemalloc.is_tracing():
                traced_size += len(piece)
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert counts["events"] == 100_004
    # Spans: the root, the attempt, the proposal's, one per call, and the "events" spans of at most EVENTS_PER_SPAN.
    assert counts["spans"] == 3 + calls + -(-(20_000 + 1) // EVENTS_PER_SPAN)
    assert size > 80 * 1024 * 1024
    # What was written while traced (about 9 MB) was never held: a few spans at a time (an "events" span of 500
    # span events is the most held: about 3 MB measured).
    assert traced_size > 8 * 1024 * 1024 and peak < 5 * 1024 * 1024, (traced_size, peak)
