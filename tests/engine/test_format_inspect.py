"""Inspect AI eval logs -> runs (issue 17 point 3), tested on logs a real Inspect eval writes in this test run.

`inspect_producer.py` runs a small eval with Inspect's built-in mock model, a tool, Inspect's local sandbox and an
approval policy, in a child process (its own environment, no display, nothing leaves the machine), once per
module; the converter then reads the bytes of the logs it wrote, in both formats.
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
from pathlib import Path

import pytest

from n17q_engine.bundle import iter_event_records, parse_manifest, verify_blobs
from n17q_engine.canonical import digest_bytes, request_digest
from n17q_engine.formats import ConversionError, ConvertedRun, write_bundle
from n17q_engine.formats.inspect_log import convert_inspect_log, looks_like_inspect_log
from n17q_engine.lineage import check_events

from .inspect_logs import produce_once

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return produce_once(tmp_path_factory)


def _bundle(run: ConvertedRun, root: Path) -> list[dict]:
    """Write `run` as a bundle folder and read it back the way the importer does; its validated events."""
    root.mkdir()
    write_bundle(run, root)
    manifest = parse_manifest((root / "manifest.json").read_bytes())
    verify_blobs(root, manifest)
    with open(root / "events.jsonl", "rb") as fh:
        return [record.event for record in iter_event_records(fh)]


def _by_id(runs: list[ConvertedRun]) -> dict[str, ConvertedRun]:
    return {run.run["id"].rsplit("-", 1)[0]: run for run in runs}


def _blob(run: ConvertedRun, digest: str) -> bytes:
    return run.blobs[digest][0]


# -------------------------------------------------------------------------------------------------- recognition


def test_it_recognises_both_inspect_formats_by_content(logs: dict[str, Path]) -> None:
    assert looks_like_inspect_log(logs["eval"].read_bytes()) == "eval"
    assert looks_like_inspect_log(logs["json"].read_bytes()) == "json"
    # A log cut off early is still recognised (its first member's name), so the error can say what it is.
    assert looks_like_inspect_log(logs["eval"].read_bytes()[:200]) == "eval"


def test_it_does_not_claim_other_files(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("manifest.json", "{}")
        zf.writestr("events.jsonl", "")
    assert looks_like_inspect_log(buf.getvalue()) is None
    assert looks_like_inspect_log(b'{"resourceSpans": []}') is None
    assert looks_like_inspect_log(b"") is None
    assert looks_like_inspect_log((HERE.parent / "data" / "example-capture.json").read_bytes()) is None


# ------------------------------------------------------------------------------------------------- conversion


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_it_makes_one_valid_run_per_sample_and_epoch(logs: dict[str, Path], fmt: str, tmp_path: Path) -> None:
    data = logs[fmt].read_bytes()
    runs = convert_inspect_log(data)
    assert sorted(_by_id(runs)) == [
        "inspect-adder-2-e1",
        "inspect-adder-2-e2",
        "inspect-adder-one-e1",
        "inspect-adder-one-e2",
    ]
    assert len({run.run["id"] for run in runs}) == 4
    for i, run in enumerate(runs):
        assert run.run["task"] == {"id": "adder", "revision": "3"}
        assert run.run["model"] == {"name": "mockllm/model", "version": "mockllm/model"}
        assert (run.run["environment"], run.run["mode"]) == ("live", "recorded")
        assert run.run["title"].startswith("adder \u00b7 sample ")
        assert run.report.source_format == f"inspect-{fmt}"
        # The whole original log is a blob of every run; the sample's JSON is one too.
        roles = {role: data_ for data_, _media, role in run.blobs.values()}
        assert roles["source-log"] == data
        sample = json.loads(roles["inspect-sample"])
        assert f"inspect-adder-{sample['id']}-e{sample['epoch']}" == run.run["id"].rsplit("-", 1)[0]
        events = _bundle(run, tmp_path / f"run{i}")
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        # The lineage checker reads the run and finds nothing broken: every reference resolves.
        assert check_events(run.run, events) == []


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_it_maps_model_tool_sandbox_approval_and_score_events(logs: dict[str, Path], fmt: str) -> None:
    run = _by_id(convert_inspect_log(logs[fmt].read_bytes()))["inspect-adder-one-e1"]
    events = run.events
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "attempt.started" and kinds[-2:] == ["run.state", "attempt.ended"]
    assert events[-2]["state"] == "completed" and events[-1]["outcome"] == "completed"
    assert {e["attempt"] for e in events} == {"attempt-1"}

    proposals = [e for e in events if e["kind"] == "model.proposal"]
    assert [p["proposal"]["type"] for p in proposals] == ["tool_call"] * 4 + ["message"]
    assert proposals[0]["proposal"]["calls"][0]["tool"] == "add"
    assert proposals[0]["proposal"]["calls"][0]["arguments"] == {"x": 1, "y": 2}
    assert proposals[-1]["proposal"]["text"] == "3"
    assert all(p["accepted"] for p in proposals)
    # Each model call's usage, as the mock model was told to report it.
    assert [e["amount"] for e in events if e["kind"] == "budget.charged"] == [15, 26, 37, 48, 51]

    calls = [e for e in events if e["kind"] == "tool.call"]
    assert [(c["tool"], c["request"]) for c in calls] == [
        ("add", {"x": 1, "y": 2}),
        ("shell", {"cmd": "echo hello"}),
        ("shell", {"cmd": "echo oops; exit 3"}),
        ("shell", {"cmd": "rm -rf ./nothing-here"}),
    ]
    assert all(c["request_digest"] == request_digest(c["request"]) for c in calls)
    assert [c["proposal_id"] for c in calls] == [p["id"] for p in proposals[:4]]

    results = {e["call_id"]: e for e in events if e["kind"] == "tool.result"}
    add, hello, oops, rm = (results[c["id"]] for c in calls)
    assert [r["outcome"] for r in (add, hello, oops, rm)] == ["ok", "ok", "error", "denied"]
    assert _blob(run, add["blob"]) == b"3"
    assert _blob(run, hello["blob"]) == b"hello\n"
    assert json.loads(_blob(run, oops["blob"]))["error"]["message"] == "exit 3: oops\n"
    assert json.loads(_blob(run, rm["blob"]))["error"]["type"] == "approval"

    receipts = [e for e in events if e["kind"] == "command.receipt"]
    by_call = {r["call_id"]: r for r in receipts if r["call_id"] is not None}
    assert set(by_call) == {calls[1]["id"], calls[2]["id"]}  # the rejected call never ran
    assert (by_call[calls[1]["id"]]["exit_code"], by_call[calls[2]["id"]]["exit_code"]) == (0, 3)
    assert by_call[calls[1]["id"]]["command"] == "sh -c 'echo hello'"
    assert by_call[calls[1]["id"]]["completion"] == "completed"
    assert _blob(run, by_call[calls[1]["id"]]["output_blob"]) == b"hello\n"
    workspace = next(e for e in events if e["kind"] == "workspace.created")
    assert {r["workspace_id"] for r in receipts} == {workspace["workspace_id"]}
    # Each command comes after its call and before its result, as it ran.
    position = {e["id"]: i for i, e in enumerate(events)}
    for call in calls[1:3]:
        receipt = by_call[call["id"]]
        assert position[call["id"]] < position[receipt["id"]] < position[results[call["id"]]["id"]]

    approvals = {e["subject"]: e for e in events if e["kind"] == "approval.recorded"}
    assert set(approvals) == {c["id"] for c in calls}
    assert approvals[calls[0]["id"]]["actor_role"] == "auto"
    assert [approvals[c["id"]]["decision"] for c in calls] == ["approved", "approved", "approved", "rejected"]
    assert {a["origin"] for a in approvals.values()} == {"simulated"}
    assert approvals[calls[3]["id"]]["rationale"] == "No deletions."
    assert {a["run"] for a in approvals.values()} == {run.run["id"]}

    (claim,) = [e for e in events if e["kind"] == "account.claim"]
    assert claim["text"] == "Scorer match scored C (answer: 3)"
    assert claim["claim_kind"] == "other"


def test_it_reports_what_it_mapped_and_what_it_kept_unmapped(logs: dict[str, Path]) -> None:
    run = _by_id(convert_inspect_log(logs["eval"].read_bytes()))["inspect-adder-2-e2"]
    report = run.report.to_json()
    assert report["format"] == "inspect-eval"
    assert report["mapped"]["model event -> model.proposal"] == 5
    assert report["mapped"]["tool event -> tool.call"] == 4
    assert report["mapped"]["tool event -> tool.result"] == 4
    assert report["mapped"]["approval event -> approval.recorded"] == 4
    assert report["mapped"]["score event -> account.claim"] == 1
    # Two shell commands plus the probe Inspect's local sandbox runs at the sample's start.
    assert report["mapped"]["sandbox exec event -> command.receipt"] == 3
    assert report["unmapped"]["span_begin event"] == report["unmapped"]["span_end event"] > 0
    assert report["unmapped"]["state event"] >= 1
    assert any(digest_bytes(logs["eval"].read_bytes()) in note for note in report["notes"])


def test_a_sample_that_errors_fails_its_run(logs: dict[str, Path], tmp_path: Path) -> None:
    (run,) = convert_inspect_log(logs["broken"].read_bytes())
    events = _bundle(run, tmp_path / "b")
    (result,) = [e for e in events if e["kind"] == "tool.result"]
    assert result["outcome"] == "error"
    (state,) = [e for e in events if e["kind"] == "run.state"]
    assert state["state"] == "failed" and "the tool broke: on purpose" in state["reason"]
    assert events[-1]["kind"] == "attempt.ended" and events[-1]["outcome"] == "error"
    assert run.report.mapped["error event -> run.state failed"] == 1


def test_a_sample_stopped_by_a_limit_stops_its_run(logs: dict[str, Path], tmp_path: Path) -> None:
    (run,) = convert_inspect_log(logs["limited"].read_bytes())
    events = _bundle(run, tmp_path / "l")
    (state,) = [e for e in events if e["kind"] == "run.state"]
    assert state["state"] == "stopped" and state["reason"].startswith("message limit 3")
    assert events[-1]["outcome"] == "limit"


# ---------------------------------------------------------------------------------------------------- bad input


def _one_line_error(data: bytes, **caps: int) -> str:
    with pytest.raises(ConversionError) as caught:
        convert_inspect_log(data, **caps)
    message = str(caught.value)
    assert message and "\n" not in message
    return message


def test_a_truncated_eval_log_is_refused_in_one_line(logs: dict[str, Path]) -> None:
    data = logs["eval"].read_bytes()
    assert "truncated" in _one_line_error(data[: len(data) // 2])
    assert "truncated" in _one_line_error(data[:100])


def test_a_corrupt_member_is_refused(logs: dict[str, Path]) -> None:
    data = bytearray(logs["eval"].read_bytes())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as zf:
        info = next(i for i in zf.infolist() if i.filename.startswith("samples/"))
    local_extra = struct.unpack_from("<H", data, info.header_offset + 28)[0]
    start = info.header_offset + 30 + len(info.filename.encode()) + local_extra
    for i in range(start + 20, start + 60):
        data[i] ^= 0x5A
    assert "corrupt" in _one_line_error(bytes(data))


def test_files_that_are_not_inspect_logs_are_named_for_what_they_are(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("manifest.json", "{}")
    assert "zip archive without header.json" in _one_line_error(buf.getvalue())
    assert "JSON without the 'eval' object" in _one_line_error(b'{"resourceSpans": []}')
    assert "neither a zip" in _one_line_error(b"hello")
    # Recognised by its opening keys, refused when the rest is not an EvalLog.
    assert "not valid JSON" in _one_line_error(b'{"version": 2, "eval": {"task": "x"}, "samples": [')
    assert "holds no samples" in _one_line_error(b'{"version": 2, "eval": {"task": "x"}, "samples": []}')


def _zip_with_sample(sample: bytes, *, compression: int) -> bytes:
    header = json.dumps({"version": 2, "status": "success", "eval": {"task": "bomb", "model": "m"}}).encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compression) as zf:
        zf.writestr("header.json", header)
        zf.writestr("samples/bomb_epoch_1.json", sample)
    return buf.getvalue()


def test_a_member_declaring_more_than_the_cap_is_refused_before_it_is_read() -> None:
    data = _zip_with_sample(b"0" * (2 << 20), compression=zipfile.ZIP_DEFLATED)
    message = _one_line_error(data, max_member_bytes=1 << 20)
    assert "declares 2097152 bytes unpacked, more than 1048576" in message


def test_a_zstd_member_that_lies_about_its_size_stops_at_the_cap() -> None:
    # Inspect's own zstd support for zipfile (a dev dependency, as Inspect is).
    import zipfile_zstd  # type: ignore[import-untyped]  # noqa: F401

    data = bytearray(_zip_with_sample(b"0" * (8 << 20), compression=93))
    # Patch the member's declared size down to 100 bytes, in its local header and in the central directory.
    name = b"samples/bomb_epoch_1.json"
    local = data.index(b"PK\x03\x04")
    while data[local + 30 : local + 30 + len(name)] != name:
        local = data.index(b"PK\x03\x04", local + 4)
    struct.pack_into("<L", data, local + 22, 100)
    central = data.index(b"PK\x01\x02")
    while data[central + 46 : central + 46 + len(name)] != name:
        central = data.index(b"PK\x01\x02", central + 4)
    struct.pack_into("<L", data, central + 24, 100)
    assert "unpacks to more than 1048576 bytes" in _one_line_error(bytes(data), max_member_bytes=1 << 20)
    # Under the default cap the lie is caught by the size check.
    assert "not the 100 its zip entry declares" in _one_line_error(bytes(data))


@pytest.mark.seed("003", "The simulated world stayed independent")
def test_a_real_inspect_answers_claims_are_extracted_linked_to_its_test_receipts_and_judged(
    logs: dict[str, Path],
) -> None:
    """The "report" sample runs a passing focused unittest module, then a broad one that fails, and answers "All tests
    pass and the review request is ready. I sent the alert.": the claims are read from that answer, cite the two test
    receipts (not Inspect's own sandbox probe), and LIN008 finds the failure the account left out."""
    (run,) = convert_inspect_log(logs["report"].read_bytes())
    events = run.events
    receipts = [e for e in events if e["kind"] == "command.receipt" and "unittest" in e["command"]]
    assert [r["exit_code"] for r in receipts] == [0, 1]
    claims = [e for e in events if e["kind"] == "account.claim"]
    answer = next(e for e in events if e["id"] == claims[0]["extracted_from"])
    assert answer["kind"] == "model.proposal"
    assert [(c["claim_kind"], c["text"], c["supports"]) for c in claims] == [
        ("validation", "All tests pass and the review request is ready.", [r["id"] for r in receipts]),
        ("completion", "All tests pass and the review request is ready.", [r["id"] for r in receipts]),
        ("effect", "I sent the alert.", []),  # the run holds nothing about an alert: cited as nothing
    ]
    for claim in claims:
        start, end = claim["span"]
        assert answer["proposal"]["text"][start:end] == claim["text"]
        assert claim["origin"] == "extracted"
    found = {(f.code, f.from_, f.to) for f in check_events(run.run, events)}
    assert ("LIN008", claims[0]["id"], receipts[1]["id"]) in found
    assert ("LIN008", claims[1]["id"], receipts[1]["id"]) in found
    assert not any(f[1] == claims[2]["id"] for f in found)  # effect claims are not LIN008's
