"""The demo's recorded runs: valid bundles, deterministic, and telling the seed stories the checker can see."""

from __future__ import annotations

import io

import pytest

from n17q_demo.stories import StoryBundle, demo_bundles, write_bundle
from n17q_engine import bundle
from n17q_engine.canonical import canonical_json, digest_bytes, evidence_set_digest, request_digest
from n17q_engine.lineage import check_events

from .fresh import run_fresh

BUNDLES = demo_bundles()
BY_ID = {b.manifest["run"]["id"]: b for b in BUNDLES}


def _of_kind(b: StoryBundle, kind: str) -> list[dict]:
    return [e for e in b.events if e["kind"] == kind]


def _one(b: StoryBundle, kind: str) -> dict:
    (event,) = _of_kind(b, kind)
    return event


def _by_id(b: StoryBundle) -> dict[str, dict]:
    return {e["id"]: e for e in b.events}


def _snapshot(bundles: list[StoryBundle]) -> bytes:
    return canonical_json(
        [
            {
                "story": b.story,
                "title": b.title,
                "manifest": b.manifest,
                "events": b.events,
                "blobs": {d: data.hex() for d, data in b.blobs.items()},
                "expected": sorted(b.expected_codes),
            }
            for b in bundles
        ]
    )


def test_it_lists_the_runs_of_the_three_stories_parents_first():
    assert list(BY_ID) == [
        "run-003-review-request",
        "run-001-recorded",
        "run-001-naive-replay",
        "run-000-recorded",
        "run-000-fail-open-replay",
    ]
    assert {b.story for b in BUNDLES} == {"000_fbd054b208c5f58c", "001_c6aee59ec1eb4bb8", "003_1dab681921caa907"}
    seen = set()
    for b in BUNDLES:
        parent = b.manifest["run"]["parent_run"]
        assert parent is None or parent in seen
        seen.add(b.manifest["run"]["id"])
        assert b.title and "\n" not in b.title


SNAPSHOT_DIGEST = """
from n17q_engine.canonical import digest_bytes
from n17q_demo.stories import demo_bundles
from tests.engine.test_stories import _snapshot
print(digest_bytes(_snapshot(demo_bundles())))
"""


def test_it_is_deterministic_across_processes_and_hash_seeds():
    here = digest_bytes(_snapshot(demo_bundles()))
    assert run_fresh(SNAPSHOT_DIGEST, hash_seed=1) == here
    assert run_fresh(SNAPSHOT_DIGEST, hash_seed=2) == here


@pytest.mark.parametrize("run_id", list(BY_ID))
def test_it_round_trips_through_a_bundle_directory(run_id, tmp_path):
    b = BY_ID[run_id]
    root = write_bundle(b, tmp_path / run_id)
    manifest = bundle.parse_manifest((root / "manifest.json").read_bytes())
    assert manifest.run == b.manifest["run"]
    found = bundle.verify_blobs(root, manifest)
    assert set(found) == set(b.blobs)
    with open(root / "events.jsonl", "rb") as fh:
        events = [event for _, event in bundle.iter_event_lines(fh)]
    assert events == b.events


def test_it_refuses_to_write_into_a_directory_that_holds_something(tmp_path):
    (tmp_path / "stray").write_text("x")
    with pytest.raises(FileExistsError):
        write_bundle(BUNDLES[0], tmp_path)


@pytest.mark.parametrize("run_id", list(BY_ID))
def test_every_event_is_valid_on_its_own_and_in_order(run_id):
    b = BY_ID[run_id]
    lines = b"".join(canonical_json(e) + b"\n" for e in b.events)
    assert [e for _, e in bundle.iter_event_lines(io.BytesIO(lines))] == b.events
    assert [e["seq"] for e in b.events] == list(range(1, len(b.events) + 1))
    previous = None
    for e in b.events:
        assert e["id"].startswith("e-")
        assert "attempt" in e
        logical, wall = bundle.parse_iso(e["at"]["logical"]), bundle.parse_iso(e["at"]["wall"])
        assert e["at"]["logical"].endswith("Z") and e["at"]["wall"].endswith("Z")
        assert logical != wall, f"{e['id']}: scenario time and recording time should be told apart"
        if previous is not None:
            assert logical >= previous[0] and wall >= previous[1], e["id"]
        previous = (logical, wall)


