"""Issue 19, points 3 and 10 through the importer and the `lineage` command: declared compatibility rules, LIN001
naming the rule and the part that failed, LIN015, and a receipt whose post-run tree stayed unknown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from n17q_engine.bundle import BundleError
from runs.importer import run_import_from_path
from runs.models import Event, Finding, Run
from tests import bundles
from tests.engine.eventlib import EventLog

pytestmark = pytest.mark.django_db

RULE = {"tree": "content_equal_ancestor", "environment": "same", "command": ["pytest -q tests/test_adapter.py"]}


def reuse_log(rules: dict[str, Any] | None, *, ws2_environment: str = "env@1") -> EventLog:
    """Workspace one's focused receipt, admitted for workspace two's artifact citing rule `pure-focused`."""
    log = EventLog(**({} if rules is None else {"compatibility_rules": rules}))
    log.attempt()
    log.workspace("ws1")
    log.change("ws1", "t1")
    receipt = log.receipt("ws1", "t1", command="pytest -q tests/test_adapter.py", id="focused-receipt")
    observation = log.observe(receipt, "ws1", "t1")
    log.workspace("ws2", parent="ws1", relation="reconstruct", content_equal=True, environment_revision=ws2_environment)
    log.change("ws2", "t1")
    admission = log.admit(
        observation,
        "validation:focused",
        "art2",
        "ws1",
        "t1",
        compatibility={"rule": "pure-focused", "rationale": "content-identical reconstruction"},
        id="focused-admitted",
    )
    log.artifact("art2", "ws2", "t1")
    log.approval("int1", [admission], id="approval")
    log.intent("art2", [admission], id="int1", approval_id="approval")
    return log


def write(tmp_path: Path, log: EventLog, name: str = "b") -> Path:
    manifest = {"format": "n17q.run-bundle/1", "run": log.run, "blobs": {}}
    return bundles.write_folder(tmp_path / name, manifest, log.events, {})


def lin001(answer: dict[str, Any]) -> list[dict[str, str]]:
    return [f for f in answer["findings"] if f["code"] == "LIN001"]


def test_an_admission_citing_a_rule_no_policy_declares_keeps_lin001(tmp_path):
    answer = run_import_from_path(write(tmp_path, reuse_log(None))).to_json()
    (found,) = lin001(answer)
    assert (found["from"], found["to"]) == ("int1", "focused-admitted")
    assert (
        "rule pure-focused is not declared by the run's policy (it declares no compatibility rules)"
        in (found["message"])
    )
    stored = Finding.objects.get(run__run_id="run-1", code="LIN001")
    assert "pure-focused" in stored.message


def test_a_declared_rule_whose_facts_hold_is_honoured_and_one_whose_environment_differs_is_not(tmp_path):
    honoured = run_import_from_path(write(tmp_path, reuse_log({"pure-focused": RULE}), "ok")).to_json()
    assert honoured["findings"] == []
    failing = reuse_log({"pure-focused": RULE}, ws2_environment="env@2")
    failing.run["id"] = "run-2"
    answer = run_import_from_path(write(tmp_path, failing, "bad")).to_json()
    (found,) = lin001(answer)
    assert "rule pure-focused does not hold" in found["message"]
    assert (
        "environment: receipt focused-receipt ran in environment env@1, workspace ws2 has env@2" in (found["message"])
    )


def test_the_manifest_keeps_its_declared_rules_for_later_checks(tmp_path, capsys):
    failing = reuse_log({"pure-focused": RULE}, ws2_environment="env@2")
    run_import_from_path(write(tmp_path, failing))
    assert Run.objects.get(run_id="run-1").manifest_run["compatibility_rules"] == {"pure-focused": RULE}
    call_command("lineage", "run-1", "--json")
    answer = json.loads(capsys.readouterr().out)
    assert [f["code"] for f in answer["findings"]] == ["LIN001"]
    assert "environment:" in answer["findings"][0]["message"]


def test_a_bundle_declaring_a_rule_the_checker_could_not_check_is_refused(tmp_path, _blob_store):
    log = reuse_log({"pure-focused": {**RULE, "looks": "green"}})
    with pytest.raises(BundleError) as info:
        run_import_from_path(write(tmp_path, log))
    assert "field run.compatibility_rules.pure-focused.looks" in str(info.value)
    assert Run.objects.count() == 0 and Event.objects.count() == 0


def unknown_termination_log(*, completion: str) -> EventLog:
    """A green broad receipt, then a rerun on the same tree whose termination is unknown and whose post-run tree is
    null, then a claim about the artifact citing only the green one. `completion` overrides the rerun's afterwards
    (the event log refuses to write an invalid event)."""
    log = EventLog()
    log.attempt()
    log.workspace("ws1")
    log.change("ws1", "t1")
    green = log.receipt("ws1", "t1", suites=("broad",), id="green-broad")
    log.observe(green, "ws1", "t1", scope="validation:broad")
    log.artifact("art1", "ws1", "t1")
    log.receipt(
        "ws1", "t1", suites=("broad",), completion="termination_unknown", exit_code=None, post_tree=None, id="timed-out"
    )
    log.events[-1]["completion"] = completion
    log.claim([green], scope=["validation:broad"], artifact_id="art1", id="claim")
    return log


def test_a_timed_out_receipt_with_no_post_tree_imports_and_contradicts_the_claim(tmp_path):
    answer = run_import_from_path(write(tmp_path, unknown_termination_log(completion="termination_unknown"))).to_json()
    assert Event.objects.get(run__run_id="run-1", event_id="timed-out").body["post_tree"] is None
    (found,) = [f for f in answer["findings"] if f["code"] == "LIN015"]
    assert (found["from"], found["to"]) == ("claim", "timed-out")
    assert "speaks for artifact art1" in found["message"] and "did not complete" in found["message"]


def test_a_completed_receipt_without_a_post_tree_is_refused_naming_the_line(tmp_path, _blob_store):
    with pytest.raises(BundleError) as info:
        run_import_from_path(write(tmp_path, unknown_termination_log(completion="completed")))
    assert "events.jsonl line 7, field post_tree" in str(info.value) and "completion is completed" in str(info.value)
    assert Run.objects.count() == 0
