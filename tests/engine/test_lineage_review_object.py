"""Issue 34 point 4: an approval binds the whole review object (seed 003), not only its admissions' ids.

Story-003-like graphs: a workspace, its focused and broad receipts admitted for its artifact, the policy's decision,
the reviewer's approval, the intent, and then, before the intent is acted on, one thing changes.
"""

from __future__ import annotations

import pytest

from n17q_engine.bundle import BundleError, validate_event
from n17q_engine.facts import run_facts
from n17q_engine.lineage import Finding, LineageGraph, check_events
from n17q_engine.lineage.review import review_digest, review_object

from .eventlib import EventLog, tree

REQUIRED = ["validation:focused", "validation:broad"]


def story(**run) -> tuple[EventLog, dict[str, str]]:
    """Up to the intent (not yet executed): decision, approval, intent, story 003's order."""
    log = EventLog(policy_revision="policy@7", **run)
    log.attempt()
    log.workspace("ws1", id="ws1-created")
    log.change("ws1", "t1")
    rf, _, af = log.validation("ws1", "t1", "validation:focused", "art1")
    rb, _, ab = log.validation("ws1", "t1", "validation:broad", "art1")
    log.artifact("art1", "ws1", "t1", id="art1-created")
    log.decision("int1", [af, ab], REQUIRED, id="decision", policy_revision="policy@7")
    log.approval("int1", [af, ab], id="approval")
    log.intent("art1", [af, ab], id="int1", key="key-int1", approval_id="approval", destination="review:repo/main")
    return log, {"focused": af, "broad": ab, "focused_receipt": rf, "broad_receipt": rb}


def lin004(log: EventLog) -> list[Finding]:
    return [f for f in check_events(log.run, log.events) if f.code == "LIN004"]


def graph_of(log: EventLog) -> LineageGraph:
    g = LineageGraph(log.run)
    for event in log.events:
        g.add(event)
    return g


def test_nothing_changed_between_approval_and_action_binds():
    log, _ = story()
    log.execution("int1", id="execution")
    assert lin004(log) == []


def test_a_change_after_the_action_does_not_unbind_what_was_done():
    log, _ = story()
    log.execution("int1", id="execution")
    log.decision("int1", [], REQUIRED, id="decision-2", policy_revision="policy@8")
    assert lin004(log) == []


def test_a_new_policy_revision_after_the_approval_invalidates_it():
    log, ids = story()
    log.decision("int1", [ids["focused"], ids["broad"]], REQUIRED, id="decision-2", policy_revision="policy@8")
    log.execution("int1", id="execution")
    found = lin004(log)
    assert [(f.from_, f.to) for f in found] == [("int1", "approval")]
    assert "no longer binds" in found[0].message
    assert "policy revision policy@7 → policy@8" in found[0].message


def test_a_needs_approval_decision_turned_allow_by_the_approval_is_not_a_change():
    # Story 001's order: the policy asks for approval, the reviewer approves, the policy allows at the same revision.
    log = EventLog(policy_revision="policy@7")
    log.attempt()
    log.workspace("ws1")
    log.change("ws1", "t1")
    _, _, af = log.validation("ws1", "t1", "validation:focused", "art1")
    log.artifact("art1", "ws1", "t1")
    log.decision("int1", [af], ["validation:focused"], outcome="needs_approval", policy_revision="policy@7")
    log.approval("int1", [af], id="approval")
    log.decision("int1", [af], ["validation:focused"], outcome="allow", policy_revision="policy@7")
    log.intent("art1", [af], id="int1", approval_id="approval")
    log.execution("int1")
    assert lin004(log) == []


def test_a_changed_destination_names_what_differs_from_what_was_approved():
    log, ids = story()
    # The harness declares the request again, to another branch, on the same approval.
    log.intent(
        "art1",
        [ids["focused"], ids["broad"]],
        id="int2",
        key="key-int2",
        approval_id="approval",
        destination="review:repo/release",
    )
    log.execution("int2", id="execution")
    found = [f for f in lin004(log) if f.from_ == "int2"]
    assert len(found) == 1
    assert "approves int1, not intent int2" in found[0].message
    assert "destination changed: review:repo/main → review:repo/release" in found[0].message
    assert "idempotency key changed: key-int1 → key-int2" in found[0].message


