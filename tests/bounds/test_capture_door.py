"""POST /api/v1/captures/ with a capture, a HAR file or a VCR cassette (issue 35, point 4): deep nesting, long strings,
many tiny entries, a YAML alias bomb. Answered (a 4xx with one line, or 201) within a bound on the memory the request
added. HAR entries and VCR interactions are read one at a time (fixtures_review/recordings.py), each dropped once
converted: 8,000 tiny interactions took the request's process to 124 MiB (89 times the 1.4 MB cassette) when the
cassette was parsed whole, 14 MiB since; 20,000 tiny HAR entries 57 MiB (10 times), 26 MiB since. What is composed
at once (an interaction, the rest of the cassette) is capped in nodes before anything is composed: one interaction
of 900,000 nodes (6 MB) took the process to 673 MiB; and what a JSON recording decodes at once (an entry) in values:
one entry of 990,000 `{}` (3 MB) took it to 89 MiB."""

from __future__ import annotations

import json

import pytest

from . import hostile
from .conftest import MIB, assert_answered

FACTOR, SLACK_MIB = 8, 32
FIELDS = "scenario=docs-research&tool=status.lookup&contract_revision=2&effect_class=read"

CASES = {
    "capture, nested": (lambda: hostile.nested_json(200_000, key="response"), "application/json", ""),
    "capture, long string": (
        lambda: json.dumps({"format": "n17q.capture/1", "tool": "x" * (16 * MIB)}).encode(),
        "application/json",
        "",
    ),
    "HAR, many tiny entries": (lambda: hostile.har_many_entries(20_000), "application/json", FIELDS),
    "HAR, one large entry": (lambda: hostile.har_large_entry(990_000), "application/json", FIELDS),
    "HAR, long string": (lambda: hostile.har_many_entries(1, body="x" * (8 * MIB)), "application/json", FIELDS),
    "VCR, alias bomb": (lambda: hostile.vcr_yaml_alias_bomb(9), "application/yaml", FIELDS),
    "VCR, many tiny interactions": (lambda: hostile.vcr_yaml_many_interactions(8_000), "application/yaml", FIELDS),
    "VCR, one large interaction": (lambda: hostile.vcr_yaml_large_interaction(200_000), "application/yaml", FIELDS),
    "VCR, a large top-level value": (
        lambda: hostile.vcr_yaml_large_top_level_value(200_000),
        "application/yaml",
        FIELDS,
    ),
}


@pytest.mark.parametrize(("make", "content_type", "query"), CASES.values(), ids=list(CASES))
def test_the_capture_door_answers_a_hostile_document_within_bounds(door, make, content_type, query):
    data = make()
    answer = door("captures", data, content_type=content_type, query=query)
    assert_answered(answer, max_grew_mib=FACTOR * len(data) / MIB + SLACK_MIB)
