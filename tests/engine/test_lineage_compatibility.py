"""Compatibility rules (seed 003, "False positives remained possible"): declared by the run's policy, honoured only
when the recorded facts satisfy every part they constrain; otherwise LIN001 stands and says which part failed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from n17q_engine.bundle import BundleError, parse_manifest, validate_event
from n17q_engine.lineage import Finding, check_events

from .eventlib import WALL, EventLog, run_object, tree

FOCUSED_COMMAND = "pytest -q tests/test_adapter.py"
INPUTS = tree("pinned-fixtures")

# Every part constrained: the pure focused suite of seed 003, reusable in a content-identical reconstruction.
PURE_FOCUSED = {
    "tree": "content_equal_ancestor",
    "environment": "same",
    "command": [FOCUSED_COMMAND],
    "inputs": [INPUTS],
    "test_isolation": ["pure"],
    "rationale": "the focused suite reads only the tree and its pinned fixtures",
}


def reuse(
    rules: dict[str, Any] | None = {"pure-focused": PURE_FOCUSED},  # noqa: B006 - read only
    *,
    cite: str = "pure-focused",
    receipt: dict[str, Any] | None = None,
    content_equal: bool = True,
    parent: str | None = "ws1",
    ws2_environment: str = "env@1",
    artifact_tree: str = "t1",
    supersede: bool = False,
) -> tuple[EventLog, str]:
    """Workspace one's focused receipt admitted for workspace two's artifact, citing rule `cite`; the release of the
    artifact uses it. Returns the log and the admission's id."""
    run: dict[str, Any] = {} if rules is None else {"compatibility_rules": rules}
    log = EventLog(**run)
    log.attempt()
    log.workspace("ws1")
    log.change("ws1", "t1")
    facts = {"command": FOCUSED_COMMAND, "inputs_digest": INPUTS, "test_isolation": "pure", **(receipt or {})}
    facts = {k: value for k, value in facts.items() if value is not None}
    focused = log.receipt("ws1", "t1", id="focused-receipt", **facts)
    observation = log.observe(focused, "ws1", "t1")
    if supersede:
        log.lifecycle("ws1", "superseded", id="ws1-superseded")
    log.workspace(
        "ws2", parent=parent, relation="reconstruct", content_equal=content_equal, environment_revision=ws2_environment
    )
    log.change("ws2", artifact_tree)
    admission = log.admit(
        observation,
        "validation:focused",
        "art2",
        "ws1",
        "t1",
        compatibility={"rule": cite, "rationale": "content-identical reconstruction"},
        id="focused-admitted",
    )
    log.artifact("art2", "ws2", artifact_tree)
    log.approval("int1", [admission], id="approval")
    log.intent("art2", [admission], id="int1", approval_id="approval")
    log.decision("int1", [admission], ["validation:focused"], id="decision")
    return log, admission


def lin001(log: EventLog) -> list[Finding]:
    return [f for f in check_events(log.run, log.events) if f.code == "LIN001"]


def test_it_honours_a_declared_rule_whose_facts_all_hold():
    log, _ = reuse()
    assert check_events(log.run, log.events) == []


def test_it_keeps_lin001_when_the_run_declares_no_rules():
    log, admission = reuse(rules=None)
    found = lin001(log)
    assert [(f.from_, f.to) for f in found] == [("int1", admission), ("decision", admission)]
    assert "compatibility rule pure-focused is not declared by the run's policy" in found[0].message
    assert "it declares no compatibility rules" in found[0].message


def test_it_keeps_lin001_for_a_rule_the_policy_does_not_declare():
    log, _ = reuse(cite="any-green-label")
    (message,) = {f.message.split(" relies on ")[1] for f in lin001(log)}  # the decision and the intent agree
    assert "rule any-green-label is not declared" in message and "it declares only pure-focused" in message


def test_it_names_the_tree_when_the_artifact_is_at_another_tree():
    log, _ = reuse(artifact_tree="t2")
    message = lin001(log)[0].message
    assert "rule pure-focused does not hold" in message
    assert f"tree: receipt focused-receipt ran at {tree('t1')}, artifact art2 is at {tree('t2')}" in message


def test_it_names_a_derivation_that_did_not_record_content_equality():
    log, _ = reuse(content_equal=False)
    assert "tree: workspace ws2 was derived from ws1 without content_equal recorded" in lin001(log)[0].message


def test_it_names_a_workspace_that_is_no_ancestor():
    log, _ = reuse(parent=None)
    message = lin001(log)[0].message
    assert "tree: receipt focused-receipt's workspace ws1 is no recorded ancestor of workspace ws2" in message


def test_an_identical_tree_rule_needs_no_derivation():
    log, _ = reuse({"pure-focused": {**PURE_FOCUSED, "tree": "identical"}}, parent=None)
    assert lin001(log) == []


def test_it_names_the_environment_when_it_differs():
    log, _ = reuse(ws2_environment="env@2")
    message = lin001(log)[0].message
    assert "environment: receipt focused-receipt ran in environment env@1, workspace ws2 has env@2" in message
    assert "tree:" not in message and "command:" not in message


def test_it_names_a_command_the_rule_does_not_cover():
    log, _ = reuse(receipt={"command": "pytest -q tests"})
    assert "command: receipt focused-receipt has command 'pytest -q tests', which the rule does not accept" in (
        lin001(log)[0].message
    )


