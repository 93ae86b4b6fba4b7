"""The lineage checker (DESIGN §4): for every code a case that must fire and a near case that must not."""

from __future__ import annotations

import gc
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from n17q_engine import vocabulary as v
from n17q_engine.bundle import iter_event_lines, parse_manifest, validate_event
from n17q_engine.lineage import CODES, Finding, LineageGraph, check_events
from tests.hypothesis_budget import examples

from ..bundles import EXAMPLE
from .eventlib import EventLog, synthetic_events, tree

REQUIRED = ["validation:focused", "validation:broad"]


def begin(**run) -> EventLog:
    log = EventLog(**run)
    log.attempt()
    log.workspace("ws1", overlay_files=["docs/old.md"], id="ws1-created")
    log.change("ws1", "t1")
    return log


def release(
    log: EventLog,
    admissions: list[str],
    *,
    artifact: str = "art1",
    intent: str = "int1",
    required: list[str] | None = None,
    outcome: str = "allow",
    approval: bool = True,
    execute: bool = True,
    **intent_fields,
) -> dict[str, str]:
    """An approval binding `admissions`, an intent on `artifact`, a decision about it and one execution."""
    ids = {"intent": intent, "decision": f"{intent}-decision"}
    if approval:
        ids["approval"] = log.approval(intent, admissions, id=f"{intent}-approval")
    log.intent(artifact, admissions, id=intent, key=f"key-{intent}", approval_id=ids.get("approval"), **intent_fields)
    log.decision(intent, admissions, REQUIRED if required is None else required, id=ids["decision"], outcome=outcome)
    if execute:
        ids["execution"] = log.execution(intent, id=f"{intent}-execution")
    return ids


def clean(log: EventLog | None = None) -> tuple[EventLog, dict[str, str]]:
    """Both validations on the artifact's own workspace and tree, an exact approval, one effect, a true claim."""
    log = log or begin()
    rf, _, af = log.validation("ws1", "t1", "validation:focused", "art1")
    rb, _, ab = log.validation("ws1", "t1", "validation:broad", "art1")
    log.artifact("art1", "ws1", "t1", id="art1-created")
    ids = release(log, [af, ab])
    ids.update(focused=af, broad=ab, focused_receipt=rf, broad_receipt=rb)
    ids["claim"] = log.claim([af, ab], id="claim", claim_kind="completion", text="Validated and requested.")
    return log, ids


def check(log: EventLog) -> list[Finding]:
    return check_events(log.run, log.events)


def graph(log: EventLog) -> LineageGraph:
    g = LineageGraph(log.run)
    for event in log.events:
        g.add(event)
    return g


def of(findings: list[Finding], code: str) -> list[Finding]:
    return [f for f in findings if f.code == code]


def edges(findings: list[Finding], code: str) -> list[tuple[str, str]]:
    return [(f.from_, f.to) for f in of(findings, code)]


# ---------------------------------------------------------------- the whole checker


def test_it_finds_nothing_in_the_example_bundle():
    manifest = parse_manifest((EXAMPLE / "manifest.json").read_bytes())
    with open(EXAMPLE / "events.jsonl", "rb") as stream:
        events = [event for _line, event in iter_event_lines(stream)]
    assert check_events(manifest.run, events) == []


def test_it_finds_nothing_in_a_clean_release():
    log, ids = clean()
    assert check(log) == []
    assert graph(log).intent_findings(ids["intent"]) == []


def test_it_finds_nothing_in_a_clean_live_recorded_run():
    log = begin(environment="live", mode="recorded")
    _, _, af = log.validation("ws1", "t1", "validation:focused", "art1")
    log.artifact("art1", "ws1", "t1")
    release(log, [af], required=["validation:focused"], namespace="live")
    log.execution("int1", id="x-live", outcome="lost_response", connection="https://reviews.example")
    log.emit("tool.result", call_id=log.emit("tool.call"), origin="live")
    assert check(log) == []


def test_it_tells_the_whole_seed_003_story():
    """Workspace one's green focused receipt authorizes workspace two's artifact while broad failed."""
    log = begin()
    _, _, focused = log.validation("ws1", "t1", "validation:focused", "art2")
    call = log.emit("tool.call", workspace_id="ws1")
    broad = log.receipt(
        "ws1",
        "t1",
        suites=("broad",),
        completion="termination_unknown",
        failed=1,
        exit_code=None,
        call_id=call,
        id="broad-timeout",
    )
    log.admit(
        log.observe(broad, "ws1", "t1", scope="diagnosis"), "validation:broad", "art2", "ws1", "t1", decision="rejected"
    )
    log.lifecycle("ws1", "quarantined", id="ws1-quarantined")
    log.workspace("ws2", parent="ws1", relation="reconstruct", content_equal=True, overlay_files=["docs/old.md"])
    log.change("ws2", "t1")
    log.artifact("art2", "ws2", "t1")
    release(log, [focused], artifact="art2", intent="int2")
    log.claim([focused], id="claim", claim_kind="completion", text="The patch passed tests; the request is ready.")

    found = check(log)

    assert edges(found, "LIN001") == [("int2", focused), ("int2-decision", focused)]
    assert edges(found, "LIN006") == [("int2", focused), ("int2-decision", focused)]
    assert edges(found, "LIN003") == [("int2-decision", "broad-timeout")]
    assert edges(found, "LIN013") == [("int2-decision", "int2")]
    assert sorted(edges(found, "LIN008")) == [("claim", "broad-timeout"), ("claim", "claim")]
    assert {f.code for f in found} == {"LIN001", "LIN003", "LIN006", "LIN008", "LIN013"}
    # The final gate sees everything that should have stopped the request, and nothing about the claim.
    assert {f.code for f in graph(log).intent_findings("int2")} == {"LIN001", "LIN003", "LIN006", "LIN013"}


def test_it_orders_findings_by_from_seq_then_code_then_to():
    log = begin()
    _, _, focused = log.validation("ws2-not-here", "t9", "validation:focused", "art1")
    log.artifact("art1", "ws1", "t1")
    release(log, [focused, "missing-admission"])
    found = check(log)
    keys = [(next(e["seq"] for e in log.events if e["id"] == f.from_), f.code, f.to) for f in found]
    assert keys == sorted(keys)
    assert found == check(log)  # deterministic


