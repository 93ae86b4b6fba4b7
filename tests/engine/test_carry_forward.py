"""What carried forward into a retry and what became stale (n17q_engine/carry_forward.py, seed 003), on the demo's
story 003 run and on a constructed retry that reran its tests."""

from __future__ import annotations

from typing import Any

import pytest

from n17q_demo.stories import demo_bundles
from n17q_engine.facts import run_facts


def _story_003() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    (bundle,) = [b for b in demo_bundles() if b.manifest["run"]["id"] == "run-003-review-request"]
    return bundle.manifest["run"], bundle.events


@pytest.mark.seed("003", "Retry preserved task and changed attempt")
def test_the_retry_of_story_003_explains_what_carried_forward_and_what_went_stale() -> None:
    run, events = _story_003()
    retries = run_facts(run, events)["retries"]
    (retry,) = retries["retries"]
    assert (retry["attempt"], retry["from_attempt"], retry["started"]) == ("a2", "a1", "e-003-a2-start")
    by_observation = {item["observation"]: item for item in retry["items"]}
    focused = by_observation["e-003-focused-observed"]
    # Attempt a1's focused result was admitted again for workspace two's artifact with no rule, from a workspace that
    # had become uncertain: carried forward, unjustified, and stale.
    assert focused["status"] == "carried_forward_unjustified"
    (carried,) = focused["carried"]
    assert (carried["admission"], carried["artifact"], carried["rule"], carried["rule_holds"]) == (
        "e-003-focused-admitted",
        "art-2",
        None,
        False,
    )
    assert focused["stale"] == {"event": "e-003-ws-1-uncertain", "why": "workspace ws-1 became uncertain"}
    assert "no compatibility rule is recorded" in focused["explanation"]
    # The timed-out broad run was kept for diagnosis in a1, never carried forward nor rerun: it needs a rerun.
    broad = by_observation["e-003-broad-observed"]
    assert (broad["status"], broad["admissions"], broad["carried"]) == (
        "needs_rerun",
        ["e-003-broad-admitted-diagnosis"],
        [],
    )
    assert "validation:broad" in broad["explanation"] and "e-003-ws-1-uncertain" in broad["explanation"]
    assert retry["counts"] == {"carried_forward_unjustified": 1, "needs_rerun": 1}


def _event(seq: int, eid: str, kind: str, attempt: str, **fields: Any) -> dict[str, Any]:
    at = {"logical": "2026-01-01T00:00:00Z", "wall": "2026-01-01T00:00:00Z"}
    return {"seq": seq, "id": eid, "kind": kind, "at": at, "attempt": attempt, **fields}


def _receipt(seq: int, eid: str, attempt: str, workspace: str, failed: int) -> dict[str, Any]:
    return _event(
        seq,
        eid,
        "command.receipt",
        attempt,
        call_id=None,
        workspace_id=workspace,
        command="pytest tests/unit",
        suites=["unit"],
        pre_tree="sha256:t",
        post_tree="sha256:t",
        environment_revision="env",
        completion="completed",
        exit_code=1 if failed else 0,
        results={"passed": 3, "failed": failed, "skipped": 0},
        output_blob=None,
    )


@pytest.mark.seed("003", "Retry preserved task and changed attempt")
def test_a_retry_that_reran_its_tests_and_kept_a_source_says_so() -> None:
    events = [
        _event(1, "a1-start", "attempt.started", "a1", number=1, reason="task", parent_attempt_id=None),
        _event(2, "read", "tool.result", "a1", call_id="x", origin="fixture", outcome="ok", blob=None, absent={}),
        _event(
            3,
            "read-obs",
            "evidence.observed",
            "a1",
            source="read",
            workspace_id="ws-1",
            tree_digest="sha256:t",
            scope=["diagnosis"],
        ),
        _receipt(4, "unit-1", "a1", "ws-1", failed=1),
        _event(
            5,
            "unit-obs",
            "evidence.observed",
            "a1",
            source="unit-1",
            workspace_id="ws-1",
            tree_digest="sha256:t",
            scope=["validation:unit"],
        ),
        _event(6, "a2-start", "attempt.started", "a2", number=2, reason="retry", parent_attempt_id="a1"),
        _receipt(7, "unit-2", "a2", "ws-2", failed=0),
    ]
    (retry,) = run_facts({"id": "run-r"}, events)["retries"]["retries"]
    statuses = {item["observation"]: (item["status"], item["rerun"]) for item in retry["items"]}
    assert statuses == {
        "read-obs": ("still_relevant", None),
        "unit-obs": ("rerun", {"receipt": "unit-2", "completion": "completed", "failed": 0}),
    }
    # One attempt: nothing retried, nothing to explain.
    assert run_facts({"id": "run-r"}, events[:5])["retries"] == {"retries": [], "count": 0, "truncated": False}