def test_a_changed_artifact_names_both_artifacts():
    log, ids = story()
    log.change("ws1", "t2")
    log.artifact("art2", "ws1", "t2", digest=tree("artifact-2"))
    log.intent(
        "art2", [ids["focused"], ids["broad"]], id="int2", key="key-int2", approval_id="approval",
        destination="review:repo/main",
    )  # fmt: skip
    log.execution("int2", id="execution")
    found = [f for f in lin004(log) if f.from_ == "int2"]
    assert len(found) == 1
    assert "artifact art1 → art2" in found[0].message


def test_an_artifact_created_after_the_approval_was_not_what_the_reviewer_saw():
    log = EventLog(policy_revision="policy@7")
    log.attempt()
    log.workspace("ws1")
    log.change("ws1", "t1")
    _, _, af = log.validation("ws1", "t1", "validation:focused", "art1")
    log.approval("int1", [af], id="approval")
    log.artifact("art1", "ws1", "t1")
    log.intent("art1", [af], id="int1", approval_id="approval")
    log.execution("int1")
    found = lin004(log)
    assert len(found) == 1
    assert "artifact art1 was created after the approval" in found[0].message


def test_a_rerun_that_replaces_an_admitted_receipt_invalidates_the_approval():
    log, ids = story()
    rerun = log.receipt("ws1", "t1", suites=("broad",), failed=1, exit_code=1, id="broad-rerun")
    log.execution("int1", id="execution")
    found = lin004(log)
    assert len(found) == 1
    message = found[0].message
    assert f"receipt {ids['broad_receipt']} replaced by {rerun} for validation:broad" in message
    assert "failed 0 → 1" in message and "exit code 0 → 1" in message


def test_a_workspace_tree_change_after_the_approval_invalidates_it():
    log, _ = story()
    log.change("ws1", "t2", id="ws1-t2")
    log.execution("int1", id="execution")
    found = lin004(log)
    assert len(found) == 1
    short = lambda t: t[:19]  # noqa: E731 (sha256: and 12 hex digits)
    assert f"workspace ws1 changed: tree {short(tree('t1'))} → {short(tree('t2'))}" in found[0].message


def test_a_superseded_admission_after_the_approval_invalidates_it():
    log, ids = story()
    log.emit("evidence.superseded", admission_id=ids["broad"], id="broad-superseded")
    log.execution("int1", id="execution")
    found = lin004(log)
    assert len(found) == 1
    assert f"admission {ids['broad']} superseded by broad-superseded" in found[0].message


def test_the_final_gate_sees_the_change_before_any_execution():
    log, ids = story()
    log.decision("int1", [ids["focused"], ids["broad"]], REQUIRED, id="decision-2", policy_revision="policy@8")
    codes = [f.code for f in graph_of(log).intent_findings("int1")]
    assert codes == ["LIN004"]


def test_the_evidence_set_digest_check_is_unchanged():
    log, ids = story()
    log.intent("art1", [ids["focused"]], id="int2", key="k2", approval_id="approval", destination="review:repo/main")
    found = [f for f in lin004(log) if f.from_ == "int2"]
    assert any("binds evidence set" in f.message and "hash to" in f.message for f in found)


# ---------------------------------------------------------------- the approval's recorded review digest


def with_review_digest(log: EventLog, digest: str) -> None:
    for i, event in enumerate(log.events):
        if event["id"] == "approval":
            log.events[i] = validate_event({**event, "review_digest": digest}, line=i + 1)


def engine_digest(log: EventLog) -> str:
    g = graph_of(log)
    seq = g.seq_of("approval")
    assert seq is not None
    review = review_object(g, "int1", seq, g._approvals["approval"])
    assert review is not None
    return review_digest(review)


def test_a_matching_review_digest_binds():
    log, _ = story()
    log.execution("int1", id="execution")
    with_review_digest(log, engine_digest(log))
    assert lin004(log) == []


def test_a_mismatching_review_digest_is_lin004():
    log, _ = story()
    log.execution("int1", id="execution")
    with_review_digest(log, tree("what the approver saw"))
    found = lin004(log)
    assert len(found) == 1
    assert "the approver's view differed from the recorded graph" in found[0].message
    assert engine_digest(log) in found[0].message


