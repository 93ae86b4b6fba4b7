"""Issue 18, points 1, 3 and 4: branching from a recorded checkpoint, a human choice as the one variable, and a
denied effect that returns to planning. Every run here is the real engine on the demo stories' recorded runs
(n17q_demo.stories) and the seed scenario packages (n17q_demo.seed_scenarios)."""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import Any

import pytest

from n17q_engine.canonical import canonical_json
from n17q_engine.deciders import (
    DECIDERS,
    DENIAL_LIMIT,
    REASON_CHARS,
    Action,
    Activate,
    Claim,
    Decider,
    SourceRun,
    Stop,
    View,
    recorded,
)
from n17q_engine.lineage import check_events
from n17q_engine.package import PackageError, build_replay, build_scenario
from n17q_engine.replay import ReplayError, ReplayOutput
from tests.engine.fresh import run_fresh
from tests.engine.test_replay import BUNDLES, SEEDS, final, kinds, replay

STORY_003 = "run-003-review-request"
STORY_001 = "run-001-recorded"
A1 = "e-003-a1-checkpoint"


def checkpoints(run_id: str) -> list[str]:
    return ["start", *(e["id"] for e in BUNDLES[run_id].events if e["kind"] == "checkpoint")]


def branch(
    run_id: str,
    checkpoint: str,
    *,
    mode: str = "counterfactual",
    vary: dict | None = None,
    scenario: Any = None,
    replay_id: str = "replay-branch",
) -> tuple[ReplayOutput, list[dict]]:
    b = BUNDLES[run_id]
    name = {STORY_003: "coding-review-request", STORY_001: "email-delivery"}[run_id]
    pkg = build_replay(
        replay_id=replay_id,
        run_id=f"{run_id}~{mode}-b",
        mode=mode,
        vary=vary if vary is not None else ({"decider": "careful"} if mode == "counterfactual" else {}),
        decider="recorded",
        launched_at="2026-12-02T12:00:00Z",
        scenario=scenario or SEEDS[name],
        source_manifest=b.manifest,
        source_events=b"".join(canonical_json(e) + b"\n" for e in b.events),
        source_blobs=b.blobs,
        checkpoint=checkpoint,
    )
    return replay(pkg)


def split(log: list[dict], checkpoint: str) -> tuple[list[dict], list[dict]]:
    """The replay's events up to and including its branch checkpoint, and those after it."""
    if checkpoint == "start":
        return log[:2], log[2:]
    at = log[0]["segment"]["restored"]["checkpoint"]
    index = next(i for i, e in enumerate(log) if e["id"] == at)
    return log[: index + 1], log[index + 1 :]


# --- 1. branching from any recorded checkpoint ----------------------------------------------------------------


@pytest.mark.parametrize("checkpoint", checkpoints(STORY_003))
@pytest.mark.parametrize(("mode", "vary"), [("rerun", {}), ("counterfactual", {"decider": "careful"})])
def test_branching_from_each_checkpoint_of_story_003_twice_gives_byte_identical_logs_and_names_the_segment(
    checkpoint, mode, vary
):
    first, log = branch(STORY_003, checkpoint, mode=mode, vary=vary)
    second, _ = branch(STORY_003, checkpoint, mode=mode, vary=vary)
    assert first.to_wire() == second.to_wire()
    segment = log[0]["segment"]
    assert log[0]["kind"] == "replay.scope" and segment["from_checkpoint"] == checkpoint
    if checkpoint != "start":
        recorded_cp = next(e for e in BUNDLES[STORY_003].events if e["id"] == checkpoint)
        restored = segment["restored"]
        # the workspaces and budget are the recording's at that checkpoint; the clock and the world revision
        # are the fixture world's own, and the note says where they differ from what the recording wrote down
        assert restored["workspaces"] == recorded_cp["workspaces"] == segment["recorded"]["workspaces"]
        assert restored["budget"] == segment["recorded"]["budget"] == {"tokens": 18400}
        assert segment["recorded"]["before"] == {"event": "e-003-focused-observed", "kind": "evidence.observed"}
        assert {d.split(":")[0] for d in segment["differs"]} <= {"clock", "world_revision"}
        branch_cp = next(e for e in log if e["id"] == restored["checkpoint"])
        assert branch_cp["kind"] == "checkpoint" and branch_cp["workspaces"] == restored["workspaces"]
        assert "not evaluated" in segment["evaluated"]


