"""LIN016 (untrusted state inherited) and LIN017 (tests changed by the agent): what a workspace took over from
another, and whether the agent touched the tests that judge its work (seed 003)."""

from __future__ import annotations

import pytest

from n17q_engine.canonical import digest_json
from n17q_engine.lineage import Finding, LineageGraph, check_events
from n17q_engine.path_globs import matches_any

from .eventlib import EventLog

LAYER = digest_json({"layer": "python-deps@1"})


def check(log: EventLog) -> list[Finding]:
    return check_events(log.run, log.events)


def of(findings: list[Finding], code: str) -> list[tuple[str, str, str]]:
    return [(f.from_, f.to, f.message) for f in findings if f.code == code]


def unevaluated(log: EventLog) -> dict[str, str]:
    graph = LineageGraph(log.run)
    for event in log.events:
        graph.add(event)
    return {u["code"]: u["reason"] for u in graph.unevaluated()}


def two_workspaces(inherited: list[dict]) -> EventLog:
    log = EventLog()
    log.attempt()
    log.workspace("ws1", id="ws1-created", inherited=[])
    log.receipt("ws1", "t1", completion="termination_unknown", exit_code=None, post_tree=None)
    log.lifecycle("ws1", "quarantined")
    log.attempt("a2")
    log.workspace("ws2", parent="ws1", id="ws2-created", inherited=inherited, attempt="a2")
    return log


# ---------------------------------------------------------------- LIN016 untrusted state inherited


@pytest.mark.seed("003", "Attempt cleanup became explicit")
def test_a_workspace_inheriting_a_cache_or_process_without_a_trusted_immutable_layer_is_a_finding():
    log = two_workspaces(
        [
            {"kind": "cache", "workspace_id": "ws1", "digest": None, "trusted": False},
            {"kind": "process", "workspace_id": "ws1", "digest": None, "trusted": True},
            {"kind": "cache", "workspace_id": "ws1", "digest": digest_json({"cache": "pip"}), "trusted": False},
        ]
    )
    found = of(check(log), "LIN016")
    assert [(f, t) for f, t, _ in found] == [("ws2-created", "ws1-created")] * 3
    messages = sorted(m for _, _, m in found)
    untrusted = next(m for m in messages if "inherits cache from workspace ws1" in m)
    assert "not trusted and not content-addressed" in untrusted
    assert any("inherits process from workspace ws1" in m and "never an immutable layer" in m for m in messages)
    assert any("inherits cache sha256:" in m and "it is not trusted, so no trusted immutable" in m for m in messages)
    assert "LIN016" not in unevaluated(log)


@pytest.mark.seed("003", "Attempt cleanup became explicit")
def test_a_trusted_immutable_dependency_layer_may_be_inherited():
    log = two_workspaces(
        [
            {"kind": "layer", "name": "python-deps", "digest": LAYER, "trusted": True},
            {"kind": "cache", "workspace_id": "ws1", "digest": LAYER, "trusted": True},
        ]
    )
    assert of(check(log), "LIN016") == []
    # Not clean by default: a run whose workspaces declare nothing about what they inherited was not judged.
    silent = EventLog()
    silent.attempt()
    silent.workspace("ws1")
    assert unevaluated(silent)["LIN016"] == "the run holds no workspaces declaring what they inherited"
    assert "LIN016" not in unevaluated(log)


# ---------------------------------------------------------------- LIN017 tests changed by the agent


def with_edit(files: list[str], **run) -> tuple[EventLog, str, str]:
    log = EventLog(**run)
    log.attempt()
    log.workspace("ws1", id="ws1-created", overlay_files=["tests/test_inherited.py"])
    change = log.change("ws1", "t1", files=files)
    artifact = log.artifact("art1", "ws1", "t1", id="art1-created", files=files)
    return log, change, artifact


@pytest.mark.seed("003", "Human approval stopped being a ceremonial button")
def test_an_agent_editing_the_repository_tests_in_its_workspace_is_flagged():
    log, change, artifact = with_edit(["src/adapter.py", "tests/test_adapter.py", "pkg/conftest.py"])
    found = of(check(log), "LIN017")
    assert [(f, t) for f, t, _ in found] == [(change, "ws1-created"), (artifact, "ws1-created")]
    assert "changes tests/test_adapter.py, pkg/conftest.py in workspace ws1" in found[1][2]
    assert "src/adapter.py" not in found[1][2]

    # The initial overlay's test file is not the agent's edit (LIN010 judges it), and source files are not tests.
    inherited, _, _ = with_edit(["src/adapter.py", "tests/test_inherited.py"])
    assert of(check(inherited), "LIN017") == []


@pytest.mark.seed("003", "Human approval stopped being a ceremonial button")
def test_a_task_that_requires_test_changes_or_names_its_own_test_paths_is_judged_by_its_word():
    required, _, _ = with_edit(
        ["tests/test_adapter.py"], task={"id": "t", "revision": "1", "requires_test_changes": True}
    )
    assert of(check(required), "LIN017") == []

    # The task's globs replace the defaults: its tests live in spec/, and tests/ is an ordinary folder there.
    own = {"id": "t", "revision": "1", "test_paths": ["spec/**"]}
    renamed, _, artifact = with_edit(["tests/test_adapter.py", "spec/adapter_spec.rb"], task=own)
    assert [(f, m.split(" in workspace")[0]) for f, _, m in of(check(renamed), "LIN017")][-1] == (
        artifact,
        f"Artifact {artifact} changes spec/adapter_spec.rb",
    )
    # The scenario may name them too; the task's word wins over the scenario's.
    scenario = {"name": "s", "version": 1, "test_paths": ["qa/**"]}
    by_scenario, _, _ = with_edit(["qa/check.py"], scenario=scenario)
    assert len(of(check(by_scenario), "LIN017")) == 2
    overridden, _, _ = with_edit(
        ["qa/check.py"], scenario=scenario, task={"id": "t", "revision": "1", "test_paths": []}
    )
    assert of(check(overridden), "LIN017") == []


def test_the_test_path_globs_match_folders_and_file_names_at_any_depth():
    globs = ("tests/**", "**/test_*.py", "**/*.spec.ts")
    matched = ("tests/a.py", "tests/x/y.py", "test_a.py", "a/b/test_c.py", "web/x.spec.ts")
    assert all(matches_any(p, globs) for p in matched)
    assert not any(matches_any(p, globs) for p in ("src/tests.py", "src/a_test_b.py", "latest/x.py", "web/x.spec.tsx"))
    assert not matches_any("tests/a.py", ())