def test_it_serializes_findings_in_the_cli_shape():
    finding = Finding("LIN011", "warning", "e1", "x", "Event e1 refers at subject to x.")
    assert finding.to_json() == {
        "code": "LIN011",
        "severity": "warning",
        "from": "e1",
        "to": "x",
        "message": "Event e1 refers at subject to x.",
    }


def test_it_titles_every_code_for_the_ui():
    assert list(CODES) == [f"LIN{n:03d}" for n in range(1, 18)]
    assert all(isinstance(title, str) and title for title in CODES.values())


def test_it_marks_only_dangling_references_as_warnings():
    log = begin(environment="fixture", mode="rerun")
    _, _, focused = log.validation("ws9", "t9", "validation:focused", "art1")
    log.artifact("art1", "ws1", "t1")
    release(log, [focused, "gone"], namespace="live")
    found = check(log)
    assert {f.code for f in found} >= {"LIN001", "LIN007", "LIN011"}
    assert all(f.severity == ("warning" if f.code == "LIN011" else "error") for f in found)


def test_it_keeps_no_event_dicts():
    log, _ = clean()
    g = graph(log)
    event_ids = {id(e) for e in log.events}
    seen: set[int] = set()
    stack: list[object] = [g]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or callable(obj) or isinstance(obj, type):
            continue
        seen.add(id(obj))
        assert id(obj) not in event_ids, "the graph holds a whole event"
        stack.extend(gc.get_referents(obj))


def test_it_answers_the_same_when_asked_midway():
    log, _ = clean()
    g = LineageGraph(log.run)
    for event in log.events:
        g.add(event)
        g.findings()
        g.intent_findings("int1")
    assert g.findings() == check(log)


# ---------------------------------------------------------------- LIN001 evidence from another lineage


def test_it_flags_evidence_from_another_workspace():
    log = begin()
    _, _, focused = log.validation("ws1", "t1", "validation:focused", "art2")
    log.workspace("ws2", parent="ws1", relation="reconstruct")
    log.change("ws2", "t2")
    log.artifact("art2", "ws2", "t2")
    release(log, [focused], artifact="art2", required=[])
    found = of(check(log), "LIN001")
    assert [(f.from_, f.to) for f in found] == [("int1", focused), ("int1-decision", focused)]
    assert all(
        "ws1" in f.message and "ws2" in f.message and tree("t2") in f.message and "art2" in f.message for f in found
    )


def test_it_flags_an_identical_tree_under_a_new_workspace_identity():
    log = begin()
    _, _, focused = log.validation("ws1", "t1", "validation:focused", "art2")
    log.workspace("ws2", parent="ws1", relation="copy", content_equal=True)
    log.change("ws2", "t1")
    log.artifact("art2", "ws2", "t1")
    release(log, [focused], artifact="art2", required=["validation:focused"])
    found = of(check(log), "LIN001")
    assert [(f.from_, f.to) for f in found] == [("int1", focused), ("int1-decision", focused)]
    assert "same tree" in found[0].message and "ws1" in found[0].message and "ws2" in found[0].message


def test_it_accepts_an_identical_tree_when_a_declared_compatibility_rule_holds():
    # The policy declares the rule (run.compatibility_rules) and the recorded facts satisfy it: seed 003's valid reuse
    # in a content-identical reconstructed workspace. Undeclared or failing rules: test_lineage_compatibility.py.
    log = begin(compatibility_rules={"pure-test-identical-tree": {"tree": "content_equal_ancestor"}})
    receipt = log.receipt("ws1", "t1")
    observation = log.observe(receipt, "ws1", "t1")
    log.lifecycle("ws1", "superseded")
    log.workspace("ws2", parent="ws1", relation="copy", content_equal=True)
    log.change("ws2", "t1")
    focused = log.admit(
        observation,
        "validation:focused",
        "art2",
        "ws1",
        "t1",
        compatibility={"rule": "pure-test-identical-tree", "rationale": "same tree, env, inputs"},
    )
    log.artifact("art2", "ws2", "t1")
    release(log, [focused], artifact="art2", required=["validation:focused"])
    assert check(log) == []


def test_it_does_not_count_an_empty_compatibility_record():
    log = begin()
    _, _, focused = log.validation(
        "ws1", "t1", "validation:focused", "art2", admission={"compatibility": {"rule": "", "rationale": "trust me"}}
    )
    log.workspace("ws2", parent="ws1", relation="copy", content_equal=True)
    log.artifact("art2", "ws2", "t1")
    release(log, [focused], artifact="art2", required=[])
    assert edges(check(log), "LIN001") == [("int1", focused), ("int1-decision", focused)]


def test_it_flags_an_admission_that_relabels_another_workspaces_receipt():
    log = begin()
    log.workspace("ws2")
    log.change("ws2", "t1")
    receipt, _, focused = log.validation("ws1", "t1", "validation:focused", "art2", admit_as=("ws2", "t1"))
    log.artifact("art2", "ws2", "t1")
    release(log, [focused], artifact="art2", required=[])
    found = of(check(log), "LIN001")
    assert [(f.from_, f.to) for f in found] == [("int1", focused), ("int1-decision", focused)]
    assert receipt in found[0].message and "ws1" in found[0].message


def test_it_flags_evidence_from_an_older_tree_of_the_same_workspace():
    log = begin()
    _, _, focused = log.validation("ws1", "t1", "validation:focused", "art1")
    log.change("ws1", "t2")
    log.artifact("art1", "ws1", "t2")
    release(log, [focused], required=[])
    found = of(check(log), "LIN001")
    assert [(f.from_, f.to) for f in found] == [("int1", focused), ("int1-decision", focused)]
    assert tree("t1") in found[0].message and tree("t2") in found[0].message


def test_it_does_not_hold_a_denial_to_the_evidence_it_cites():
    log = begin()
    _, _, focused = log.validation("ws1", "t1", "validation:focused", "art2")
    log.workspace("ws2", parent="ws1")
    log.artifact("art2", "ws2", "t1")
    log.intent("art2", [], id="int2")
    log.decision("int2", [focused], REQUIRED, outcome="deny", id="deny")
    assert check(log) == []