BRANCH_DIGEST = """
from n17q_engine.canonical import digest_bytes
from tests.engine.test_replay_branch import branch
print(digest_bytes(branch("run-003-review-request", "e-003-a1-checkpoint")[0].to_wire()))
"""


def test_a_branch_replayed_in_two_fresh_interpreters_gives_byte_identical_logs():
    first = run_fresh(BRANCH_DIGEST, hash_seed=3)
    second = run_fresh(BRANCH_DIGEST, hash_seed=4)
    assert first == second and first.startswith("sha256:")


def test_careful_from_the_checkpoint_before_the_broad_suite_reruns_validation_in_workspace_two_and_stops():
    _out, log = branch(STORY_003, A1)
    history, segment = split(log, A1)

    # the history is the recording's decisions re-run, the decider takes over only after the checkpoint
    assert all(p["origin"] == "recorded" for p in kinds(history, "model.proposal"))
    assert [r["command"] for r in kinds(history, "command.receipt")] == ["pytest -q tests/test_adapter.py"]
    assert any(p["origin"] == "scripted:careful" for p in kinds(segment, "model.proposal"))
    ws2 = [r for r in kinds(segment, "command.receipt") if r["workspace_id"] == "ws-2"]
    assert [r["command"] for r in ws2] == ["pytest -q tests/test_adapter.py", "pytest -q tests"]
    assert ws2[-1]["results"]["failed"] == 1 and ws2[-1]["completion"] == "completed"
    assert kinds(log, "effect.intent") == []
    assert [t for t in kinds(log, "world.transition") if t["resource"].startswith("review-service:")] == []
    state = final(log)
    assert state["state"] == "stopped"
    assert "no request" in state["reason"] and "test_adapter_roundtrip_preserves_cursor" in state["reason"]


def test_the_variable_applies_from_the_checkpoint_only():
    # review-policy@7 (the recording's own) allows on one purpose: from the checkpoint, the request opens.
    _out, log = branch(STORY_003, A1, vary={"policy": "review-policy@7"})
    history, segment = split(log, A1)
    assert log[0]["policy_revision"] == "review-policy@7"
    assert {a["policy_revision"] for a in kinds(history, "evidence.admitted")} <= {"review-policy@8"}
    assert {a["policy_revision"] for a in kinds(segment, "evidence.admitted")} == {"review-policy@7"}
    assert len(kinds(segment, "effect.intent")) == 1


@pytest.mark.parametrize(
    ("vary", "reason"),
    [
        # 18,400 tokens were spent before the checkpoint: the restored budget is already over a 10,000 limit
        ({"budget.tokens": "10000"}, "budget exhausted at the checkpoint: tokens 18400 > 10000 spent in the restored"),
        # the broad suite's 912 s are charged after it, in the segment
        ({"budget.compute_s": "900"}, "budget exhausted: compute_s 912 > 900"),
    ],
)
def test_a_budget_limit_from_a_checkpoint_counts_what_the_restored_history_spent(vary, reason):
    _out, log = branch(STORY_003, A1, vary=vary)
    state = final(log)
    assert state["state"] == "stopped" and state["reason"].startswith(reason)


def test_a_varied_clock_resumes_the_segment_at_that_instant():
    _out, log = branch(STORY_003, A1, vary={"clock": "2026-05-05T08:00:00Z"})
    history, segment = split(log, A1)
    assert all(e["at"]["logical"] < "2026-05-05" for e in history)
    moved = segment[0]
    assert moved["kind"] == "clock.advanced" and moved["to"].startswith("2026-05-05T08:00:00")
    assert moved["reason"] == "the counterfactual's clock at the branch checkpoint"


@pytest.mark.seed("000", "A fixture miss received its own state")
def test_a_checkpoint_whose_history_needs_a_missing_fixture_stops_as_incomplete_test_world_naming_it():
    files = {n: json.loads(d) for n, d in SEEDS["coding-review-request"].files.items()}
    files["fixtures.json"] = [f for f in files["fixtures.json"] if f["id"] != "apply-patch-ws-1"]
    _out, log = branch(STORY_003, A1, scenario=build_scenario(files))
    (missing,) = kinds(log, "fixture.missing")
    assert missing["tool"] == "repo.apply_patch"
    state = final(log)
    assert state["state"] == "incomplete_test_world"
    assert state["reason"].startswith(f"checkpoint {A1} could not be restored")
    assert "repo.apply_patch" in state["reason"]
    segment = log[0]["segment"]
    assert segment["restored"] is None and segment["not_restored"] == state["reason"]
    assert state["missing"][0]["request_digest"] == missing["request_digest"]


