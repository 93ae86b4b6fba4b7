"""Claims extracted from a final answer's prose (n17q_engine/claim_extraction.py, seed 003): the rules on constructed
texts, and the real producer traces of tests/data/producers, whose final answer says "no new alert sent"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from n17q_engine.claim_extraction import claim_events, extract_claims
from n17q_engine.formats.otlp import convert_otlp
from n17q_engine.lineage import check_events

PRODUCERS = Path(__file__).resolve().parent.parent / "data" / "producers"


def _kinds(text: str) -> list[tuple[str, str, str | None, str]]:
    return [(c.claim_kind, c.text, c.about, c.polarity) for c in extract_claims(text)]


@pytest.mark.seed("003", "The simulated world stayed independent")
def test_it_reads_the_seeds_report_as_a_validation_and_a_completion_claim() -> None:
    text = "The report said the patch passed tests and the review request was ready."
    sentence = text
    assert _kinds(text) == [
        ("validation", sentence, "tests", "affirmed"),
        ("completion", sentence, "review request", "affirmed"),
    ]
    claim = extract_claims("Done with the fix. " + text)[0]
    assert (claim.start, claim.end) == (19, 19 + len(text))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("All tests pass.", [("validation", "All tests pass.", "tests", "affirmed")]),
        ("Ran pytest: 12 passed, 0 failed.", [("validation", "Ran pytest: 12 passed, 0 failed.", "tests", "affirmed")]),
        ("I sent the alert.", [("effect", "I sent the alert.", "alert", "affirmed")]),
        ("I didn't send the email.", [("effect", "I didn't send the email.", "email", "denied")]),
        ("The task is complete!", [("completion", "The task is complete!", "task", "affirmed")]),
        # Reporting failure is no claim of green; weather is no claim at all.
        ("Not all tests pass.", []),
        ("Tests: 3 passed, 1 failed.", []),
        ("Oslo: storm tomorrow (4/-2 C). Atlantis: no forecast available.", []),
        ("", []),
    ],
)
def test_it_extracts_only_what_a_rule_matches(text: str, expected: list[tuple[str, str, str | None, str]]) -> None:
    assert _kinds(text) == expected


def _events(answer: str) -> list[dict]:
    at = {"logical": "2026-01-01T00:00:00Z", "wall": "2026-01-01T00:00:00Z"}
    base: list[dict[str, Any]] = [
        {"kind": "attempt.started", "number": 1, "reason": "r", "parent_attempt_id": None},
        {
            "kind": "workspace.created",
            "workspace_id": "ws-1",
            "base_digest": "sha256:aa",
            "overlay_digest": "sha256:bb",
            "environment_revision": "env-1",
            "derived_from": None,
        },
        {
            "kind": "command.receipt",
            "call_id": None,
            "workspace_id": "ws-1",
            "command": "pytest tests/focused",
            "suites": ["focused"],
            "pre_tree": "sha256:t1",
            "post_tree": "sha256:t1",
            "environment_revision": "env-1",
            "completion": "completed",
            "exit_code": 0,
            "results": {"passed": 3, "failed": 0, "skipped": 0},
            "output_blob": None,
        },
        {
            "kind": "command.receipt",
            "call_id": None,
            "workspace_id": "ws-1",
            "command": "pytest tests",
            "suites": ["broad"],
            "pre_tree": "sha256:t1",
            "post_tree": None,
            "environment_revision": "env-1",
            "completion": "partial",
            "exit_code": None,
            "results": {"passed": 10, "failed": 0, "skipped": 0},
            "output_blob": None,
        },
        {
            "kind": "command.receipt",
            "call_id": None,
            "workspace_id": "ws-1",
            "command": "ls",
            "suites": [],
            "pre_tree": "sha256:t1",
            "post_tree": "sha256:t1",
            "environment_revision": "env-1",
            "completion": "completed",
            "exit_code": 0,
            "results": {},
            "output_blob": None,
        },
        {
            "kind": "tool.call",
            "tool": "create_review_request",
            "contract_revision": 1,
            "request": {},
            "request_digest": "sha256:cc",
            "proposal_id": None,
            "workspace_id": "ws-1",
        },
        {
            "kind": "model.proposal",
            "context_digest": "sha256:dd",
            "proposal": {"type": "message", "text": answer},
            "accepted": True,
        },
    ]
    out = []
    for seq, event in enumerate(base, start=1):
        out.append({"seq": seq, "id": f"e{seq}", "at": at, "attempt": "a1", **event})
    return out


@pytest.mark.seed("003", "The simulated world stayed independent")
def test_extracted_claims_link_to_the_receipts_they_speak_about_and_lineage_judges_them() -> None:
    events = _events("I fixed it. All tests pass and the review request is ready.")
    found = claim_events(events)
    assert [(c["claim_kind"], c["supports"]) for c in found] == [
        ("validation", ["e3", "e4"]),  # the test receipts; `ls` is none
        ("completion", ["e3", "e4", "e6"]),  # and the review request's tool call
    ]
    assert {(c["origin"], c["extracted_from"], tuple(c["span"])) for c in found} == {("extracted", "e7", (12, 59))}
    claims = [
        {"seq": 8 + i, "id": f"c{i}", "at": events[0]["at"], "attempt": "a1", "kind": "account.claim", **fields}
        for i, fields in enumerate(found)
    ]
    findings = check_events({"id": "run-x"}, [*events, *claims])
    # The broad run never completed: both claims rest on partial output, as a stated claim would.
    assert {(f.code, f.from_, f.to) for f in findings} == {("LIN008", "c0", "e4"), ("LIN008", "c1", "e4")}


def test_a_final_answer_without_claims_yields_none_and_an_earlier_message_is_not_read() -> None:
    assert claim_events(_events("Oslo: storm tomorrow.")) == []
    events = _events("All tests pass.")
    events.append({**events[-1], "seq": 8, "id": "e8", "proposal": {"type": "message", "text": None}})
    assert claim_events(events) == []  # the final answer recorded no text: nothing is guessed from before it


@pytest.mark.seed("003", "The simulated world stayed independent")
@pytest.mark.parametrize(
    ("name", "content_type"),
    [
        ("genai-openai.otlp.json", "application/json"),
        ("genai-openai.otlp.pb", "application/x-protobuf"),
        ("openinference-openai.otlp.json", "application/json"),
        ("openinference-langchain.otlp.json", "application/json"),
    ],
)
def test_real_producer_traces_get_the_effect_claim_of_their_final_answer(name: str, content_type: str) -> None:
    (run,) = convert_otlp((PRODUCERS / name).read_bytes(), content_type=content_type)
    claims = [e for e in run.events if e["kind"] == "account.claim"]
    assert len(claims) == 1
    claim = claims[0]
    answer = next(e for e in run.events if e["id"] == claim["extracted_from"])
    start, end = claim["span"]
    assert answer["proposal"]["text"][start:end] == claim["text"] == "no new alert sent."
    assert (claim["claim_kind"], claim["polarity"], claim["origin"]) == ("effect", "denied", "extracted")
    assert claim["seq"] == answer["seq"] + 1
    # It cites what the agent saw of the alerts: the list_alerts tool's result.
    (support,) = claim["supports"]
    result = next(e for e in run.events if e["id"] == support)
    call = next(e for e in run.events if e["id"] == result["call_id"])
    assert (result["kind"], call["tool"]) == ("tool.result", "list_alerts")
    assert json.loads(json.dumps(claim))  # plain JSON, as the bundle holds it
    assert run.report.mapped["final answer -> account.claim (extracted)"] == 1