def test_it_ignores_evidence_bound_to_no_workspace():
    log = begin()
    result = log.emit("tool.result", call_id=log.emit("tool.call"))
    docs = log.admit(log.observe(result), "source:docs", "art1", None, None)
    log.artifact("art1", "ws1", "t1")
    release(log, [docs], required=[])
    assert check(log) == []


# ---------------------------------------------------------------- LIN002 partial evidence used as completed


@pytest.mark.parametrize(
    "completion", ["partial", "termination_unknown", "started", "harness_interrupted", "canceled_confirmed"]
)
def test_it_flags_a_receipt_that_did_not_complete_admitted_as_validation(completion):
    log = begin()
    receipt, _, broad = log.validation(
        "ws1", "t1", "validation:broad", "art1", receipt={"completion": completion, "exit_code": None}
    )
    found = of(check(log), "LIN002")
    assert [(f.from_, f.to) for f in found] == [(broad, receipt)]
    assert completion in found[0].message and receipt in found[0].message and "validation:broad" in found[0].message


def test_it_accepts_partial_output_admitted_for_diagnosis_or_rejected():
    log = begin()
    receipt = log.receipt("ws1", "t1", suites=("broad",), completion="termination_unknown", exit_code=None)
    observation = log.observe(receipt, "ws1", "t1", scope="diagnosis")
    log.admit(observation, "diagnosis", "art1", "ws1", "t1")
    log.admit(observation, "validation:broad", "art1", "ws1", "t1", decision="rejected")
    log.validation("ws1", "t1", "validation:focused", "art1")
    assert of(check(log), "LIN002") == []


# ---------------------------------------------------------------- LIN003 unresolved failure


def rerun_failed(log: EventLog, **receipt) -> tuple[str, dict[str, str]]:
    """Broad passed and was admitted, then a later broad run on the same tree failed; the gate used the old pass."""
    _, _, focused = log.validation("ws1", "t1", "validation:focused", "art1")
    _, _, broad = log.validation("ws1", "t1", "validation:broad", "art1")
    failed = log.receipt("ws1", "t1", suites=("broad",), failed=2, exit_code=1, id="broad-failed", **receipt)
    log.admit(
        log.observe(failed, "ws1", "t1", scope="validation:broad"),
        "validation:broad",
        "art1",
        "ws1",
        "t1",
        decision="rejected",
    )
    log.artifact("art1", "ws1", "t1")
    return failed, {"focused": focused, "broad": broad}


def test_it_flags_an_allow_while_the_latest_required_receipt_failed():
    log = begin()
    failed, ids = rerun_failed(log)
    release(log, [ids["focused"], ids["broad"]])
    found = check(log)
    assert edges(found, "LIN003") == [("int1-decision", failed)]
    message = of(found, "LIN003")[0].message
    assert "validation:broad" in message and failed in message and "2 failed" in message and "int1" in message
    assert {f.code for f in found} == {"LIN003"}


def test_it_clears_an_unresolved_failure_with_a_waiver():
    log = begin()
    failed, ids = rerun_failed(log)
    log.emit("waiver.granted", failure=failed, suite="broad")
    release(log, [ids["focused"], ids["broad"]])
    assert check(log) == []


def test_it_does_not_count_a_waiver_granted_after_the_decision():
    log = begin()
    failed, ids = rerun_failed(log)
    release(log, [ids["focused"], ids["broad"]])
    log.emit("waiver.granted", failure=failed, suite="broad")
    assert edges(check(log), "LIN003") == [("int1-decision", failed)]


def test_it_does_not_count_a_waiver_for_another_suite():
    log = begin()
    failed, ids = rerun_failed(
        log, results={"passed": 1, "failed": 2, "skipped": 0, "failing_suites": ["integration", "migration"]}
    )
    log.emit("waiver.granted", failure=failed, suite="integration")
    release(log, [ids["focused"], ids["broad"]])
    found = of(check(log), "LIN003")
    assert [(f.from_, f.to) for f in found] == [("int1-decision", failed)]
    assert "migration" in found[0].message and "integration" not in found[0].message


def test_it_accepts_a_failure_fixed_by_a_later_passing_run():
    log = begin()
    _, ids = rerun_failed(log)
    _, _, broad = log.validation("ws1", "t1", "validation:broad", "art1")
    release(log, [ids["focused"], broad])
    assert check(log) == []


def test_it_follows_a_failure_into_the_workspace_derived_from_it():
    log = begin()
    broad = log.receipt("ws1", "t1", suites=("broad",), completion="completed", failed=1, exit_code=1)
    log.workspace("ws2", parent="ws1", relation="reconstruct")
    log.change("ws2", "t1")
    _, _, focused = log.validation("ws2", "t1", "validation:focused", "art2")
    log.artifact("art2", "ws2", "t1")
    release(log, [focused], artifact="art2", required=["validation:focused", "validation:broad"])
    found = check(log)
    assert edges(found, "LIN003") == [("int1-decision", broad)]
    assert edges(found, "LIN013") == [("int1-decision", "int1")]


def test_it_ignores_what_an_ancestor_did_after_the_fork():
    log = begin()
    log.workspace("ws2", parent="ws1", relation="branch")
    log.change("ws2", "t2")
    _, _, focused = log.validation("ws2", "t2", "validation:focused", "art2")
    _, _, broad = log.validation("ws2", "t2", "validation:broad", "art2")
    log.receipt("ws1", "t1", suites=("broad",), failed=1, exit_code=1)  # the latest broad run, on the other line
    log.artifact("art2", "ws2", "t2")
    release(log, [focused, broad], artifact="art2")
    log.claim([focused, broad])
    assert check(log) == []


# ---------------------------------------------------------------- LIN004 approval does not bind the evidence


def test_it_flags_an_approval_of_a_different_evidence_set():
    log = begin()
    _, _, focused = log.validation("ws1", "t1", "validation:focused", "art1")
    _, _, broad = log.validation("ws1", "t1", "validation:broad", "art1")
    log.artifact("art1", "ws1", "t1")
    log.approval("int1", [focused], id="approval")
    log.intent("art1", [focused, broad], id="int1", approval_id="approval")
    found = of(check(log), "LIN004")
    assert [(f.from_, f.to) for f in found] == [("int1", "approval")]
    assert focused in found[0].message and broad in found[0].message