def test_a_checkpoint_the_run_does_not_hold_is_refused_before_anything_runs():
    with pytest.raises(ReplayError, match=r"checkpoint 'e-003-a1-run-broad': run run-003-review-request holds no"):
        branch(STORY_003, "e-003-a1-run-broad")
    with pytest.raises(PackageError, match="a reconstruction re-projects the whole run"):
        branch(STORY_003, A1, mode="reconstruction", vary={}, scenario=None)


# --- 3. a human choice as the one variable ----------------------------------------------------------------------


def test_a_human_choice_changes_exactly_that_input_and_the_approval_it_decided():
    _rerun_out, rerun = branch(STORY_001, "start", mode="rerun", replay_id="replay-h")
    _out, log = branch(STORY_001, "start", vary={"human.e-001-reviewer-narrows": "reject"}, replay_id="replay-h")

    (human,) = kinds(log, "human.input")
    assert (human["action"], human["origin"], human["recorded_action"]) == ("reject", "varied", "reject_audience")
    # Everything before the varied input is the rerun's, event for event. Ids derive from the branch basis, which
    # holds what the replay varies (issue 36): the counterfactual's are its own, standing where the rerun's stood.
    at = log.index(human)
    strip = ("fixture_world", "vary", "decider", "segment")
    renamed = {r["id"]: c["id"] for r, c in zip(rerun[1:at], log[1:at], strict=True)}
    assert all(old != new for old, new in renamed.items())
    same = json.dumps([{k: v for k, v in e.items() if k not in strip} for e in rerun[1:at]])
    for old_id, new_id in renamed.items():
        same = same.replace(json.dumps(old_id), json.dumps(new_id))
    assert json.loads(same) == [{k: v for k, v in e.items() if k not in strip} for e in log[1:at]]
    (approval,) = kinds(log, "approval.recorded")
    assert approval["decision"] == "approved" and approval["decided_in_replay"] == "rejected"  # history unchanged
    hold = [d for d in kinds(log, "policy.decision") if d["outcome"] == "needs_approval"][-1]
    assert "rejected" in hold["reasons"][0]
    assert kinds(log, "effect.intent") == [] and kinds(log, "effect.execution") == []
    assert [t for t in kinds(log, "world.transition") if t["resource"].startswith("mailbox:")] == []
    assert len([t for t in kinds(rerun, "world.transition") if t["resource"].startswith("mailbox:")]) == 1


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("human.e-001-nobody", "reject", "holds no human input by that id"),
        ("human.e-001-reviewer-narrows", "reject_audience", "the choice is one of approve, reject"),
        ("human.e-003-reviewer-views", "reject", "holds no human input by that id"),
    ],
)
def test_a_human_choice_the_recording_cannot_honour_is_refused(key, value, message):
    with pytest.raises(ReplayError, match=message):
        branch(STORY_001, "start", vary={key: value})


def test_a_human_choice_that_changes_nothing_is_refused():
    with pytest.raises(ReplayError, match="the recorded choice was already 'approve'"):
        branch(STORY_003, A1, vary={"human.e-003-reviewer-views": "approve"})


def test_a_human_choice_from_a_checkpoint_applies_after_it():
    _out, log = branch(STORY_003, A1, vary={"human.e-003-reviewer-views": "reject"})
    (human,) = kinds(log, "human.input")
    assert human["origin"] == "varied" and human["action"] == "reject"
    decisions = kinds(log, "policy.decision")
    assert decisions[-1]["outcome"] == "needs_approval"
    assert "reviewer's recorded decision was rejected" in decisions[-1]["reasons"][0]
    assert kinds(log, "effect.intent") == []


# --- 4. a denied effect returns to planning -------------------------------------------------------------------------


def returns(log: list[dict]) -> list[dict]:
    return [e for e in kinds(log, "run.state") if e.get("returned_to") == "planning"]


