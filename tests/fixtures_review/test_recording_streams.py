"""HAR files and VCR cassettes are read one exchange at a time (issue 35, part C): what the streamed reading gives,
exchange by exchange and refusal by refusal, is what parsing the whole document gives (json.loads, or PyYAML's safe
loader), on cassettes vcrpy records, on the HAR files the other tests use, and on the documents' edge cases; and a
file holding more exchanges than the cap is refused in one line with nothing stored."""

from __future__ import annotations

import json
import threading
import tracemalloc
from http.server import ThreadingHTTPServer
from typing import Any

import pytest
import yaml
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fixtures_review import intake, recordings
from fixtures_review.models import RequestObservation, StagedRecording
from fixtures_review.recordings import RecordingError, RecordingFile
from tests.bounds import hostile
from tests.fixtures_review.test_recordings import MAPPING, _Service, record
from tests.hypothesis_budget import examples

FIELDS = {"scenario": "docs-research", "tool": "status.lookup", "contract_revision": 2, "effect_class": "read"}
AT = "2026-01-01T00:00:00Z"


def whole(raw: bytes) -> RecordingFile | None:
    """The reading before issue 35's part C: the document parsed whole, its exchanges held as a list."""
    head = raw[:64].lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(b"{"):
        try:
            data = json.loads(raw.decode("utf-8-sig"), parse_constant=intake._no_constant)
        except (ValueError, RecursionError):
            return None
        if not isinstance(data, dict) or data.get("format") == intake.CAPTURE_FORMAT:
            return None
        log = data.get("log")
        if isinstance(log, dict) and ("entries" in log or "creator" in log):
            return RecordingFile("har", data)
        return RecordingFile("vcr", data) if "interactions" in data else None
    data = recordings._load_yaml(raw, "the cassette")  # the whole-document loader a mapping file is read with
    if isinstance(data, dict) and "interactions" in data:
        return RecordingFile("vcr", data)
    raise RecordingError("the YAML document is not a VCR cassette: it has no interactions")


def outcome(read: Any, raw: bytes, fields: dict[str, Any], mapping: recordings.Mapping | None) -> Any:
    """(kind, exchanges, what converting them gives) or the refusal's line, or None for neither kind of file."""
    try:
        source = read(raw)
        if source is None:
            return None
        listed = recordings.exchanges(source)
        try:
            converted = recordings.convert(source, fields=fields, mapping=mapping, captured_at=AT)
            staged = [(r.index, r.method, r.url, r.capture, r.rule) for r in converted.recordings]
            result: Any = (staged, converted.skipped)
        except RecordingError as exc:
            result = str(exc)
        return source.kind, listed, result
    except RecordingError as exc:
        return str(exc)


def assert_same(raw: bytes, fields: dict[str, Any] = FIELDS, mapping: recordings.Mapping | None = None) -> Any:
    streamed = outcome(recordings.load, raw, fields, mapping)
    assert streamed == outcome(whole, raw, fields, mapping)
    return streamed


