"""What a replay does with a value it needs and does not have, and what an agent in a replay is told (seeds 000, 003).

- A scenario's `required_values` (scenario.json): a fixture answering with a required value absent, or an excluded
  tool whose value is required, stops the replay as an incomplete test world; without the requirement the replay
  goes on, the absence on the record.
- The agent's answer carries the result's absent markings and an exclusion's reason, never a placeholder.
- The agent's task document states where it stands (workspace, receipts with exact suites, partial evidence, the
  suites to rerun), and is recorded as an `agent.context` event with a blob.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from n17q_engine.agent.decider import _Drive
from n17q_engine.agent.task import task_context, task_prompt
from n17q_engine.deciders import SourceRun
from n17q_engine.package import PackageError, build_scenario, load_scenario
from tests.engine import replaylib as rl
from tests.engine.test_replay import BUNDLES, SEEDS, final, kinds, replay, story

# --- seed 000: a required value absent stops the replay -----------------------------------------------------------


def _redacting_search(**meta: Any) -> tuple[Any, dict, bytes]:
    request = rl.search_request("rotate signing keys")
    answer = rl.fixture("f-redacted", request, {"hits": None, "total": 3})
    answer["response"]["absent"] = {"body.hits": "redacted"}
    pkg = rl.scenario(fixtures=[answer], **meta)
    manifest, events = rl.source_run([("docs.search", 1, request)])
    return pkg, manifest, events


@pytest.mark.seed("000", "Unknown fixture data stayed unknown")
def test_a_required_value_the_fixture_marks_absent_stops_the_replay_instead_of_going_on_without_it():
    need = [{"tool": "docs.search", "path": "body.hits", "reason": "the answer cites the hits"}]
    pkg, manifest, events = _redacting_search(required_values=need)
    _out, log = replay(rl.replay_package(pkg, manifest, events))

    (result,) = kinds(log, "tool.result")  # the answer is on the record, with its absence
    assert result["absent"] == {"body.hits": "redacted"}
    (missing,) = kinds(log, "fixture.missing")
    assert missing["call_id"] == result["call_id"]
    assert missing["required_value"] == {"path": "body.hits", "absent_path": "body.hits", "kind": "redacted"}
    assert "required value redacted: fixture f-redacted answers with body.hits redacted" in missing["reason"]
    assert final(log)["state"] == "incomplete_test_world"

    # Without the requirement the same absence is recorded and the replay goes on: nothing was needed of it.
    pkg, manifest, events = _redacting_search()
    _out, log = replay(rl.replay_package(pkg, manifest, events))
    assert kinds(log, "fixture.missing") == [] and final(log)["state"] == "completed"
    assert kinds(log, "tool.result")[0]["absent"] == {"body.hits": "redacted"}


@pytest.mark.seed("000", "Unknown fixture data stayed unknown")
def test_an_excluded_read_whose_value_the_scenario_requires_stops_rather_than_carry_on_with_unknown():
    files = {name: json.loads(data) for name, data in SEEDS["docs-research"].files.items()}
    files["scenario.json"]["version"] = 2
    files["scenario.json"]["excluded_tools"] = [{"tool": "status.lookup", "reason": "status is out of scope"}]
    files["scenario.json"]["required_values"] = [
        {"tool": "status.lookup", "path": "body.state", "reason": "the account reports the request's state"}
    ]
    _out, log = story("run-000-recorded", None, scenario_pkg=build_scenario(files))

    (missing,) = kinds(log, "fixture.missing")
    assert missing["tool"] == "status.lookup" and missing["excluded"]["tool"] == "status.lookup"
    assert "the scenario requires body.state of its answer" in missing["reason"]
    assert final(log)["state"] == "incomplete_test_world"
    assert [r["outcome"] for r in kinds(log, "tool.result")] == ["ok"]  # the docs search; no `unknown` placeholder

    files["scenario.json"]["required_values"] = [{"tool": "no.such", "path": "body", "reason": "x"}]
    with pytest.raises(PackageError, match=r"required_values\[0\]: no.such is not a contract"):
        build_scenario(files)


class _Record:
    """The engine's log as `_Drive._result_of_last_call` reads it: the last event of each kind."""

    def __init__(self, *events: dict[str, Any]) -> None:
        self._last = {e["kind"]: e for e in events}

    def last(self, kind: str) -> dict[str, Any] | None:
        return self._last.get(kind)


