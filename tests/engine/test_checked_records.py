"""The importer's reading of an events.jsonl another reader has validated (`bundle.iter_checked_records`, issue 31)
gives exactly what the validating reader (`bundle.iter_event_records`) gives: the same lines, numbered the same,
the same text, event and clocks, and the same digest of the bytes read. It splits and parses lines its own, cheaper
way (no line feed added back to each line, no whitespace passes around a line the other reader parsed), so this is
held line for line, across block boundaries, CRLF line ends and a last line without its line feed."""

from __future__ import annotations

import hashlib
import io
import json

import pytest

from n17q_engine import bundle
from tests import bundles

MANIFEST, EVENTS, _BLOBS = bundles.example_parts()


def _lines(events: list[dict], *, end: bytes = b"\n", pad: int = 0) -> list[bytes]:
    out = []
    for i, event in enumerate(events):
        event = dict(event)
        if pad:
            event["reason"] = f"line {i} " + "x" * (pad + i % 97)  # lines of many lengths: blocks end mid-line
        out.append(json.dumps(event).encode() + end)
    return out


def _many(n: int) -> list[dict]:
    """`n` events: the example's, then copies of its last with fresh ids and seqs."""
    events = [dict(e) for e in EVENTS]
    last = events[-1]
    for i in range(len(events), n):
        events.append({**last, "id": f"extra-{i}", "seq": last["seq"] + i})
    return events


CASES = {
    "example": b"".join(_lines(EVENTS)),
    "crlf": b"".join(_lines(EVENTS, end=b"\r\n")),
    "no final line feed": b"".join(_lines(EVENTS))[:-1],
    # Several megabyte blocks, lines of varied length: some line straddles every block boundary.
    "across blocks": b"".join(_lines(_many(6000), pad=700)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_checked_reading_gives_what_the_validating_reader_gives(name):
    data = CASES[name]
    validated_digest, checked_digest = hashlib.sha256(), hashlib.sha256()
    validated = list(bundle.iter_event_records(io.BytesIO(data), digest=validated_digest))
    asked: list[int] = []
    checked = [
        record
        for record, verdict in bundle.iter_checked_records(
            io.BytesIO(data), lambda line: asked.append(line) or line, digest=checked_digest
        )
        if verdict == record.line
    ]
    assert len(checked) == len(validated) and asked == [r.line for r in validated]
    for mine, theirs in zip(checked, validated, strict=True):
        assert (mine.line, mine.text, mine.event, mine.logical, mine.wall) == (
            theirs.line,
            theirs.text,
            theirs.event,
            theirs.logical,
            theirs.wall,
        )
    assert checked_digest.hexdigest() == validated_digest.hexdigest() == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("ending", [b"\n", b""])
def test_a_line_past_the_limit_is_asked_about_and_never_parsed(monkeypatch, ending):
    """The other reader refuses a line longer than MAX_LINE_BYTES (with or without its line feed); this reader asks
    about it, and so raises that refusal, before parsing it, and holds no more of it than the limit."""
    first = _lines(EVENTS[:1])[0]
    monkeypatch.setattr(bundle, "MAX_LINE_BYTES", len(first) + 10)
    data = first + b"x" * 10_000 + ending
    given: list[bytes] = []
    real_lines = bundle._checked_lines

    def lines(stream, digest):
        for line in real_lines(stream, digest):
            given.append(line)
            yield line

    monkeypatch.setattr(bundle, "_checked_lines", lines)

    def checked(line: int) -> int:
        if line == 2:
            raise bundle.BundleError("line longer than the limit", file="events.jsonl", line=2)
        return line

    seen = []
    with pytest.raises(bundle.BundleError, match="longer than the limit"):
        for record, _ in bundle.iter_checked_records(io.BytesIO(data), checked):
            seen.append(record.line)
    assert seen == [1]
    assert len(given) == 2 and len(given[1]) == bundle.MAX_LINE_BYTES + 1
