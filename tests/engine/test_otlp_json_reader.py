"""The bounded OTLP/JSON reader (issue 35, n17q_engine/formats/otlp/reader.py): what it reads is what `json.loads`
reads, whatever the window (small windows make every piece walk, item by item), the file door's flat spans are the
ones the whole-document decoding gave, and each cap refuses in one line naming what was too much, before the piece
past it is built."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from n17q_engine.formats import ConversionError
from n17q_engine.formats.otlp import conventions, convert_otlp, flat, reader
from n17q_engine.formats.otlp.flat import flatten_json, flatten_spans
from n17q_engine.formats.otlp.reader import OtlpJsonInvalid, OtlpJsonTooLarge, read_whole
from n17q_engine.formats.otlp.wire import _json_resource_spans
from tests.bounds import hostile
from tests.engine.test_format_otlp import _genai, _openinference, _spans
from tests.otlp_json import attribute_heavy_json, sdk_json

TRACE = "5b8efff798038103d269b633813fc60c"
MIB = 1024 * 1024
WINDOWS = {"default window": reader.WINDOW_CHARS, "64-character window": 64, "5-character window": 5}


@pytest.fixture(scope="module")
def examples() -> dict[str, str]:
    genai, openinference = _spans(_genai), _spans(_openinference)
    return {
        "genai": sdk_json(genai).decode(),
        "genai, base64 ids": sdk_json(genai, hex_ids=False).decode(),
        "openinference": sdk_json(openinference).decode(),
        "attribute heavy": attribute_heavy_json(300_000, TRACE).decode(),
        "pretty printed": json.dumps(json.loads(sdk_json(genai)), indent=2),
    }


EXAMPLES = ["genai", "genai, base64 ids", "openinference", "attribute heavy", "pretty printed"]


def _old_flat(text: str) -> list[dict]:
    """The file door before: the whole document by json.loads, shape-checked, flattened."""
    return flatten_spans(_json_resource_spans(json.loads(text)))


@pytest.mark.parametrize("window", WINDOWS.values(), ids=list(WINDOWS))
@pytest.mark.parametrize("name", EXAMPLES)
def test_it_reads_what_json_loads_reads(examples, name, window):
    text = examples[name]
    assert read_whole(text, window=window) == json.loads(text)
    assert flatten_json(text, window=window) == _old_flat(text)


def _span(i: int, **more) -> dict:
    return {"traceId": TRACE, "spanId": f"{i + 1:016x}", "name": f"s{i}", **more}


ODD = {
    "snake_case names": {"resource_spans": [{"scope_spans": [{"spans": [_span(0)]}]}]},
    "a list given twice": {"resourceSpans": [{"scopeSpans": [{"spans": [_span(0)]}, {"spans": [_span(1)]}]}]},
    "resource after its spans": {
        "resourceSpans": [
            {
                "scopeSpans": [{"spans": [_span(0)], "scope": {"name": "late", "version": "2"}}],
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "late"}}]},
            }
        ]
    },
    "unknown members": {"x": [1, {"y": None}], "resourceSpans": [{"scopeSpans": [{"spans": [_span(0, z=[1.5e3])]}]}]},
    "escapes and non-ASCII": {
        "resourceSpans": [{"scopeSpans": [{"spans": [_span(0, name='é\u2028"\\/\ud83d\ude00')]}]}]
    },
    "an empty export": {"resourceSpans": []},
}


@pytest.mark.parametrize("window", [1, 2, 3, 7, 16, 64, 4096])
@pytest.mark.parametrize("name", list(ODD))
def test_edge_cases_read_as_json_loads_reads_them(name, window):
    text = json.dumps(ODD[name], ensure_ascii=False)
    if name == "a list given twice":  # the same key twice in one object: json.dumps cannot write it
        text = text.replace('"scopeSpans": [{"spans": [', '"scopeSpans": [], "scopeSpans": [{"spans": [', 1)
        text = text.replace('{"spans": [{', '{"spans": [], "spans": [{', 1)
    assert read_whole(text, window=window) == json.loads(text)
    assert flatten_json(text, window=window) == _old_flat(text)


BROKEN = [
    '{"resourceSpans": [',
    '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "a",}]}]}]}',
    '{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "a\x01"}]}]}]}',
    '{"resourceSpans": [{"scopeSpans": [{"spans": [{"n": 12.}]}]}]}',
    '{"resourceSpans": [{"scopeSpans": [{"spans": [{"n": [1, 2 3]}]}]}]}',
    '{"resourceSpans": [{"scopeSpans": [{"spans": [{"n": tru}]}]}]}',
    '{"resourceSpans": []} extra',
    '{"resourceSpans"\n: [{"resource": {"attributes": [{"key": "k", "value": {"stringValue": "unterminated}}]}}]}',
    "{'resourceSpans': []}",
]


@pytest.mark.parametrize("window", [3, 16, 64, reader.WINDOW_CHARS])
@pytest.mark.parametrize("text", BROKEN, ids=[f"broken {i}" for i in range(len(BROKEN))])
def test_text_that_is_not_json_is_refused_as_json_loads_says(text, window):
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    with pytest.raises(OtlpJsonInvalid) as caught:
        read_whole(text, window=window)
    exc = expected.value
    assert str(caught.value) == f"the OTLP JSON does not parse ({exc.msg} at line {exc.lineno} column {exc.colno})"


def _one_line_refusal(kind: type[ConversionError], text: str, *, window: int = reader.WINDOW_CHARS) -> str:
    with pytest.raises(kind) as caught:
        flatten_json(text, window=window)
    message = str(caught.value)
    assert message and "\n" not in message
    return message


def _export(spans: list[dict]) -> str:
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]})


def _attributes(n: int) -> list[dict]:
    return [{"key": f"k{j}", "value": {"intValue": "1"}} for j in range(n)]


def test_a_span_past_the_attribute_cap_is_refused_naming_it():
    # Walked (larger than the window): refused at the 10,001st item, before the list is built further.
    message = _one_line_refusal(OtlpJsonTooLarge, _export([_span(0, attributes=_attributes(10_001))]))
    assert "resourceSpans[0].scopeSpans[0].spans[0] holds a list of more than 10000 items" in message
    # At the cap: read.
    assert len(flatten_json(_export([_span(0, attributes=_attributes(10_000))]))[0]["attributes"]) == 10_000


@pytest.mark.parametrize("window", [reader.WINDOW_CHARS, 16], ids=["decoded whole", "walked"])
def test_attributes_events_links_and_values_past_the_cap_are_refused_naming_them(monkeypatch, window):
    """A piece small enough to be decoded whole is counted by the flattening, one walked by the reader."""
    monkeypatch.setattr(reader, "MAX_ITEMS", 10)
    monkeypatch.setattr(flat, "MAX_ITEMS", 10)
    values = {"arrayValue": {"values": [{"intValue": "1"}] * 11}}
    cases = {
        "attributes": _export([_span(0), _span(1, attributes=_attributes(11))]),
        "events": _export([_span(0, events=[{"name": "e"}] * 11)]),
        "links": _export([_span(0, links=[{"traceId": TRACE}] * 11)]),
        "values": _export([_span(0, attributes=[{"key": "v", "value": values}])]),
        "resource attributes": json.dumps({"resourceSpans": [{"resource": {"attributes": _attributes(11)}}]}),
    }
    for what, text in cases.items():
        message = _one_line_refusal(OtlpJsonTooLarge, text, window=window)
        assert "holds " in message and "more than 10 " in message, (what, message)
        if window != 16:
            where = "resourceSpans[0]" if what.startswith("resource") else "spans[1]" if what == "attributes" else ""
            assert where in message and what.split()[-1] in message, (what, message)


def test_the_span_string_depth_and_value_caps_refuse_in_one_line(monkeypatch):
    monkeypatch.setattr(reader, "MAX_SPANS", 3)
    text = _export([_span(i) for i in range(4)])
    assert "holds more than 3 spans" in _one_line_refusal(OtlpJsonTooLarge, text)
    monkeypatch.setattr(reader, "MAX_STRING_CHARS", 1000)
    text = _export([_span(0, name="x" * 1001)])
    message = _one_line_refusal(OtlpJsonTooLarge, text, window=64)
    assert "spans[0] holds a string of more than 1000 characters" in message
    text = _export([_span(0, deep=json.loads("[" * 200 + "]" * 200))])
    message = _one_line_refusal(OtlpJsonInvalid, text, window=64)
    assert f"nested more than {reader.MAX_DEPTH} levels deep (in resourceSpans[0].scopeSpans[0].spans[0])" in message
    monkeypatch.setattr(reader, "MAX_PIECE_VALUES", 1000)
    text = _export([_span(0, attributes=_attributes(500))])
    assert "spans[0] holds more than 1000 JSON values" in _one_line_refusal(OtlpJsonTooLarge, text, window=64)
    text = json.dumps({"resourceSpans": [{"resource": {"attributes": _attributes(500)}}]})
    assert "resourceSpans[0].resource holds more than 1000" in _one_line_refusal(OtlpJsonTooLarge, text, window=64)


def _peak(call) -> int:
    tracemalloc.start()
    try:
        call()
    except ConversionError:
        pass
    finally:
        _size, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


def test_one_huge_span_is_read_within_a_bound_not_built():
    """The bounds suite's sample, measured here in this process: 160,000 tiny attributes in one span (~6 MB) were
    ~15 times the text once `json.loads`-ed (~100 MB); refused at the cap, the reading holds what the cap allows (a
    list of 10,000 attributes, a window's pieces: ~6 MB) whatever the text's size."""
    text = hostile.otlp_json_many_attributes(160_000).decode()
    assert _peak(lambda: flatten_json(text)) < 16 * MIB
    # Within the caps (2 spans of 10,000): the flat spans are held, a few times the text, plus that fixed part.
    text = hostile.otlp_json_many_attributes(20_000, per_span=10_000).decode()
    assert _peak(lambda: flatten_json(text)) < 4 * len(text) + 16 * MIB


def test_the_file_door_refuses_a_file_past_the_caps_in_one_line():
    body = hostile.otlp_json_many_attributes(20_000)
    with pytest.raises(ConversionError) as caught:
        convert_otlp(body, content_type="application/json")
    assert "more than 10000 items" in str(caught.value) and "\n" not in str(caught.value)


def test_a_json_text_in_an_attribute_is_read_as_json_only_within_its_value_cap(monkeypatch):
    """Messages, tool arguments and results are JSON texts the converter parses: past MAX_JSON_TEXT_VALUES values
    (counted on the text, before parsing) one stays the text it is, not 15 times it in dicts."""
    monkeypatch.setattr(conventions, "MAX_JSON_TEXT_VALUES", 10)
    within = json.dumps([{"role": "user", "content": "x" * 40}] * 3)
    past = json.dumps([{"role": "u"}] * 11)
    assert conventions._parse_json_text(within) == json.loads(within)
    assert conventions._parse_json_text(past) == past