def _answer(*events: dict[str, Any], fixtures: dict | None = None) -> dict[str, Any]:
    drive = _Drive.__new__(_Drive)
    drive.view = _Record(*events)  # type: ignore[assignment]
    drive.fixtures = fixtures or {}
    return drive._result_of_last_call()


@pytest.mark.seed("000", "Unknown fixture data stayed unknown")
def test_the_agent_receives_the_same_bounded_absence_the_record_holds():
    call = {"kind": "tool.call", "id": "c1", "tool": "crm.lookup"}
    fixture = load_scenario(_redacting_search()[0]).fixtures[0]
    redacted = {
        "kind": "tool.result",
        "call_id": "c1",
        "outcome": "ok",
        "fixture": fixture.id,
        "absent": {"body.hits": "redacted"},
    }
    answer = _answer(call, redacted, fixtures={fixture.id: fixture})
    assert answer == {"outcome": "ok", "body": {"hits": None, "total": 3}, "absent": {"body.hits": "redacted"}}

    excluded = {
        "kind": "tool.result",
        "call_id": "c1",
        "outcome": "unknown",
        "absent": {"body": "not_applicable"},
        "excluded": {"tool": "crm.lookup", "reason": "out of scope"},
    }
    assert _answer(call, excluded) == {
        "outcome": "unknown",
        "body": None,
        "absent": {"body": "not_applicable"},
        "excluded": {"tool": "crm.lookup", "reason": "out of scope", "evaluated": False},
    }
    # An answer with nothing absent reads as before: no empty marking added.
    plain = {"kind": "tool.result", "call_id": "c1", "outcome": "ok", "fixture": fixture.id, "absent": {}}
    assert "absent" not in _answer(call, plain, fixtures={fixture.id: fixture})


# --- seed 003: the context states where the agent stands ------------------------------------------------------------


@pytest.mark.seed("003", "The fix worked without a better model")
def test_the_agent_is_told_its_workspace_the_exact_test_scope_partial_evidence_and_what_needs_a_rerun():
    b = BUNDLES["run-003-review-request"]
    cut = next(i for i, e in enumerate(b.events) if e["id"] == "e-003-ws-2-created") + 1
    source = SourceRun(b.manifest, b.events[cut:], history=b.events[:cut])
    context = task_context(source, load_scenario(SEEDS["coding-review-request"]), ["shell.run"])

    evidence = context["evidence"]
    assert evidence["workspace_to_work_in"] == "ws-2"
    assert [(w["workspace"], w["state"], w["derived_from"]) for w in evidence["workspaces"]] == [
        ("ws-1", "uncertain", None),
        ("ws-2", "active", "ws-1"),
    ]
    focused, broad = evidence["receipts"]
    assert focused["suites"] == ["adapter"] and focused["workspace"] == "ws-1" and not focused["partial"]
    assert broad["suites"] == ["unit", "contract", "integration"] and broad["command"] == "pytest -q tests"
    assert broad["partial"] is True and broad["completion"] == "termination_unknown"
    rerun = {r["suite"]: r["why"] for r in evidence["rerun_required"]}
    assert set(rerun) == {"adapter", "unit", "contract", "integration"}
    assert rerun["integration"] == "it never ran in ws-2; it ran only in ws-1"

    prompt = task_prompt(context)
    assert "Workspace ws-2 (the workspace to work in): active, reconstruct of ws-1." in prompt
    assert "did NOT complete (termination_unknown): partial evidence, 212 passed, 1 failed before it stopped" in prompt
    assert "Rerun required: suite integration in ws-2: it never ran in ws-2; it ran only in ws-1." in prompt

    # Where the recorded run ran the focused suite at the workspace's own tree, nothing needs a rerun.
    checkpoint = next(i for i, e in enumerate(b.events) if e["kind"] == "checkpoint") + 1
    early = task_context(
        SourceRun(b.manifest, b.events[checkpoint:], history=b.events[:checkpoint]),
        load_scenario(SEEDS["coding-review-request"]),
        [],
    )["evidence"]
    assert early["workspace_to_work_in"] == "ws-1" and early["rerun_required"] == []