def test_it_flags_an_approval_of_another_subject():
    log = begin()
    _, _, focused = log.validation("ws1", "t1", "validation:focused", "art1")
    log.artifact("art1", "ws1", "t1")
    log.approval("int-other", [focused], id="approval")
    log.intent("art1", [focused], id="int-other", key="k0")
    log.intent("art1", [focused], id="int1", approval_id="approval")
    found = of(check(log), "LIN004")
    assert [(f.from_, f.to) for f in found] == [("int1", "approval")]
    assert "int-other" in found[0].message


def test_it_flags_a_rejection_used_as_approval():
    log = begin()
    _, _, focused = log.validation("ws1", "t1", "validation:focused", "art1")
    log.artifact("art1", "ws1", "t1")
    log.approval("int1", [focused], id="approval", decision="rejected")
    log.intent("art1", [focused], id="int1", approval_id="approval")
    found = of(check(log), "LIN004")
    assert [(f.from_, f.to) for f in found] == [("int1", "approval")]
    assert "rejected" in found[0].message


def test_it_binds_an_evidence_set_whatever_its_order():
    log = begin()
    _, _, focused = log.validation("ws1", "t1", "validation:focused", "art1")
    _, _, broad = log.validation("ws1", "t1", "validation:broad", "art1")
    log.artifact("art1", "ws1", "t1")
    log.approval("int1", [broad, focused], id="approval")
    log.intent("art1", [focused, broad], id="int1", approval_id="approval")
    assert check(log) == []


# ---------------------------------------------------------------- LIN005 foreign approval


def test_it_flags_a_historical_approval_from_the_source_run_in_a_replay():
    log = begin(mode="rerun")
    _, _, focused = log.validation("ws1", "t1", "validation:focused", "art1")
    log.artifact("art1", "ws1", "t1")
    log.approval("int1", [focused], id="old-approval", origin="historical", run="run-0")
    log.intent("art1", [focused], id="int1", approval_id="old-approval")
    found = of(check(log), "LIN005")
    assert [(f.from_, f.to) for f in found] == [("int1", "old-approval")]
    assert "run-0" in found[0].message and "historical" in found[0].message


def test_it_flags_an_approval_from_another_environment_cited_by_a_decision():
    log = begin(environment="sandbox")
    _, _, focused = log.validation("ws1", "t1", "validation:focused", "art1")
    log.artifact("art1", "ws1", "t1")
    approval = log.approval("int1", [focused], environment="live")
    log.intent("art1", [focused], id="int1")
    log.decision("int1", [focused, approval], ["validation:focused"], id="decision")
    found = of(check(log), "LIN005")
    assert [(f.from_, f.to) for f in found] == [("decision", approval)]
    assert "live" in found[0].message and "sandbox" in found[0].message


def test_it_flags_a_historical_approval_even_when_it_names_this_run():
    log = begin(mode="counterfactual")
    _, _, focused = log.validation("ws1", "t1", "validation:focused", "art1")
    log.artifact("art1", "ws1", "t1")
    log.approval("int1", [focused], id="approval", origin="historical")
    log.intent("art1", [focused], id="int1", approval_id="approval")
    found = of(check(log), "LIN005")
    assert [(f.from_, f.to) for f in found] == [("int1", "approval")]
    assert "historical" in found[0].message and "counterfactual" in found[0].message


def test_it_accepts_a_historical_approval_in_the_recorded_run_itself():
    log = begin(environment="live", mode="recorded")
    _, _, focused = log.validation("ws1", "t1", "validation:focused", "art1")
    log.artifact("art1", "ws1", "t1")
    log.approval("int1", [focused], id="approval", origin="historical")
    log.intent("art1", [focused], id="int1", approval_id="approval", namespace="live")
    assert check(log) == []


# ---------------------------------------------------------------- LIN006 stale evidence


def test_it_flags_evidence_used_after_its_workspace_was_superseded():
    log = begin()
    _, _, focused = log.validation("ws1", "t1", "validation:focused", "art1")
    log.artifact("art1", "ws1", "t1")
    superseded = log.lifecycle("ws1", "superseded")
    release(log, [focused], required=["validation:focused"])
    found = of(check(log), "LIN006")
    assert [(f.from_, f.to) for f in found] == [("int1", focused), ("int1-decision", focused)]
    assert superseded in found[0].message and "ws1" in found[0].message and "superseded" in found[0].message


def test_it_flags_evidence_used_after_its_workspace_changed_tree():
    log = begin()
    _, _, focused = log.validation("ws1", "t1", "validation:focused", "art1")
    log.artifact("art1", "ws1", "t1")
    changed = log.change("ws1", "t2")
    release(log, [focused], required=["validation:focused"])
    found = of(check(log), "LIN006")
    assert [(f.from_, f.to) for f in found] == [("int1", focused), ("int1-decision", focused)]
    assert changed in found[0].message and tree("t2") in found[0].message


def test_it_flags_an_admission_that_was_superseded():
    log = begin()
    _, _, focused = log.validation("ws1", "t1", "validation:focused", "art1")
    log.artifact("art1", "ws1", "t1")
    retraction = log.emit("evidence.superseded", admission_id=focused, cause=None)
    release(log, [focused], required=["validation:focused"])
    found = of(check(log), "LIN006")
    assert [(f.from_, f.to) for f in found] == [("int1", focused), ("int1-decision", focused)]
    assert retraction in found[0].message


def test_it_accepts_changes_before_the_admission_and_invalidations_after_the_use():
    log = begin()
    log.change("ws1", "t0")
    log.change("ws1", "t1", overlay_revision=2)
    _, _, focused = log.validation("ws1", "t1", "validation:focused", "art1")
    log.change("ws1", "t1", overlay_revision=3)  # a new revision with the same tree changes nothing
    log.artifact("art1", "ws1", "t1")
    release(log, [focused], required=["validation:focused"])
    log.lifecycle("ws1", "superseded")
    log.change("ws1", "t2")
    assert check(log) == []


# ---------------------------------------------------------------- LIN007 replay effect outside its namespace


