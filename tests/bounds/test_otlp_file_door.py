"""An OTLP trace file through the import doors (issue 35, point 4): the web door (POST /api/v1/runs/, converted by the
converting process) and `import_run` (the command, in a process of its own). Hostile files are answered (a 4xx or a
command's one-line refusal, or success) within a bound on the memory the door's process and its converting process
added. OTLP/JSON is read a span at a time by the reader the receiver uses too (n17q_engine/formats/otlp/reader.py),
by the converting process and by the secret scan of the original in the door's own process; each piece is decoded
over a bounded window of the text, so one huge span is as bounded as many small ones."""

from __future__ import annotations

import pytest

from . import hostile
from .conftest import MIB, assert_answered

FACTOR, SLACK_MIB = 8, 64

CASES = {
    "nested JSON": ("runs", lambda: hostile.nested_json(200_000, key="resourceSpans")),
    "many tiny spans, protobuf": (
        "runs",
        lambda: hostile.otlp_protobuf(hostile.otlp_json_many_tiny_spans(20_000)),
    ),
    "long string": ("import_run", lambda: hostile.otlp_json_long_string(8 * MIB)),
    # ~6 MB of JSON, one span of 160,000 attributes: refused in one line past MAX_ITEMS (10,000 a list). Read whole
    # (json.loads) it took the converting process to ~15x and the original's secret scan the door's process to 165 MiB
    # more; now a few MiB each.
    "huge attribute count, JSON": ("import_run", lambda: hostile.otlp_json_many_attributes(160_000)),
    # The same attributes within the caps (16 spans of 10,000): imported. The original's scan read whole took the
    # door's process to 163 MiB more (~25x); a span at a time, ~40 MiB.
    "attributes within the caps, JSON": (
        "import_run",
        lambda: hostile.otlp_json_many_attributes(160_000, per_span=10_000),
    ),
    "many tiny spans, JSON": ("import_run", lambda: hostile.otlp_json_many_tiny_spans(40_000)),
    # A JSON text in an attribute (chat messages), ~6 MB of tiny objects: parsed whole it took the converting process
    # to ~260 MB; past MAX_JSON_TEXT_VALUES it stays text.
    "JSON text of tiny objects in an attribute": ("import_run", lambda: hostile.otlp_json_messages_text(400_000)),
}


@pytest.mark.parametrize(("name", "make"), CASES.values(), ids=list(CASES))
def test_the_otlp_file_door_answers_a_hostile_file_within_bounds(door, name, make):
    body = make()
    answer = door(name, body, file_name="spans.bin")
    bound = FACTOR * len(body) / MIB + SLACK_MIB
    assert_answered(answer, max_grew_mib=bound, max_children_mib=bound)
