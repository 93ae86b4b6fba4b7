"""An approval's review surface (n17q_engine/review_surface.py) and the decisions waiting on a person (facts)."""

from __future__ import annotations

from typing import Any

import pytest

from n17q_demo.stories import demo_bundles
from n17q_engine.facts import FactBuilder, run_facts
from n17q_engine.review_surface import review_surface

BY_ID = {b.manifest["run"]["id"]: b for b in demo_bundles()}


def _surface(run_id: str, event_id: str, extra: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The surface as the console builds it: the events up to the approval, and the intent it names if later."""
    b = BY_ID[run_id]
    events = [*b.events, *(extra or [])]
    at = next(e for e in events if e["id"] == event_id)
    builder = FactBuilder(b.manifest["run"])
    for e in events:
        if e["seq"] <= at["seq"]:
            builder.add(e)
    subject = at.get("subject")
    later = next((e for e in events if e["id"] == subject and e["kind"] == "effect.intent"), None)
    surface = review_surface(builder, event_id, later)
    assert surface is not None
    return surface


@pytest.mark.seed("003", "Human approval stopped being a ceremonial button")
def test_the_review_surface_shows_one_focused_pass_an_incomplete_broad_run_and_a_workspace_with_no_validation():
    s = _surface("run-003-review-request", "e-003-approval")
    required = {r["purpose"]: r for r in s["required"]}
    focused = required["validation:focused"]
    assert [e["receipt"]["completion"] for e in focused["admitted"]] == ["completed"]
    assert focused["admitted"][0]["receipt"]["workspace_id"] == "ws-1"
    broad = required["validation:broad"]
    assert broad["admitted"] == [] and broad["latest_receipt"]["completion"] == "termination_unknown"
    assert broad["latest_receipt"]["failed"] == 1
    assert s["unresolved"] == ["unit+contract+integration in ws-1 termination_unknown"]
    lineage = {w["id"]: w for w in s["workspaces"]}
    assert lineage["ws-2"]["derived_from"] == "ws-1" and lineage["ws-2"]["validations"] == []
    assert [v["status"] for v in lineage["ws-1"]["validations"]] == ["passed", "termination_unknown"]
    # The exact requested effect: the intent the approval names, declared after it (the engine's rule).
    assert s["effect"]["destination"] == "review-service:repo/main"
    assert s["intent_declared_at"] is not None and s["intent_declared_at"] > s["seq"]
    assert s["approval"]["binds_evidence"] is True


@pytest.mark.seed("001", "Approvals did not survive as authority")
@pytest.mark.seed("003", "Retry preserved task and changed attempt")
def test_the_review_surface_is_rebuilt_at_the_approval_and_a_historical_approval_is_read_only_evidence():
    b = BY_ID["run-003-review-request"]
    s = _surface("run-003-review-request", "e-003-approval")
    # The digest is the one the fact layer records for the approval: the same canonical object.
    facts = run_facts(b.manifest["run"], b.events)
    (item,) = [a for a in facts["approvals"]["items"] if a["id"] == "e-003-approval"]
    assert s["review_digest"] == item["review_digest"]
    # Events after the approval are not read: a later passing broad run in ws-2 changes nothing of the surface.
    last = b.events[-1]
    later = {
        **next(e for e in b.events if e["kind"] == "command.receipt" and e["id"] == "e-003-broad-receipt"),
        "id": "later-broad",
        "seq": last["seq"] + 1,
        "workspace_id": "ws-2",
        "completion": "completed",
        "results": {"passed": 40, "failed": 0, "skipped": 0},
        "exit_code": 0,
    }
    assert _surface("run-003-review-request", "e-003-approval", [later]) == s
    # In the naive replay the copied approval is historical: shown, with LIN005's reason, never authority.
    naive = _surface("run-001-naive-replay", "e-001-approval")
    assert naive["approval"]["origin"] == "historical"
    (why,) = naive["approval"]["not_authority"]
    assert "historical, in a rerun replay" in why and "read-only evidence" in why
    own = _surface("run-001-recorded", "e-001-approval")
    assert own["approval"]["not_authority"] == []


@pytest.mark.seed("001", "Approvals did not survive as authority")
def test_a_decision_that_needs_approval_waits_until_an_approval_of_its_own_run_answers_it():
    recorded, naive = BY_ID["run-001-recorded"], BY_ID["run-001-naive-replay"]
    answered = run_facts(recorded.manifest["run"], recorded.events)["approvals"]
    assert answered["asked"] == 1 and answered["pending_count"] == 0
    waiting = run_facts(naive.manifest["run"], naive.events)["approvals"]
    assert waiting["pending_count"] == 1
    (pending,) = waiting["pending"]
    assert pending["id"] == "e-001-policy-needs-approval" and pending["not_authority"] == ["e-001-approval"]
    # Cut before the reviewer's approval, the recorded run is waiting too.
    approval = next(e for e in recorded.events if e["id"] == "e-001-approval")
    before = run_facts(recorded.manifest["run"], [e for e in recorded.events if e["seq"] < approval["seq"]])
    assert [p["id"] for p in before["approvals"]["pending"]] == ["e-001-policy-needs-approval"]