def test_it_flags_a_live_namespace_intent_in_a_replay():
    log = begin(environment="fixture", mode="rerun")
    intent = log.intent(None, [], namespace="live", id="int1")
    found = of(check(log), "LIN007")
    assert [(f.from_, f.to) for f in found] == [(intent, intent)]
    assert "rerun" in found[0].message and "fixture" in found[0].message


def test_it_flags_an_execution_on_a_live_connection_in_a_replay():
    log = begin(environment="effect-capable", mode="counterfactual")
    log.intent(None, [], id="int1")
    execution = log.execution("int1", connection="https://reviews.example/api")
    found = of(check(log), "LIN007")
    assert [(f.from_, f.to) for f in found] == [(execution, "int1")]
    assert "https://reviews.example/api" in found[0].message


@pytest.mark.parametrize("connection", ["fixture:reviews", "sim:reviews", "replay:w1"])
def test_it_accepts_contained_connections_in_a_replay(connection):
    log = begin()
    log.intent(None, [], id="int1", namespace="replay:w1")
    log.execution("int1", connection=connection)
    assert check(log) == []


# ---------------------------------------------------------------- LIN008 unsupported claim


@pytest.mark.parametrize("completion", ["partial", "termination_unknown"])
def test_it_never_counts_a_partial_or_timed_out_receipt_as_support(completion):
    log = begin()
    receipt = log.receipt("ws1", "t1", suites=("broad",), completion=completion, exit_code=None)
    claim = log.claim([receipt], scope=["validation:broad"])
    found = of(check(log), "LIN008")
    assert (claim, receipt) in [(f.from_, f.to) for f in found]
    assert completion in next(f for f in found if f.to == receipt).message


def test_it_flags_a_claim_wider_than_its_supports():
    log, ids = clean()
    claim = log.claim([ids["focused"]], id="narrow")
    found = of(check(log), "LIN008")
    assert [(f.from_, f.to) for f in found] == [(claim, claim)]
    assert "validation:broad" in found[0].message


def test_it_flags_a_claim_a_later_failing_receipt_contradicts():
    log = begin()
    _, _, focused = log.validation("ws1", "t1", "validation:focused", "art1")
    failed = log.receipt("ws1", "t1", suites=("integration",), failed=1, exit_code=1)
    claim = log.claim([focused], text="All tests pass.")
    found = of(check(log), "LIN008")
    assert [(f.from_, f.to) for f in found] == [(claim, failed)]
    assert failed in found[0].message and "ws1" in found[0].message


def test_it_accepts_a_claim_narrowed_to_what_passed():
    log = begin()
    _, _, focused = log.validation("ws1", "t1", "validation:focused", "art1")
    log.receipt("ws1", "t1", suites=("broad",), completion="termination_unknown", failed=1, exit_code=None)
    log.decision("int-x", [], REQUIRED)
    log.claim([focused], scope=["validation:focused"], text="Focused tests pass; broad validation is incomplete.")
    assert of(check(log), "LIN008") == []


def test_it_flags_a_validation_claim_that_cites_no_receipt():
    log = begin()
    result = log.emit("tool.result", call_id=log.emit("tool.call"))
    claim = log.claim([result])
    found = of(check(log), "LIN008")
    assert [(f.from_, f.to) for f in found] == [(claim, claim)]


def test_it_leaves_other_claims_alone():
    log = begin()
    result = log.emit("tool.result", call_id=log.emit("tool.call"))
    log.claim([result], claim_kind="other")
    log.claim([], claim_kind="effect")
    assert check(log) == []


def test_it_accepts_a_failure_fixed_in_the_workspace_derived_from_it():
    log = begin()
    log.receipt("ws1", "t1", suites=("broad",), failed=1, exit_code=1)
    log.workspace("ws2", parent="ws1", relation="reconstruct")
    log.change("ws2", "t2")
    _, _, broad = log.validation("ws2", "t2", "validation:broad", None)
    log.claim([broad], scope=["validation:broad"])
    assert check(log) == []


def test_it_flags_an_ancestors_failure_the_derived_workspace_never_fixed():
    log = begin()
    failed = log.receipt("ws1", "t1", suites=("broad",), failed=1, exit_code=1)
    log.workspace("ws2", parent="ws1", relation="reconstruct")
    log.change("ws2", "t2")
    _, _, focused = log.validation("ws2", "t2", "validation:focused", None)
    claim = log.claim([focused], scope=["validation:focused", "validation:broad"])
    assert (claim, failed) in edges(check(log), "LIN008")


def test_it_follows_a_lineage_through_a_parent_declared_later():
    log = begin()
    failed = log.receipt("ws1", "t1", suites=("broad",), failed=1, exit_code=1)
    log.workspace("ws2", parent="ws3")  # a forward reference: ws3 is declared below
    log.workspace("ws3", parent="ws1")
    _, _, focused = log.validation("ws2", "t1", "validation:focused", None)
    claim = log.claim([focused], scope=["validation:focused", "validation:broad"])
    assert (claim, failed) in edges(check(log), "LIN008")


def test_it_accepts_a_failure_rerun_green_before_the_claim():
    log = begin()
    log.receipt("ws1", "t1", suites=("focused",), failed=1, exit_code=1)
    _, _, focused = log.validation("ws1", "t1", "validation:focused", None)
    log.claim([focused])
    assert check(log) == []


# ---------------------------------------------------------------- LIN009 uncertain workspace reused


def test_it_flags_a_workspace_reused_after_an_unknown_termination():
    log = begin()
    timeout = log.receipt("ws1", "t1", completion="termination_unknown", exit_code=None)
    call = log.emit("tool.call", workspace_id="ws1")
    found = of(check(log), "LIN009")
    assert [(f.from_, f.to) for f in found] == [(call, timeout)]
    assert "ws1" in found[0].message and timeout in found[0].message


def test_it_flags_a_copy_of_an_uncertain_workspace():
    log = begin()
    uncertain = log.lifecycle("ws1", "uncertain")
    copy = log.workspace("ws2", parent="ws1", relation="copy")
    found = of(check(log), "LIN009")
    assert [(f.from_, f.to) for f in found] == [(copy, uncertain)]
    assert "ws1" in found[0].message and "ws2" in found[0].message