def test_the_review_object_covers_the_receipts_content_and_the_effect():
    log, ids = story()
    g = graph_of(log)
    review = review_object(g, "int1")
    assert review is not None
    assert review["effect"]["destination"] == "review:repo/main"
    assert review["artifact"]["tree_digest"] == tree("t1")
    assert review["policy"] == {"policy_revision": "policy@7"}
    receipts = {e["admission_id"]: e["receipt"] for e in review["evidence"]}
    assert receipts[ids["broad"]]["id"] == ids["broad_receipt"]
    assert receipts[ids["broad"]]["post_tree"] == tree("t1")
    assert receipts[ids["broad"]]["completion"] == "completed"


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("review_digest", "sha256:XYZ", "field review_digest: must be sha256:<64 lowercase hex> or null"),
        ("review_digest", 7, "field review_digest"),
        ("expires_at", "tomorrow", "field expires_at: must be an ISO-8601 time with a timezone or null"),
    ],
)
def test_the_vocabulary_refuses_a_malformed_review_field_in_one_line(field, value, said):
    log, _ = story()
    approval = next(e for e in log.events if e["id"] == "approval")
    with pytest.raises(BundleError) as caught:
        validate_event({**approval, field: value}, line=9)
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_the_vocabulary_accepts_a_review_digest_and_an_expiry():
    log, _ = story()
    approval = next(e for e in log.events if e["id"] == "approval")
    event = validate_event({**approval, "review_digest": tree("x"), "expires_at": "2026-07-01T10:00:00Z"}, line=9)
    assert event["review_digest"] == tree("x")


# ---------------------------------------------------------------- the facts layer


def test_the_facts_carry_the_review_digest_and_whether_it_still_binds():
    log, ids = story()
    log.decision("int1", [ids["focused"], ids["broad"]], REQUIRED, id="decision-2", policy_revision="policy@8")
    log.execution("int1", id="execution")
    (item,) = run_facts(log.run, log.events)["approvals"]["items"]
    assert item["binds_evidence"] is True
    assert item["review_digest"] == engine_digest(log)
    assert item["still_binds"] is False
    assert item["review_changes"] == ["policy revision policy@7 → policy@8"]


def test_the_facts_of_an_untouched_approval_still_bind():
    log, _ = story()
    log.execution("int1", id="execution")
    (item,) = run_facts(log.run, log.events)["approvals"]["items"]
    assert item["still_binds"] is True and item["review_changes"] == []


@pytest.mark.parametrize(
    ("expires_at", "executed_at", "expired"),
    [
        ("2026-07-01T09:30:00Z", "2026-07-01T10:00:00Z", True),
        # Instants, not text: ".5Z" sorts before "Z" as text, yet half a second later.
        ("2026-07-01T09:30:00Z", "2026-07-01T09:30:00.5Z", True),
        ("2026-07-01T11:30:00+02:00", "2026-07-01T09:45:00Z", True),  # 09:30 UTC
        ("2026-07-01T09:30:00Z", "2026-07-01T09:30:00Z", False),  # the positive control: at the expiry, still valid
        ("2026-07-01T09:30:00Z", "2026-07-01T09:10:00Z", False),
    ],
)
def test_an_execution_after_the_approvals_expiry_is_lin004(expires_at, executed_at, expired):
    """Seed 003's review object carries an expiry: an approval used after it authorizes nothing."""
    log = EventLog(policy_revision="policy@7")
    log.attempt()
    log.workspace("ws1")
    log.change("ws1", "t1")
    _, _, af = log.validation("ws1", "t1", "validation:focused", "art1")
    log.artifact("art1", "ws1", "t1")
    log.decision("int1", [af], ["validation:focused"], policy_revision="policy@7")
    log.approval("int1", [af], id="approval", expires_at=expires_at)
    log.intent("art1", [af], id="int1", key="key-int1", approval_id="approval", destination="review:repo/main")
    log.execution("int1", id="execution", at={"logical": executed_at, "wall": executed_at})
    messages = [f.message for f in lin004(log)]
    said = [m for m in messages if "expired at" in m]
    assert bool(said) is expired, messages
    if expired:
        assert f"first executed at {executed_at}, after it" in said[0]
    # The facts say the same of the approval (one account on every page: the detail panel reads them).
    (approval,) = run_facts(log.run, log.events)["approvals"]["items"]
    assert approval["still_binds"] is not expired
    assert approval["executed_after_expiry"] == (executed_at if expired else None)