def test_it_names_inputs_and_isolation_the_receipt_does_not_record_or_the_rule_refuses():
    log, _ = reuse(receipt={"inputs_digest": None, "test_isolation": "shared-cache"})
    message = lin001(log)[0].message
    assert "inputs: receipt focused-receipt records no inputs_digest" in message
    assert "test isolation: receipt focused-receipt has test_isolation 'shared-cache'" in message


def test_a_part_the_rule_leaves_out_is_not_constrained():
    log, _ = reuse({"pure-focused": {"tree": "content_equal_ancestor"}}, receipt={"command": "make test"})
    assert lin001(log) == []


def test_a_failing_rule_does_not_excuse_an_invalidated_workspace():
    # LIN006 forgives an invalidation before the admission only for a deliberate re-use the rule supports.
    honoured, _ = reuse(supersede=True)
    assert check_events(honoured.run, honoured.events) == []
    failing, _ = reuse(supersede=True, ws2_environment="env@2")
    codes = {(f.code, f.from_) for f in check_events(failing.run, failing.events)}
    assert {("LIN001", "int1"), ("LIN006", "int1"), ("LIN006", "decision")} <= codes


def test_a_reconstruction_is_judged_by_the_recorded_runs_rules():
    log, _ = reuse()
    rules = log.run["compatibility_rules"]
    reconstruction = run_object(
        run_id="run-1~r1",
        environment="sandbox",
        mode="reconstruction",
        reconstructs={"id": "run-1", "environment": "fixture", "mode": "rerun"},
        compatibility_rules=rules,
    )
    assert check_events(reconstruction, log.events) == []


def manifest(rules: Any) -> bytes:
    return json.dumps(
        {"format": "n17q.run-bundle/1", "run": run_object(compatibility_rules=rules), "blobs": {}}
    ).encode()


@pytest.mark.parametrize(
    ("rules", "field", "says"),
    [
        ([], "run.compatibility_rules", "must be an object keyed by rule name"),
        ({"r": {"environment": "same"}}, "run.compatibility_rules.r.tree", "is required"),
        ({"r": {"tree": "similar"}}, "run.compatibility_rules.r.tree", "identical | content_equal_ancestor"),
        ({"r": {"tree": "identical", "label": "green"}}, "run.compatibility_rules.r.label", "is not a part"),
        ({"r": {"tree": "identical", "command": []}}, "run.compatibility_rules.r.command", "non-empty list"),
        ({"r": {"tree": "identical", "inputs": [3]}}, "run.compatibility_rules.r.inputs[0]", "non-empty string"),
    ],
)
def test_the_manifest_refuses_a_rule_it_could_not_check(rules, field, says):
    with pytest.raises(BundleError) as info:
        parse_manifest(manifest(rules))
    assert f"field {field}" in str(info.value) and says in str(info.value)


def test_the_manifest_keeps_a_valid_declaration():
    parsed = parse_manifest(manifest({"pure-focused": PURE_FOCUSED}))
    assert parsed.run["compatibility_rules"]["pure-focused"]["tree"] == "content_equal_ancestor"


# --- post_tree: unknown stays unknown (DESIGN §10) --------------------------------------------------------------------


def receipt_event(**fields: Any) -> dict:
    event = {
        "seq": 1,
        "id": "r1",
        "kind": "command.receipt",
        "at": {"logical": WALL, "wall": WALL},
        "attempt": None,
        "call_id": None,
        "workspace_id": "ws1",
        "command": "pytest",
        "suites": ["broad"],
        "pre_tree": tree("t1"),
        "post_tree": None,
        "environment_revision": "env@1",
        "completion": "termination_unknown",
        "exit_code": None,
        "results": {},
        "output_blob": None,
    }
    event.update(fields)
    return event


def test_an_unfinished_receipt_may_leave_its_post_tree_null():
    assert validate_event(receipt_event(), line=1)["post_tree"] is None


def test_a_completed_receipt_must_name_its_post_tree():
    with pytest.raises(BundleError) as info:
        validate_event(receipt_event(completion="completed", exit_code=0), line=3)
    assert "line 3, field post_tree" in str(info.value) and "completion is completed" in str(info.value)


def test_a_null_post_tree_never_matches_an_artifact_without_a_tree():
    # Before: an unknown tree on both sides compared equal and the admission passed as the artifact's own evidence.
    log = EventLog()
    log.attempt()
    log.workspace("ws1")
    receipt = log.emit(
        "command.receipt",
        **{k: v for k, v in receipt_event(completion="partial").items() if k not in ("seq", "id", "kind", "at")},
    )
    observation = log.observe(receipt, "ws1")
    admission = log.admit(observation, "diagnosis", "art1", None, None, id="adm")
    log.artifact("art1", "ws1", None)
    log.intent("art1", [admission], id="int1")
    assert [(f.code, f.to) for f in check_events(log.run, log.events) if f.code == "LIN001"] == [("LIN001", "adm")]


def test_the_converters_word_for_an_unknown_tree_matches_nothing():
    log = EventLog()
    log.attempt()
    log.workspace("ws1")
    fields = receipt_event(completion="completed", exit_code=0, pre_tree="unknown", post_tree="unknown")
    receipt = log.emit("command.receipt", **{k: v for k, v in fields.items() if k not in ("seq", "id", "kind", "at")})
    observation = log.observe(receipt, "ws1")
    admission = log.admit(observation, "validation:focused", "art1", None, None, id="adm")
    log.emit("artifact.created", artifact_id="art1", workspace_id="ws1", tree_digest="unknown", id="art1-created")
    log.intent("art1", [admission], id="int1")
    assert [(f.code, f.to) for f in check_events(log.run, log.events) if f.code == "LIN001"] == [("LIN001", "adm")]