def test_it_accepts_reuse_after_a_cleanup_receipt():
    log = begin()
    timeout = log.receipt("ws1", "t1", completion="termination_unknown", exit_code=None)
    log.observe(timeout, "ws1", "t1", scope="diagnosis")  # reading the record is not reusing the environment
    log.lifecycle("ws1", "quarantined")
    cleanup_call = log.emit("tool.call", workspace_id="ws1", tool="workspace.cleanup")
    cleanup = log.receipt("ws1", "t1", call_id=cleanup_call, command="kill-tree", suites=())
    log.change("ws1", "t1", cause=cleanup)
    log.lifecycle("ws1", "active", cleanup_receipt_id=cleanup)
    log.emit("tool.call", workspace_id="ws1")
    log.workspace("ws2", parent="ws1", relation="copy")
    assert check(log) == []


def test_it_accepts_a_fresh_reconstruction_of_an_uncertain_workspace():
    log = begin()
    log.receipt("ws1", "t1", completion="termination_unknown", exit_code=None)
    log.workspace("ws2", parent="ws1", relation="reconstruct")
    log.emit("tool.call", workspace_id="ws2")
    assert check(log) == []


# ---------------------------------------------------------------- LIN010 inherited edit absorbed


def test_it_flags_an_artifact_that_absorbed_the_initial_overlay():
    log = begin()
    artifact = log.artifact("art1", "ws1", "t1", files=["src/adapter.py", "./docs/old.md"])
    found = of(check(log), "LIN010")
    assert [(f.from_, f.to) for f in found] == [(artifact, "ws1-created")]
    assert "docs/old.md" in found[0].message and "ws1" in found[0].message


def test_it_accepts_an_artifact_that_keeps_out_of_the_overlay():
    log = begin()
    log.artifact("art1", "ws1", "t1", files=["src/adapter.py", "docs/new.md"])
    log.workspace("ws2", parent="ws1", relation="reconstruct", overlay_files=[])
    log.artifact("art2", "ws2", "t1", files=["docs/old.md"])  # ws2's own overlay is empty
    assert check(log) == []


# ---------------------------------------------------------------- LIN011 dangling reference


def test_it_flags_a_reference_to_an_id_the_run_does_not_hold():
    log = begin()
    decision = log.decision("int1", ["adm-1", "adm-missing"], [], id="decision")
    log.intent(None, [], id="int1")
    log.admit(log.observe(log.receipt("ws1", "t1")), "validation:focused", None, "ws1", "t1", id="adm-1")
    found = of(check(log), "LIN011")
    assert [(f.from_, f.to) for f in found] == [(decision, "adm-missing")]
    assert found[0].severity == "warning"
    assert "input_ids[1]" in found[0].message and "adm-missing" in found[0].message


def test_it_accepts_forward_references():
    log = begin()
    log.emit("attempt.started", attempt="a2", parent_attempt_id="a3", number=2)
    log.emit("attempt.started", attempt="a3", number=3)
    assert check(log) == []


# ---------------------------------------------------------------- LIN012 duplicate consequence


def test_it_flags_a_second_acknowledged_execution():
    log = begin()
    log.intent(None, [], id="int1")
    first = log.execution("int1", outcome="acknowledged")
    second = log.execution("int1", attempt_no=2, outcome="acknowledged")
    found = of(check(log), "LIN012")
    assert [(f.from_, f.to) for f in found] == [(second, first)]
    assert "int1" in found[0].message


def test_it_flags_two_intents_for_one_idempotency_key():
    log = begin()
    first = log.intent(None, [], key="pr-42")
    second = log.intent(None, [], key="pr-42")
    found = of(check(log), "LIN012")
    assert [(f.from_, f.to) for f in found] == [(second, first)]
    assert "pr-42" in found[0].message


def test_it_accepts_a_retry_after_a_lost_response():
    log = begin()
    log.intent(None, [], id="int1", key="pr-42")
    log.intent(None, [], id="int2", key="pr-43")
    log.execution("int1", outcome="lost_response", stage="after_world_mutation")
    log.execution("int1", attempt_no=2, outcome="acknowledged")
    log.execution("int2", outcome="acknowledged")
    assert check(log) == []


# ---------------------------------------------------------------- LIN013 required evidence missing


def test_it_flags_an_allow_without_evidence_for_a_required_purpose():
    log = begin()
    _, _, focused = log.validation("ws1", "t1", "validation:focused", "art1")
    log.artifact("art1", "ws1", "t1")
    release(log, [focused])
    found = of(check(log), "LIN013")
    assert [(f.from_, f.to) for f in found] == [("int1-decision", "int1")]
    assert "validation:broad" in found[0].message and "art1" in found[0].message


@pytest.mark.parametrize("broad", [{"decision": "rejected"}, {"artifact_id": "art-other"}])
def test_it_does_not_count_rejected_or_foreign_artifact_evidence(broad):
    log = begin()
    _, _, focused = log.validation("ws1", "t1", "validation:focused", "art1")
    _, _, other = log.validation("ws1", "t1", "validation:broad", "art1", admission=broad)
    log.artifact("art1", "ws1", "t1")
    release(log, [focused, other])
    assert edges(check(log), "LIN013") == [("int1-decision", "int1")]


def test_it_does_not_call_a_request_for_approval_an_allow():
    log = begin()
    _, _, focused = log.validation("ws1", "t1", "validation:focused", "art1")
    log.artifact("art1", "ws1", "t1")
    release(log, [focused], outcome="needs_approval")
    assert check(log) == []


# ---------------------------------------------------------------- LIN014 live observation in a non-live run


def test_it_flags_a_live_result_in_a_replay():
    log = begin(environment="fixture", mode="rerun")
    call = log.emit("tool.call", tool="status.lookup")
    result = log.emit("tool.result", call_id=call, origin="live")
    found = of(check(log), "LIN014")
    assert [(f.from_, f.to) for f in found] == [(result, call)]
    assert call in found[0].message and "rerun" in found[0].message


def test_it_accepts_fixture_results_in_a_replay():
    log = begin(environment="fixture", mode="rerun")
    log.emit("tool.result", call_id=log.emit("tool.call"), origin="fixture")
    log.emit("tool.result", call_id=log.emit("tool.call"), origin="historical", outcome="not_found")
    assert check(log) == []