@pytest.fixture(scope="module")
def cassettes(tmp_path_factory) -> dict[str, bytes]:
    """Cassettes vcrpy records against a loopback service (the recordings tests' own), in YAML and JSON."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Service)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    folder = tmp_path_factory.mktemp("cassettes")
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        return {
            "yaml, gzip kept": record(folder / "a.yaml", base, "yaml").read_bytes(),
            "yaml, decoded": record(folder / "b.yaml", base, "yaml", gz=False).read_bytes(),
            "json": record(folder / "c.json", base, "json", gz=False).read_bytes(),
        }
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("name", ["yaml, gzip kept", "yaml, decoded", "json"])
def test_a_vcrpy_cassette_reads_the_same_streamed_as_whole(cassettes, name):
    kind, listed, (staged, skipped) = assert_same(cassettes[name])
    assert kind == "vcr" and len(listed) == 4 and len(staged) == 4 and skipped == []
    # Under a mapping: one exchange skipped, the arguments taken from the path.
    kind, listed, (staged, skipped) = assert_same(cassettes[name], {}, recordings.parse_mapping(MAPPING))
    assert [s[-1] for s in staged] == [1, 1, 2] and len(skipped) == 1
    assert assert_same(cassettes[name], {})[-1].startswith("scenario: required")  # no fields, no mapping: refused


def har_file(*entries: dict[str, Any], **log: Any) -> bytes:
    return json.dumps({"log": {"version": "1.2", "creator": {"name": "x"}, **log, "entries": list(entries)}}).encode()


def har_entry(i: int, **response: Any) -> dict[str, Any]:
    return {
        "startedDateTime": f"2026-07-01T09:00:{i:02d}Z",
        "request": {
            "method": "POST" if i % 2 else "GET",
            "url": f"https://api.example/v1/items/{i}?q=a&q=b",
            "headers": [{"name": "Content-Type", "value": "application/json"}],
            "postData": {"mimeType": "application/json", "text": json.dumps({"n": i, "note": "é\u2028"})},
        },
        "response": {
            "status": 200,
            "headers": [{"name": "Content-Type", "value": "application/json"}, {"name": "X-A", "value": "1"}],
            "content": {"mimeType": "application/json", "text": json.dumps({"id": i, "items": [1.5, None, True]})},
            **response,
        },
    }


def interaction(i: int) -> str:
    return (
        f"- request: {{method: GET, uri: 'https://status.example/v1/{i}', body: null, headers: {{Accept: [a/b]}}}}\n"
        f"  response: {{status: {{code: 200, message: OK}}, headers: {{}}, body: {{string: '{{\"n\": {i}}}'}}}}\n"
    )


ONE = interaction(1)
JSON_ONE = json.dumps({"request": {"method": "GET", "uri": "https://h/"}, "response": {"status": {"code": 200}}})
DOCUMENTS = {
    "HAR, ordinary": har_file(*(har_entry(i) for i in range(1, 30))),
    "HAR, a base64 body": har_file(har_entry(1, content={"text": "aGVsbG8=", "encoding": "base64"})),
    "HAR, many tiny entries": hostile.har_many_entries(300),
    "HAR, the log given twice": b'{"log": {"entries": [1]}, "log": ' + har_file(har_entry(3))[8:],
    "HAR, entries given twice": har_file(har_entry(1), entries=[]).replace(b'"entries": []', b'"entries": [7]'),
    "HAR, entries not a list": b'{"log": {"creator": {}, "entries": {"a": 1}}}',
    "HAR, no entries": b'{"log": {"creator": {}, "entries": []}}',
    "HAR, an entry not an object": b'{"log": {"creator": {}, "entries": [{}, 3]}}',
    "HAR, a malformed entry after a conversion fault": (
        b'{"log": {"creator": {}, "entries": [{"request": {"method": "GET", "url": "http://h/"}, "response": '
        b'{"status": 200, "content": {"text": "[' + b"1," * 3000 + b'1]"}}}, {"request": {}}]}}'
    ),
    "HAR, spaces, a BOM and escapes": b'\xef\xbb\xbf \n{ "log" :\t{ "creator" : { } , "entries" : [ '
    + json.dumps(har_entry(2), ensure_ascii=True).encode()
    + b" ] } }\n ",
    "JSON cassette, interactions given twice": (
        b'{"interactions": [], "version": 1, "interactions": [' + JSON_ONE.encode() + b"]}"
    ),
    "JSON, a member given twice": (
        b'{"format": "%s", "interactions": [%s], "format": 1}' % (intake.CAPTURE_FORMAT.encode(), JSON_ONE.encode())
    ),
    "JSON, extra data after the document": b'{"interactions": [' + JSON_ONE.encode() + b"]} x",
    "JSON, malformed inside an exchange": b'{"interactions": [{"request": }]}',
    "JSON, NaN inside an exchange": b'{"interactions": [{"request": NaN}]}',
    "JSON, deeply nested inside an exchange": b'{"interactions": [' + b"[" * 5000 + b"]" * 5000 + b"]}",
    "JSON, a native capture": json.dumps({"format": intake.CAPTURE_FORMAT, "interactions": [1]}).encode(),
    "JSON, neither": b'{"log": 3}',
    "YAML, many tiny interactions": hostile.vcr_yaml_many_interactions(300),
    "YAML, interactions given twice": ("interactions:\n" + ONE + "version: 1\ninteractions:\n" + ONE * 2).encode(),
    "YAML, a merge key beside them": ("interactions:\n" + ONE + "<<: {interactions: [1, 2], version: 2}\n").encode(),
    "YAML, anchors without aliases": (
        "interactions:\n" + ONE.replace("- ", "- &a ") + ONE.replace("- ", "- &b ")
    ).encode(),
    "YAML, an anchor given twice": ("interactions:\n" + ONE.replace("- ", "- &a ") * 2).encode(),
    "YAML, a tagged sequence": ("interactions: !!seq\n" + ONE).encode(),
    "YAML, a Python tag in an interaction": (
        "interactions:\n" + ONE + "- !!python/object/apply:os.system ['true']\n"
    ).encode(),
    "YAML, a timestamp": ("interactions:\n" + ONE + "  recorded_at: 2026-07-01T09:00:00\n").encode(),
    "YAML, a second document": ("interactions:\n" + ONE + "---\nx: 1\n").encode(),
    "YAML, a flow sequence at the top": b"[\ninteractions: 1]\n",
    "YAML, interactions null": b"interactions:\nversion: 1\n",
    "YAML, no interactions": b"interactions: []\n",
    "YAML, an alias": ("interactions:\n" + ONE.replace("- ", "- &a ") + "- *a\n").encode(),
    "YAML, a malformed interaction after a conversion fault": (
        "interactions:\n"
        + ONE.replace("{Accept: [a/b]}", "{Content-Type: [application/json]}").replace(
            "body: null", "body: '[" + "1," * 3000 + "1]'"
        )
        + "- {request: {method: GET}, response: {}}\n"
    ).encode(),
}


@pytest.mark.parametrize("name", list(DOCUMENTS))
def test_a_document_reads_the_same_streamed_as_whole(name, monkeypatch):
    monkeypatch.setattr(recordings, "MAX_BODY_VALUES", 1000)  # so that a small body is a conversion's fault
    said = assert_same(DOCUMENTS[name])
    if name.endswith("after a conversion fault"):  # the malformed exchange further on is said first, as before
        assert isinstance(said, str) and ("HAR entry 2" in said or "cassette interaction 2" in said), said


@pytest.mark.parametrize("syntax", ["json", "yaml"])
def test_a_document_past_the_cap_on_exchanges_is_refused_the_same(syntax, monkeypatch):
    monkeypatch.setattr(recordings, "MAX_ENTRIES", 5)
    raw = hostile.har_many_entries(6) if syntax == "json" else hostile.vcr_yaml_many_interactions(6)
    said = assert_same(raw)
    assert said in ("the HAR file holds 6 entries, more than 5", "the cassette holds 6 interactions, more than 5")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("make", "ctype", "said"),
    [
        (hostile.vcr_yaml_many_interactions, "application/yaml", "the cassette holds 41 interactions, more than 40"),
        (hostile.har_many_entries, "application/json", "the HAR file holds 41 entries, more than 40"),
    ],
    ids=["VCR", "HAR"],
)
def test_the_capture_door_refuses_a_file_past_the_cap_in_one_line_and_stores_nothing(
    client, role_user, monkeypatch, make, ctype, said
):
    monkeypatch.setattr(recordings, "MAX_ENTRIES", 40)
    client.force_login(role_user("operator"))
    query = "scenario=docs-research&tool=status.lookup&contract_revision=2&effect_class=read"
    response = client.post(f"{reverse('api-captures')}?{query}", data=make(41), content_type=ctype)
    assert response.status_code == 400
    assert response.json()["error"] == said
    assert StagedRecording.objects.count() == 0 and RequestObservation.objects.count() == 0
    # At the cap itself the file is staged, every exchange.
    response = client.post(f"{reverse('api-captures')}?{query}", data=make(40), content_type=ctype)
    assert response.status_code == 201 and len(response.json()["recordings"]) == 40


# --- any document: the streamed reading against the whole-document parse ------------------------------------------

_SCALARS = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=12)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_EXCHANGES = st.fixed_dictionaries(
    {
        "request": st.fixed_dictionaries(
            {"method": st.sampled_from(["GET", "POST", ""]), "uri": st.just("https://status.example/a?b=1")},
            optional={"url": st.just("https://status.example/c"), "body": _SCALARS, "headers": _VALUES},
        ),
        "response": st.fixed_dictionaries(
            {"status": st.sampled_from([200, 404, {"code": 201}, "x"])},
            optional={"body": st.sampled_from([None, {"string": '{"a": 1}'}, "text"]), "content": _VALUES},
        ),
    },
    optional={"startedDateTime": st.just("2026-07-01T09:00:00Z"), "extra": _VALUES},
)
_LISTS = st.lists(_EXCHANGES | _VALUES, max_size=4) | _VALUES


@settings(max_examples=examples(200), suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    kind=st.sampled_from(["har", "vcr"]),
    listed=_LISTS,
    extra=st.dictionaries(st.sampled_from(["version", "format", "log", "note"]), _VALUES, max_size=2),
    as_yaml=st.booleans(),
    flow=st.sampled_from([None, True, False]),
)
def test_any_document_reads_the_same_streamed_as_whole(kind, listed, extra, as_yaml, flow):
    if kind == "har":
        document: dict[str, Any] = {**extra, "log": {"creator": {}, "entries": listed}}
    else:
        document = {**extra, "interactions": listed}
    raw = (
        yaml.safe_dump(document, default_flow_style=flow, allow_unicode=True).encode()
        if as_yaml and kind == "vcr"
        else json.dumps(document).encode()
    )
    assert_same(raw)


# --- what is composed at once: an interaction, and the rest of the cassette ----------------------------------------


@pytest.mark.parametrize(
    ("tail", "said"),
    [
        ("  extra:\n" + "  - {}\n" * 30, "the cassette holds an interaction of more than 40 YAML nodes"),
        ("note:\n" + "- {}\n" * 40, "the cassette holds more than 40 YAML nodes outside its interactions"),
    ],
    ids=["an interaction", "the rest"],
)
def test_what_a_cassette_composes_at_once_is_capped_before_anything_is_composed(monkeypatch, tail, said):
    monkeypatch.setattr(recordings, "MAX_YAML_PIECE_NODES", 40)
    small = "interactions:\n" + ONE + "version: 1\n"
    assert assert_same(small.encode())[0] == "vcr"  # under the caps: read as before
    with pytest.raises(RecordingError) as refused:
        recordings.load(("interactions:\n" + ONE + ONE + tail).encode())
    assert str(refused.value) == said
    # Both caps count a whole cassette of small interactions, as many as they are, and nothing else.
    many = ("interactions:\n" + ONE * 200 + "version: 1\n").encode()
    source = recordings.load(many)
    assert source is not None and len(recordings.exchanges(source)) == 200


def test_a_json_exchange_of_too_many_values_is_refused_before_it_is_decoded(monkeypatch):
    monkeypatch.setattr(recordings, "MAX_PIECE_VALUES", 1000)
    tracemalloc.start()
    try:
        with pytest.raises(RecordingError) as refused:
            recordings.load(hostile.har_large_entry(100_000))
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    said = str(refused.value)
    assert said.startswith("HAR entry 1 holds up to ") and "more than the 1000" in said and "\n" not in said
    # The 0.3 MB text and copies of it (about 1.5 MB), not the entry's 100,000 dicts (6.4 MB decoded).
    assert peak < 3 * 1024 * 1024, peak
    # A native capture is not a recording: its own reader judges it, whatever its size.
    native = {"format": intake.CAPTURE_FORMAT, "response": {"body": [{}] * 2000}}
    assert recordings.load(json.dumps(native).encode()) is None


@pytest.mark.parametrize("name", [name for name in DOCUMENTS if not name.startswith(("YAML", "JSON, deeply"))])
def test_counting_each_json_exchange_before_decoding_it_reads_the_same(name, monkeypatch):
    # Below the documents' own totals, so that every exchange and member is counted on its text first.
    monkeypatch.setattr(recordings, "MAX_PIECE_VALUES", 500)
    monkeypatch.setattr(recordings, "MAX_BODY_VALUES", 1000)
    assert_same(DOCUMENTS[name])