@pytest.mark.parametrize("run_id", list(BY_ID))
def test_blobs_are_content_addressed_and_all_referenced(run_id):
    b = BY_ID[run_id]
    assert set(b.blobs) == set(b.manifest["blobs"])
    for digest, data in b.blobs.items():
        assert digest_bytes(data) == digest
        assert b.manifest["blobs"][digest]["size"] == len(data)
    referenced = {
        e.get("blob") or e.get("output_blob") for e in b.events if e["kind"] in ("tool.result", "command.receipt")
    }
    referenced |= {e["digest"] for e in _of_kind(b, "artifact.created")}
    assert referenced - {None} == set(b.blobs)


@pytest.mark.parametrize("run_id", list(BY_ID))
def test_tool_calls_carry_the_shared_fixture_key(run_id):
    for call in _of_kind(BY_ID[run_id], "tool.call"):
        assert call["request_digest"] == request_digest(call["request"])


def test_request_digest_is_the_one_the_example_bundle_records():
    assert request_digest({"request_id": "req-7781"}) == (
        "sha256:d0064125feea2092a54902591291a20cea6ad348d0db31dc7e270a343928c49e"
    )


@pytest.mark.parametrize("run_id", list(BY_ID))
def test_approvals_bind_their_intents_evidence_set(run_id):
    b = BY_ID[run_id]
    events = _by_id(b)
    for intent in _of_kind(b, "effect.intent"):
        approval = events[intent["approval_id"]]
        assert approval["subject"] == intent["id"]
        assert approval["evidence_set_digest"] == evidence_set_digest(intent["admission_ids"])


# --- 003 ----------------------------------------------------------------------------------------------------


def test_003_recovers_in_a_second_attempt_on_a_reconstructed_workspace():
    b = BY_ID["run-003-review-request"]
    run = b.manifest["run"]
    assert (run["environment"], run["mode"], run["scenario"]) == (
        "fixture",
        "recorded",
        {"name": "coding-review-request", "version": 1},
    )
    a1, a2 = _of_kind(b, "attempt.started")
    assert (a1["attempt"], a1["parent_attempt_id"]) == ("a1", None)
    assert (a2["attempt"], a2["parent_attempt_id"], a2["reason"]) == ("a2", "a1", "recovery after timeout")
    ws1, ws2 = _of_kind(b, "workspace.created")
    assert (ws1["workspace_id"], ws1["derived_from"], ws1["attempt"]) == ("ws-1", None, "a1")
    assert ws2["workspace_id"] == "ws-2" and ws2["attempt"] == "a2"
    assert ws2["derived_from"] == {"workspace_id": "ws-1", "relation": "reconstruct", "content_equal": True}
    assert ws1["overlay_files"] == ws2["overlay_files"] == ["docs/NOTES.md"]
    lifecycle = _one(b, "workspace.lifecycle")
    assert (lifecycle["workspace_id"], lifecycle["state"], lifecycle["cleanup_receipt_id"]) == (
        "ws-1",
        "uncertain",
        None,
    )


def test_003_broad_suite_failed_once_then_timed_out_with_termination_unknown():
    b = BY_ID["run-003-review-request"]
    focused, broad = _of_kind(b, "command.receipt")
    assert (focused["workspace_id"], focused["completion"], focused["exit_code"]) == ("ws-1", "completed", 0)
    assert focused["results"]["failed"] == 0
    assert (broad["workspace_id"], broad["completion"], broad["exit_code"]) == ("ws-1", "termination_unknown", None)
    assert broad["results"]["failed"] == 1 and broad["results"]["failing_suites"] == ["integration"]
    assert broad["pre_tree"] == focused["pre_tree"]
    output = b.blobs[broad["output_blob"]].decode()
    assert output.index("passed") < output.index("FAILED") < output.index("time budget")


