"""HAR files and VCR cassettes are read within bounds (issue 35, part C): the number of values a document holds is
counted on its bytes before it is parsed, each body is capped before it is decoded, and the bodies of one file
decode to a bounded total, so that a small file cannot make the web process large. Each refusal is one line.

Memory is measured with tracemalloc around the reading (peak of Python allocations), against generous bounds.
"""

from __future__ import annotations

import base64
import gzip
import json
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from fixtures_review import intake, recordings
from fixtures_review.recordings import RecordingError, convert, load


@pytest.fixture(autouse=True)
def _reviewed_connections() -> None:
    """This module's tests read and write no row: no reviewed connections, no database (tests/fixtures_review/
    conftest.py's fixture of this name, overridden), so they run once, in the SQLite pass (tests/conftest.py)."""


FIELDS = {"scenario": "docs-research", "tool": "status.lookup", "contract_revision": 2, "effect_class": "read"}
# A gzip body that decompresses to just under the per-body cap: 32 KB on the wire.
BOMB = gzip.compress(b"0" * (intake.MAX_BODY_BYTES - 1024), compresslevel=9)


def refused_within(call: Callable[[], Any], peak_mib: int) -> str:
    """`call`'s one-line RecordingError, and its peak of Python allocations under `peak_mib`."""
    tracemalloc.start()
    try:
        with pytest.raises(RecordingError) as caught:
            call()
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    message = str(caught.value)
    assert message and "\n" not in message
    assert peak < peak_mib * 1024 * 1024, (peak // (1024 * 1024), message)
    return message


def har(entries: list[dict[str, Any]] | str) -> bytes:
    listed = entries if isinstance(entries, str) else json.dumps(entries)
    return b'{"log": {"version": "1.2", "creator": {"name": "x"}, "entries": ' + listed.encode() + b"}}"


def har_entry(i: int, body: bytes) -> dict[str, Any]:
    return {
        "request": {"method": "GET", "url": f"http://status.example/{i}", "headers": []},
        "response": {
            "status": 200,
            "headers": [{"name": "Content-Encoding", "value": "gzip"}],
            "content": {"text": base64.b64encode(body).decode(), "encoding": "base64"},
        },
    }


def test_a_har_file_of_millions_of_entries_is_refused_before_it_is_parsed() -> None:
    # 9 MB of `{}`: three million dicts (about 250 MB) had they been parsed before being counted.
    raw = har("[" + ",".join(["{}"] * 3_000_000) + "]")
    message = refused_within(lambda: load(raw), peak_mib=60)
    assert "JSON values" in message


def test_a_json_cassette_of_millions_of_interactions_is_refused_before_it_is_parsed() -> None:
    raw = b'{"interactions": [' + b",".join([b"{}"] * 3_000_000) + b"]}"
    assert "JSON values" in refused_within(lambda: load(raw), peak_mib=60)


def test_a_yaml_cassette_of_millions_of_nodes_is_refused_before_it_is_parsed() -> None:
    raw = b"interactions:\n" + b"- {a: [], b: [], c: []}\n" * 1_000_000
    assert "YAML" in refused_within(lambda: load(raw), peak_mib=80)


def test_the_bodies_of_a_har_file_decode_to_a_bounded_total() -> None:
    # Twenty gzip bodies of 32 KB each decode to 32 MiB each: 640 MiB from a 1 MB file.
    source = load(har([har_entry(i, BOMB) for i in range(20)]))
    assert source is not None
    message = refused_within(lambda: convert(source, fields=FIELDS, captured_at="2026-01-01T00:00:00Z"), 200)
    assert "decode to more than" in message and "entry" in message


def test_the_bodies_of_a_yaml_cassette_decode_to_a_bounded_total() -> None:
    body = base64.encodebytes(BOMB).decode()
    indented = "".join(f"          {line}\n" for line in body.splitlines())
    interaction = (
        "- request: {method: GET, uri: 'http://status.example/', body: null, headers: {}}\n"
        "  response:\n"
        "    status: {code: 200}\n"
        "    headers: {Content-Encoding: [gzip]}\n"
        "    body:\n"
        "      string: !!binary |\n" + indented
    )
    source = load(("interactions:\n" + interaction * 20).encode())
    assert source is not None
    message = refused_within(lambda: convert(source, fields=FIELDS, captured_at="2026-01-01T00:00:00Z"), 200)
    assert "decode to more than" in message


def test_a_body_past_the_cap_is_refused_before_it_is_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(intake, "MAX_BODY_BYTES", 1024)
    source = load(har([har_entry(1, b"x" * 4096)]))
    assert source is not None
    message = refused_within(lambda: recordings.exchanges(source), 10)
    assert "HAR entry 1 response.content" in message and "more than 1024 bytes" in message


def test_a_json_body_of_millions_of_values_is_refused_before_it_is_parsed() -> None:
    body = b"[" + b",".join([b"{}"] * 3_000_000) + b"]"
    entry = har_entry(1, body)
    entry["response"]["headers"] = [{"name": "Content-Type", "value": "application/json"}]
    entry["response"]["content"] = {"text": body.decode()}
    source = load(har([entry]))
    assert source is not None
    message = refused_within(lambda: convert(source, fields=FIELDS, captured_at="2026-01-01T00:00:00Z"), 120)
    assert "entry 1" in message and "JSON values" in message
