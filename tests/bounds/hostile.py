"""Hostile inputs for the amplification suite, made by hand: deep nesting, many gzip members, huge attribute counts,
long strings, many tiny spans, zip members that lie about their sizes. Each is small to send and asks much of a
reader that is not bounded by construction."""

from __future__ import annotations

import base64
import gzip
import io
import json
import struct
import tarfile
import zipfile
from pathlib import Path
from typing import Any

from tests import bundles

TRACE_ID = "5b8efff798038103d269b633813fc60c"


def nested_json(depth: int, *, key: str | None = None) -> bytes:
    """`depth` arrays inside one another, under `key` of an object when given."""
    inner = b"[" * depth + b"]" * depth
    return b'{"%s":' % key.encode() + inner + b"}" if key else inner


def _span(i: int, attributes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "traceId": TRACE_ID,
        "spanId": f"{i + 1:016x}",
        "name": "s",
        "kind": 1,
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000000000001000",
        **({"parentSpanId": f"{1:016x}"} if i else {}),
        **({"attributes": attributes} if attributes else {}),
    }


def _request(spans: list[dict[str, Any]]) -> bytes:
    value = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "bounds"}}]},
                "scopeSpans": [{"scope": {"name": "bounds"}, "spans": spans}],
            }
        ]
    }
    return json.dumps(value, separators=(",", ":")).encode()