# ---------------------------------------------------------------- the final gate


def test_it_gives_the_gate_only_the_findings_about_one_intent():
    log = begin()
    timeout = log.receipt("ws1", "t1", completion="termination_unknown", exit_code=None, id="timeout")
    log.lifecycle("ws1", "active", cleanup_receipt_id=log.receipt("ws1", "t1", suites=()))
    _, _, partial = log.validation(
        "ws1", "t1", "validation:broad", "art1", receipt={"completion": "partial", "exit_code": None}
    )
    _, _, focused = log.validation("ws1", "t1", "validation:focused", "art1")
    log.artifact("art1", "ws1", "t1", files=["docs/old.md"], id="art1-created")
    release(log, [focused, partial], intent="bad")
    _, _, focused2 = log.validation("ws1", "t1", "validation:focused", "art1")
    _, _, broad2 = log.validation("ws1", "t1", "validation:broad", "art1")
    release(log, [focused2, broad2], intent="good")
    log.claim([timeout], id="claim")
    g = graph(log)

    bad = g.intent_findings("bad")
    assert {(f.code, f.from_) for f in bad} == {("LIN002", partial), ("LIN010", "art1-created")}
    good = g.intent_findings("good")
    assert {(f.code, f.from_) for f in good} == {("LIN010", "art1-created")}
    assert {f.code for f in g.findings()} == {"LIN002", "LIN008", "LIN010"}
    assert g.intent_findings("claim") == [] and g.intent_findings("nope") == []


# ---------------------------------------------------------------- random mixtures of valid events

EVENT_POOL = [f"h{i}" for i in range(10)]
OBJECT_POOL = ["ws1", "ws2", "ws3", "art1", "art2", "a1", "a2"]
REF = st.sampled_from([*EVENT_POOL, *OBJECT_POOL, "nowhere"])
PURPOSE = st.sampled_from(["validation:focused", "validation:broad", "diagnosis", "focused", "broad"])
TEXT = st.text(max_size=6)
TREE = st.sampled_from([tree("t1"), tree("t2")])
KEYS = st.sampled_from(["workspace_id", "failed", "rule", "failing_suites", "x_ids", "request", "supports", "k"])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 3) | st.floats(allow_nan=True) | TEXT | REF | PURPOSE,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=8,
)
SPECIAL = {
    # The approval's review object (issue 34): a digest (sometimes the one it would have) and an ISO time.
    "review_digest": TREE,
    "expires_at": st.sampled_from(["2026-07-01T10:00:00Z", "2026-07-02T09:00:00+02:00"]),
    "derived_from": st.none()
    | st.fixed_dictionaries(
        {"workspace_id": REF, "relation": st.sampled_from(v.DERIVATION_RELATIONS), "content_equal": st.booleans()}
    ),
    "absent": st.dictionaries(TEXT, st.sampled_from(v.ABSENCE_KINDS), max_size=2),
    "results": st.fixed_dictionaries(
        {},
        optional={
            "passed": st.integers(0, 3),
            "failed": st.integers(-1, 3) | JSON,
            "failing_suites": JSON | st.lists(PURPOSE, max_size=2),
        },
    ),
    "compatibility": st.none()
    | st.fixed_dictionaries({"rule": st.none() | TEXT | st.just("declared"), "rationale": TEXT}),
    "blob": st.none() | st.just(tree("blob")),
    "output_blob": st.none() | st.just(tree("blob")),
    # issue 39: what an agent was told (a blob and a digest), what a workspace inherited (LIN016)
    ("agent.context", "blob"): st.just(tree("blob")),
    "context_digest": TREE,
    "inherited": st.none()
    | st.lists(
        st.fixed_dictionaries(
            {"kind": st.sampled_from(["cache", "process", "layer"])},
            optional={"workspace_id": REF, "digest": st.none() | TREE, "trusted": st.booleans()},
        ),
        max_size=2,
    ),
    ("evidence.observed", "scope"): JSON.filter(lambda x: x is not None) | st.lists(PURPOSE, max_size=3),
    ("account.claim", "scope"): st.none() | st.lists(PURPOSE, max_size=3),
    "purpose": PURPOSE,
    "idempotency_key": st.sampled_from(["k1", "k2"]),
    "files": st.lists(st.sampled_from(["docs/old.md", "./docs/old.md", "src/a.py"]), max_size=3),
    "overlay_files": st.none() | st.lists(st.sampled_from(["docs/old.md", "src/a.py"]), max_size=2),
    "suites": st.lists(st.sampled_from(["focused", "broad"]), max_size=2),
    "required": st.lists(PURPOSE, max_size=2),
    "connection": st.sampled_from(["sim:x", "fixture:x", "https://live.example"]),
    "namespace": st.sampled_from(["live", "replay:w1"]),
}


# A rule constraining every part, so random receipts meet each part's check (most fail it).
PURE_RULE = {
    "tree": "content_equal_ancestor",
    "environment": "same",
    "command": ["pytest"],
    "inputs": [tree("inputs")],
    "test_isolation": ["pure"],
}


def field_strategy(kind: str, name: str, spec: v.Field) -> st.SearchStrategy:
    if (kind, name) in SPECIAL:
        base = SPECIAL[(kind, name)]
    elif name in SPECIAL:
        base = SPECIAL[name]
    elif spec.enum is not None:
        base = st.sampled_from(spec.enum + tuple(p + "w" for p in spec.prefixes))
    elif spec.type == v.STR:
        is_ref = name.endswith(("_id", "_ids")) or name in v.NAMED_REFERENCES
        base = REF if is_ref else TREE if name in ("tree_digest", "pre_tree", "post_tree") else TEXT
    elif spec.type == v.INT:
        base = st.integers(-2, 5)
    elif spec.type == v.NUMBER:
        base = st.integers(0, 5) | st.floats(0, 5)
    elif spec.type == v.BOOL:
        base = st.booleans()
    elif spec.type == v.LIST:
        base = st.lists(REF if spec.items == v.STR else JSON, max_size=3)
    elif spec.type == v.DICT:
        base = st.dictionaries(KEYS, JSON, max_size=3)
    else:
        base = JSON.filter(lambda x: x is not None)
    return st.none() | base if spec.nullable else base