def test_recorded_decisions_return_to_planning_and_stop_at_the_step_that_depended_on_the_denied_effect():
    _out, log = branch(STORY_003, "start", mode="rerun")
    (back,) = returns(log)
    deny = log[[e["id"] for e in log].index(back["decision_id"])]
    assert deny["kind"] == "policy.decision" and deny["outcome"] == "deny"
    assert back["state"] == "running" and back["denied_intent"] == "e-003-intent-review-request"
    assert back["missing_purposes"] == ["validation:broad"]
    assert back["reason"].startswith("returned to planning: review-policy@8 denied the intent")
    assert len(back["reason"]) <= REASON_CHARS
    state = final(log)
    assert state["state"] == "stopped"
    assert (
        "the recording's next step (e-003-execution, effect.execution) depended on the denied intent"
        in (state["reason"])
    )
    assert log.index(back) < log.index(state)


def test_careful_returns_to_planning_runs_the_broad_suite_in_a_new_attempt_and_stops_with_the_bounded_reason():
    # Seed 003: "the corrected final gate denied the request ... The run returned to planning with a bounded reason.
    # A new attempt ran the broad suite in workspace two and observed the known failure."
    _out, log = branch(STORY_003, "start")
    (back,) = returns(log)
    after = log[log.index(back) + 1 :]
    attempt = after[0]
    assert attempt["kind"] == "attempt.started" and attempt["reason"] == back["reason"]
    assert attempt["parent_attempt_id"] == "a2" and attempt["attempt"] == "a2.replan-1"
    (rerun,) = kinds(after, "command.receipt")
    assert (rerun["workspace_id"], rerun["command"], rerun["attempt"]) == ("ws-2", "pytest -q tests", "a2.replan-1")
    assert final(log)["state"] == "stopped" and kinds(log, "effect.intent") == []
    assert [
        f.code
        for f in check_events({"id": "x", "environment": "fixture", "mode": "counterfactual"}, log)
        if f.code == "LIN011"
    ] == []  # the replan attempt and every field it adds resolve


def test_careful_stops_with_the_bounded_reason_when_no_approval_can_be_had():
    # A scenario version that simulates no approval: the send is held for one, and rerunning checks cannot give it.
    files = {n: json.loads(d) for n, d in SEEDS["email-delivery"].files.items()}
    files["scenario.json"]["approvals"] = "none"
    _out, log = branch(STORY_001, "start", scenario=build_scenario(files))
    (back,) = returns(log)
    assert back["outcome"] == "needs_approval"
    assert back["reason"].startswith("returned to planning: mail-policy@3 holds the intent for mailbox:")
    state = final(log)
    assert state["state"] == "stopped" and "nothing careful can rerun answers it" in state["reason"]
    assert kinds(log, "effect.execution") == []


def _asks_again(source: SourceRun, view: View) -> Generator[Action, None, None]:
    """A plug-in decider that asks for the recorded effect again and again, whatever the policy says."""
    for action in recorded(source, view):
        yield action
        if isinstance(action, Activate):
            while view.denial(action.intent) is not None:
                yield action


def _reads_the_reason(source: SourceRun, view: View) -> Generator[Action, None, None]:
    """A plug-in decider that reads the denial through its View, writes it into its account and stops."""
    for action in recorded(source, view):
        yield action
        if isinstance(action, Activate) and (denial := view.denial(action.intent)) is not None:
            yield Claim(None, action.at, f"not opened: {denial['reason']}", "other", [denial["decision_id"]])
            yield Stop(None, action.at, "stopped", f"gave up after: {denial['reason']}")
            return


@pytest.fixture
def plugins(monkeypatch):
    monkeypatch.setitem(DECIDERS, "asks-again", Decider("asks-again", None, _asks_again))
    monkeypatch.setitem(DECIDERS, "reads-the-reason", Decider("reads-the-reason", None, _reads_the_reason))


def test_a_decider_reads_the_bounded_reason_through_its_view_and_the_run_goes_on(plugins):
    _out, log = branch(STORY_003, "start", vary={"decider": "reads-the-reason"})
    (back,) = returns(log)
    claim = kinds(log, "account.claim")[-1]
    assert claim["text"] == f"not opened: {back['reason']}" and claim["supports"] == [back["decision_id"]]
    assert log.index(claim) > log.index(back)
    assert final(log)["reason"] == f"gave up after: {back['reason']}"


def test_a_decider_that_asks_again_and_again_is_stopped_at_the_denial_limit(plugins):
    _out, log = branch(STORY_003, "start", vary={"decider": "asks-again"})
    assert len(returns(log)) == DENIAL_LIMIT
    state = final(log)
    assert state["state"] == "stopped" and state["reason"].startswith(f"denied {DENIAL_LIMIT} times in one run")