def otlp_json_many_attributes(count: int, *, per_span: int | None = None) -> bytes:
    """`count` tiny integer attributes (~36 bytes of JSON each, many objects each once parsed): one span's, or
    `per_span` to a span."""
    per_span = per_span or count
    return _request(
        [
            _span(i, [{"key": f"k{j}", "value": {"intValue": "1"}} for j in range(per_span)])
            for i in range(-(-count // per_span))
        ]
    )


def otlp_json_long_string(size: int) -> bytes:
    return _request([_span(0, [{"key": "gen_ai.output.messages", "value": {"stringValue": "x" * size}}])])


def otlp_json_messages_text(count: int) -> bytes:
    """A chat span whose `gen_ai.input.messages` (a JSON text, read as JSON by the converter) holds `count` tiny
    messages: ~15 bytes of text each, an object each once parsed."""
    messages = json.dumps([{"role": "u"}] * count, separators=(",", ":"))
    attributes = [
        {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
        {"key": "gen_ai.request.model", "value": {"stringValue": "m"}},
        {"key": "gen_ai.input.messages", "value": {"stringValue": messages}},
    ]
    return _request([_span(0, attributes)])


def otlp_json_many_tiny_spans(count: int) -> bytes:
    return _request([_span(i) for i in range(count)])


def otlp_protobuf(body: bytes) -> bytes:
    """The same request in protobuf, as an exporter sends it: the whole document parsed by json_format (not by the
    receiver's reader, whose caps refuse some of these), the hex ids as bytes."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    value = json.loads(body)
    for rs in value["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return json_format.ParseDict(value, ExportTraceServiceRequest()).SerializeToString()


def gzip_members(body: bytes, empty_members: int) -> bytes:
    """`empty_members` empty gzip members, then `body` as the last: one valid gzip stream of many members."""
    return gzip.compress(b"", mtime=0) * empty_members + gzip.compress(body, mtime=0)


def lie_about_size(data: bytes, member: str, declared: int) -> bytes:
    """The zip `data` with `member`'s uncompressed size set to `declared` in its local header and central directory."""
    out = bytearray(data)
    name = member.encode()
    local = out.index(b"PK\x03\x04")
    while out[local + 30 : local + 30 + len(name)] != name:
        local = out.index(b"PK\x03\x04", local + 4)
    struct.pack_into("<L", out, local + 22, declared)
    central = out.index(b"PK\x01\x02")
    while out[central + 46 : central + 46 + len(name)] != name:
        central = out.index(b"PK\x01\x02", central + 4)
    struct.pack_into("<L", out, central + 24, declared)
    return bytes(out)


# ------------------------------------------------------------------------------------------------ run bundles


SPLICE = "@@splice@@"


def bundle_zip(tmp: Path, change=None, *, extra: dict[str, bytes] | None = None, splice: bytes | None = None) -> bytes:
    """The example bundle as a .zip, `change(manifest, events)` applied, `extra` members added (deflated), and the
    string SPLICE in events.jsonl replaced by `splice` (JSON too deep for json.dumps to write)."""
    manifest, events, blobs = bundles.example_parts()
    if change is not None:
        change(manifest, events)
    events_bytes = b"".join(json.dumps(e).encode() + b"\n" for e in events)
    if splice is not None:
        events_bytes = events_bytes.replace(json.dumps(SPLICE).encode(), splice)
    folder = bundles.write_folder(tmp / "bundle", manifest, events, blobs, events_bytes=events_bytes)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, str(path.relative_to(folder)))
        for name, data in (extra or {}).items():
            zf.writestr(name, data)
    return buf.getvalue()


def bundle_tar_gz_many_members(tmp: Path, empty_members: int) -> bytes:
    """The example bundle as a .tar.gz whose gzip stream is `empty_members` empty members and then the tar."""
    folder = bundles.write_folder(tmp / "bundle", *bundles.example_parts())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                tf.add(path, str(path.relative_to(folder)))
    return gzip_members(buf.getvalue(), empty_members)


def long_event_string(size: int):
    def change(manifest, events):
        next(e for e in events if e["kind"] == "tool.call")["arguments"] = {"q": "x" * size}

    return change


def nested_event(tmp: Path, depth: int) -> bytes:
    """A tool call whose arguments hold `depth` nested arrays."""

    def change(manifest, events):
        next(e for e in events if e["kind"] == "tool.call")["arguments"] = {"q": SPLICE}

    return bundle_zip(tmp, change, splice=nested_json(depth))


# ------------------------------------------------------------------------------------------------ Inspect logs

_HEADER = {"version": 2, "status": "success", "eval": {"task": "bounds", "model": "mockllm/model"}}


def _sample(events: list[dict[str, Any]], *, text: str = "hi") -> dict[str, Any]:
    return {
        "id": 1,
        "epoch": 1,
        "input": text,
        "target": "",
        "messages": [{"role": "user", "content": text}],
        "events": events,
    }


def _info_events(count: int) -> list[dict[str, Any]]:
    return [{"event": "info", "timestamp": "2026-01-01T00:00:00+00:00", "data": i} for i in range(count)]


def inspect_eval(sample: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("header.json", json.dumps(_HEADER))
        zf.writestr("samples/1_epoch_1.json", json.dumps(sample, separators=(",", ":")))
    return buf.getvalue()


def inspect_json(sample: dict[str, Any]) -> bytes:
    return json.dumps({**_HEADER, "samples": [sample]}, separators=(",", ":")).encode()


def inspect_many_tiny_events(count: int) -> dict[str, Any]:
    return _sample(_info_events(count))


def inspect_long_string(size: int) -> dict[str, Any]:
    return _sample(_info_events(2), text="x" * size)


def inspect_eval_lying_member(real: int, declared: int) -> bytes:
    """A .eval whose sample member unpacks to `real` bytes (a long string: tiny compressed) but declares `declared`."""
    return lie_about_size(inspect_eval(inspect_long_string(real)), "samples/1_epoch_1.json", declared)


# ------------------------------------------------------------------------------------------------ captures


def har_many_entries(count: int, *, body: str = '{"ok":true}') -> bytes:
    entry = {
        "startedDateTime": "2026-01-01T00:00:00Z",
        "request": {"method": "GET", "url": "https://status.example/v1/status", "headers": []},
        "response": {
            "status": 200,
            "headers": [{"name": "Content-Type", "value": "application/json"}],
            "content": {"mimeType": "application/json", "text": body},
        },
    }
    return json.dumps({"log": {"version": "1.2", "creator": {"name": "b"}, "entries": [entry] * count}}).encode()


def har_large_entry(values: int) -> bytes:
    """One HAR entry holding `values` empty objects (three bytes each, a 64-byte dict each decoded)."""
    entry = json.loads(har_many_entries(1))["log"]["entries"][0]
    text = json.dumps({**entry, "extra": []})[:-2] + ",".join(["{}"] * values) + "]}"
    return ('{"log": {"version": "1.2", "creator": {"name": "b"}, "entries": [' + text + "]}}").encode()


def vcr_yaml_many_interactions(count: int) -> bytes:
    one = (
        "- request: {method: GET, uri: 'https://status.example/v1/status', body: null, headers: {}}\n"
        "  response: {status: {code: 200, message: OK}, headers: {}, body: {string: '{\"ok\": true}'}}\n"
    )
    return ("version: 1\ninteractions:\n" + one * count).encode()


def vcr_yaml_large_interaction(nodes: int) -> bytes:
    """One interaction holding `nodes` empty mappings (a line of four bytes each, about 550 bytes each composed)."""
    one = "- request: {method: GET, uri: 'https://status.example/v1/status'}\n  response: {status: {code: 200}}\n"
    return ("interactions:\n" + one + "  extra:\n" + "  - {}\n" * nodes + "version: 1\n").encode()


def vcr_yaml_large_top_level_value(nodes: int) -> bytes:
    """A small cassette beside a top-level value of `nodes` empty mappings."""
    one = "- request: {method: GET, uri: 'https://status.example/v1/status'}\n  response: {status: {code: 200}}\n"
    return ("interactions:\n" + one + "note:\n" + "- {}\n" * nodes).encode()


def vcr_yaml_alias_bomb(levels: int) -> bytes:
    """Billion laughs: each level refers to the one before ten times."""
    lines = ['a0: &a0 ["lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    lines.append(f"interactions: *a{levels - 1}")
    return ("\n".join(lines) + "\nversion: 1\n").encode()


def inspect_json_nested(depth: int) -> bytes:
    head = json.dumps(_HEADER, separators=(",", ":"))[:-1]
    return (head + ',"samples":[{"id":1,"epoch":1,"input":"hi","events":').encode() + nested_json(depth) + b"}]}"