def event_body(kind: str) -> st.SearchStrategy:
    spec = v.KINDS[kind]
    required = {n: field_strategy(kind, n, f) for n, f in spec.items() if f.required}
    optional = {n: field_strategy(kind, n, f) for n, f in spec.items() if not f.required}
    # Extra fields a harness may add: references the checker must see, and opaque data it must not read.
    optional.update({"extra_id": REF, "extra_ids": st.lists(REF, max_size=2), "extra": st.dictionaries(KEYS, JSON)})
    return st.fixed_dictionaries(required, optional=optional)


EVENT_BODY = st.sampled_from(sorted(v.KINDS)).flatmap(lambda kind: event_body(kind).map(lambda b: (kind, b)))


@st.composite
def runs(draw):
    run = {"id": "run-1", "environment": draw(st.sampled_from(v.ENVIRONMENTS)), "mode": draw(st.sampled_from(v.MODES))}
    run["compatibility_rules"] = draw(
        st.none()
        | st.fixed_dictionaries(
            {"declared": st.fixed_dictionaries({"tree": st.sampled_from(["identical", "content_equal_ancestor"])})},
        )
        | st.just({"declared": PURE_RULE})
    )
    events: list[dict[str, Any]] = []
    objects: set[str] = set()
    for i, (kind, body) in enumerate(draw(st.lists(EVENT_BODY, max_size=40))):
        attempt = draw(st.sampled_from(["a1", "a2"]) if kind == "attempt.started" else st.none() | REF)
        event = {
            "seq": i + 1,
            "id": EVENT_POOL[i] if i < len(EVENT_POOL) else f"h{i}",
            "kind": kind,
            "at": {"logical": "2026-07-01T09:00:00Z", "wall": "2026-07-01T09:00:00Z"},
            "attempt": attempt,
            **body,
        }
        if kind == "command.receipt" and event["completion"] == "completed" and event["post_tree"] is None:
            event["post_tree"] = draw(TREE)  # only an unfinished command may leave it unknown (DESIGN §10)
        introduced = v.introduced_object(event)
        if kind in v.INTRODUCTIONS:
            # The importer refuses an id introduced twice, so a valid run never holds one.
            if introduced is None or introduced[1] in objects or introduced[1] in EVENT_POOL:
                continue
            objects.add(introduced[1])
        event["seq"] = len(events) + 1
        events.append(validate_event(event, line=len(events) + 1))
    return run, events


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_it_never_raises_on_random_mixtures_of_valid_events(case):
    run, events = case
    g = LineageGraph(run)
    for event in events:
        g.add(event)
    found = g.findings()
    assert found == check_events(run, events)
    assert all(f.code in CODES and f.severity == ("warning" if f.code == "LIN011" else "error") for f in found)
    json.dumps([f.to_json() for f in found])
    everything = set(found)
    for event in events:
        if event["kind"] == "effect.intent":
            assert set(g.intent_findings(event["id"])) <= everything


def test_it_checks_a_long_synthetic_run_without_findings():
    events = list(synthetic_events(5_000))
    assert check_events({"id": "run-bench", "environment": "fixture", "mode": "rerun"}, events) == []


# ---------------------------------------------------------------- unevaluated (DESIGN §10)


def test_a_run_without_the_inputs_of_a_check_says_it_was_not_evaluated():
    # A run of two tool calls: no finding anywhere, and that is not a clean bill for the authority checks.
    log = EventLog()
    log.attempt()
    call = log.emit("tool.call", tool="search.docs", request={"q": "x"})
    log.emit("tool.result", call_id=call, outcome="ok")
    g = graph(log)
    assert g.findings() == []
    reasons = {u["code"]: u["reason"] for u in g.unevaluated()}
    assert set(reasons) == set(CODES) - {"LIN011", "LIN014"}  # references and tool results are there to judge
    assert reasons["LIN009"] == "the run holds no workspaces"
    assert reasons["LIN004"] == "the run holds no approvals and no effect intents"
    assert reasons["LIN001"] == (
        "the run holds no evidence admissions, no policy decisions or effect intents and no artifacts"
    )


def test_a_complete_story_leaves_only_what_it_lacks_unevaluated():
    # Workspaces, receipts, admissions, a decision, an approval, an intent and a claim: every authority check had
    # something to judge; only LIN014 (tool results, of which this story has none) did not, nor LIN016 (its workspaces
    # declare nothing about what they inherited).
    log, _ = clean()
    assert "tool.result" not in {e["kind"] for e in log.events}
    assert graph(log).unevaluated() == [
        {"code": "LIN014", "reason": "the run holds no tool results"},
        {"code": "LIN016", "reason": "the run holds no workspaces declaring what they inherited"},
    ]


def test_a_claim_resting_on_an_excluded_tool_is_neither_supported_nor_contradicted():
    # Issue 16: the comparison left such claims out; the checker itself judged them (a LIN008 that the report
    # then had to explain away). Now LIN008 skips them and says which claims it could not judge.
    log = begin()
    receipt = log.receipt("ws1", "t1", suites=("broad",), completion="partial", exit_code=None)
    judged = log.claim([receipt], scope=["validation:broad"], id="judged")
    log.claim(
        [receipt],
        scope=["validation:broad"],
        id="resting",
        unevaluated={"tools": ["status.lookup"], "supports": [receipt]},
    )
    g = graph(log)
    assert {f.from_ for f in of(g.findings(), "LIN008")} == {judged}
    (lin008,) = [u for u in g.unevaluated() if u["code"] == "LIN008"]
    assert lin008["events"] == ["resting"] and "status.lookup" in lin008["reason"]
    assert "neither supported nor contradicted" in lin008["reason"]


def test_a_run_whose_only_claims_rest_on_excluded_tools_has_lin008_unevaluated():
    log = begin()
    receipt = log.receipt("ws1", "t1", suites=("broad",), exit_code=0)
    log.claim([receipt], id="resting", unevaluated={"tools": ["status.lookup"], "supports": [receipt]})
    (lin008,) = [u for u in graph(log).unevaluated() if u["code"] == "LIN008"]
    assert lin008["reason"].startswith("the run holds no validation or completion claims; 1 claim rests on status")
    assert of(check(log), "LIN008") == []