def test_003_request_uses_workspace_ones_admission_for_workspace_twos_artifact():
    b = BY_ID["run-003-review-request"]
    events = _by_id(b)
    artifact = _one(b, "artifact.created")
    assert (artifact["artifact_id"], artifact["workspace_id"]) == ("art-2", "ws-2")
    assert not set(artifact["files"]) & {"docs/NOTES.md"}
    intent = _one(b, "effect.intent")
    assert intent["artifact_id"] == "art-2" and intent["namespace"] != "live"
    (admission_id,) = intent["admission_ids"]
    admission = events[admission_id]
    assert (admission["purpose"], admission["artifact_id"], admission["workspace_id"]) == (
        "validation:focused",
        "art-2",
        "ws-1",
    )
    assert admission["tree_digest"] != artifact["tree_digest"] and admission["compatibility"] is None
    decision = _one(b, "policy.decision")
    assert decision["outcome"] == "allow" and decision["required"] == ["validation:focused", "validation:broad"]
    admitted_purposes = {e["purpose"] for e in _of_kind(b, "evidence.admitted") if e["decision"] == "admitted"}
    assert "validation:broad" not in admitted_purposes
    claim = _one(b, "account.claim")
    assert claim["claim_kind"] == "validation" and claim["scope"] == ["validation:focused", "validation:broad"]
    assert [events[s]["kind"] for s in claim["supports"]] == ["command.receipt"]
    assert _one(b, "effect.execution")["connection"] == "fixture:review-service"


# --- 001 ----------------------------------------------------------------------------------------------------


def test_001_recorded_run_sent_one_email_after_a_reviewer_narrowed_the_audience():
    b = BY_ID["run-001-recorded"]
    human = _one(b, "human.input")
    assert human["action"] == "reject_audience"
    outcomes = [e["outcome"] for e in _of_kind(b, "policy.decision")]
    assert outcomes == ["needs_approval", "allow"]
    approval = _one(b, "approval.recorded")
    assert (approval["origin"], approval["run"], approval["environment"]) == ("human", "run-001-recorded", "live")
    assert _one(b, "effect.intent")["namespace"] == "live"
    assert [e["outcome"] for e in _of_kind(b, "effect.execution")] == ["acknowledged"]
    assert len([e for e in _of_kind(b, "world.transition") if e["resource"].startswith("mailbox:")]) == 1


def test_001_naive_replay_reused_the_historical_approval_and_the_live_provider():
    original, replay = BY_ID["run-001-recorded"], BY_ID["run-001-naive-replay"]
    run = replay.manifest["run"]
    assert (run["environment"], run["mode"], run["parent_run"]) == ("sandbox", "rerun", "run-001-recorded")
    assert not _of_kind(replay, "human.input")
    approval = _one(replay, "approval.recorded")
    assert (approval["origin"], approval["run"], approval["environment"]) == ("historical", "run-001-recorded", "live")
    intent, original_intent = _one(replay, "effect.intent"), _one(original, "effect.intent")
    assert intent["namespace"] == "live"
    assert intent["idempotency_key"] == original_intent["idempotency_key"]
    assert _one(replay, "effect.execution")["connection"] == "smtp-provider"
    assert {e["origin"] for e in _of_kind(replay, "tool.result")} == {"historical"}


# --- 000 ----------------------------------------------------------------------------------------------------


def test_000_fail_open_replay_answered_the_missing_fixture_from_the_live_service():
    recorded, replay = BY_ID["run-000-recorded"], BY_ID["run-000-fail-open-replay"]
    assert replay.manifest["run"]["parent_run"] == "run-000-recorded"
    assert replay.manifest["run"]["environment"] == "fixture"
    before = {e["call_id"]: (e["origin"], e["outcome"]) for e in _of_kind(recorded, "tool.result")}
    after = {e["call_id"]: (e["origin"], e["outcome"]) for e in _of_kind(replay, "tool.result")}
    assert list(before.values()) == [("historical", "ok"), ("historical", "not_found")]
    assert list(after.values()) == [("fixture", "ok"), ("live", "ok")]
    assert not _of_kind(replay, "fixture.missing")


# --- the checker agrees -------------------------------------------------------------------------------------


@pytest.mark.parametrize("run_id", list(BY_ID))
def test_the_lineage_checker_finds_exactly_the_storys_codes(run_id):
    b = BY_ID[run_id]
    findings = check_events(b.manifest["run"], b.events)
    assert {f.code for f in findings} == b.expected_codes, [(f.code, f.from_, f.to, f.message) for f in findings]
