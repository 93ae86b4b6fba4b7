"""An Inspect AI log (.eval, .json) through the web import door (issue 35, point 4): members that lie about their sizes,
many tiny events, long strings. Answered (a 4xx with one line, or 201) within a bound on the memory the web process and
the converting process added (members and samples read one at a time with caps, part C; a `.json` log's values counted
on its bytes before it is parsed)."""

from __future__ import annotations

import pytest

from . import hostile
from .conftest import MIB, assert_answered

FACTOR, SLACK_MIB = 8, 64

CASES = {
    "eval member lying small": (lambda: hostile.inspect_eval_lying_member(24 * MIB, 100), "log.eval", 24 * MIB),
    "eval member lying large": (lambda: hostile.inspect_eval_lying_member(MIB, 3 * 1024**3), "log.eval", MIB),
    # 4 MiB: imported, the web process holds 13-16x it (bench_upload_doors has the 8 MiB figure); within the bound.
    "eval, long string": (lambda: hostile.inspect_eval(hostile.inspect_long_string(4 * MIB)), "log.eval", 4 * MIB),
    "json, nested": (lambda: hostile.inspect_json_nested(100_000), "log.json", 0),
    # The .json form holds its samples in one document: read whole, capped by the values a log may hold
    # (inspect_log.MAX_SAMPLE_VALUES, counted on its bytes first) and the converting process's memory limit.
    "json, many tiny events": (
        lambda: hostile.inspect_json(hostile.inspect_many_tiny_events(60_000)),
        "log.json",
        0,
    ),
    "eval, many tiny events": (
        lambda: hostile.inspect_eval(hostile.inspect_many_tiny_events(60_000)),
        "log.eval",
        4 * MIB,
    ),
}


@pytest.mark.parametrize(("make", "file_name", "decoded"), CASES.values(), ids=list(CASES))
def test_the_inspect_door_answers_a_hostile_log_within_bounds(door, make, file_name, decoded):
    data = make()
    answer = door("runs", data, file_name=file_name)
    bound = FACTOR * max(decoded, len(data)) / MIB + SLACK_MIB
    assert_answered(answer, max_grew_mib=bound, max_children_mib=bound)
