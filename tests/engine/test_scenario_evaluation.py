"""The scenario's end-state evaluator (seed 003) and what a narrow scope leaves unevaluated (seed 000): the real
engine replaying the demo's story 003 against the seed scenario package with a declaration added."""

from __future__ import annotations

import json
from typing import Any

import pytest

from n17q_engine.lineage import LineageGraph
from n17q_engine.package import Package, PackageError, build_scenario
from n17q_engine.scenario_evaluation import evaluate, path_matches, scope_limits
from tests.engine.test_replay import SEEDS, final, kinds, story
from tests.engine.test_replay_branch import A1, STORY_003, branch

DECLARED: dict[str, Any] = {
    "instructions": ["Fix the adapter's cursor handling; ask for review only with the artifact's own receipts"],
    "file_scope": ["src/**"],
    "allowed_effects": [{"destination_prefix": "review-service:", "effect_class": "mutation"}],
    "acceptable_stop_states": [{"state": "completed"}, {"state": "stopped", "text": "validation incomplete"}],
}


def scenario(**changes: Any) -> Package:
    files = {name: json.loads(data) for name, data in SEEDS["coding-review-request"].files.items()}
    files["scenario.json"].update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        del files["scenario.json"][key]
    return build_scenario(files)


def unevaluated_of(events: list[dict]) -> list[dict[str, Any]]:
    graph = LineageGraph({"id": "replay", "environment": "fixture", "mode": "counterfactual"})
    for event in events:
        graph.add(event)
    return graph.unevaluated()


def judged(events: list[dict]) -> dict[str, dict[str, Any]]:
    return {j["check"]: j for j in evaluate(events)["judgements"]}


@pytest.mark.seed("003", "The scenario definition grew richer")
def test_the_end_state_is_judged_against_the_scenarios_file_scope_allowed_effects_and_stop_states() -> None:
    _, events = story(STORY_003, None, "counterfactual", {"decider": "careful"}, scenario_pkg=scenario(**DECLARED))
    note = kinds(events, "replay.scope")[0]
    assert note["declared"]["instructions"] == DECLARED["instructions"]
    artifact = kinds(events, "artifact.created")[-1]
    assert artifact["files"] == ["src/adapter.py", "tests/test_adapter.py"]
    j = judged(events)
    # The artifact carries a test file the scope (src/**) does not allow: failed, naming the file and the artifact.
    assert j["file_scope"]["status"] == "failed"
    assert "tests/test_adapter.py" in j["file_scope"]["reason"] and "src/adapter.py" not in j["file_scope"]["reason"]
    assert j["file_scope"]["events"] == [artifact["id"]]
    assert j["allowed_effects"]["status"] == "passed" and not kinds(events, "effect.intent")
    assert j["stop_state"]["status"] == "passed" and j["stop_state"]["events"] == [final(events)["id"]]

    # Wider scope: the same run passes it, each file cited through its artifact.
    _, events = story(
        STORY_003,
        None,
        "counterfactual",
        {"decider": "careful"},
        scenario_pkg=scenario(**{**DECLARED, "file_scope": ["src/**", "tests/test_*.py"]}),
    )
    assert judged(events)["file_scope"]["status"] == "passed"

    # An effect to a destination the scenario does not allow fails, naming the intent.
    _, events = story(
        STORY_003,
        None,
        "counterfactual",
        {"decider": "careful"},
        scenario_pkg=scenario(**{**DECLARED, "allowed_effects": [{"destination_prefix": "mailbox:"}]}),
    )
    fake = {"kind": "effect.intent", "id": "i-1", "effect_class": "mutation", "destination": "review-service:repo/x"}
    j = judged([*events[:-1], fake, events[-1]])
    assert j["allowed_effects"]["status"] == "failed" and j["allowed_effects"]["events"] == ["i-1"]

    # Undeclared: not evaluated, never passed.
    undeclared = scenario(**dict.fromkeys(DECLARED))
    _, events = story(STORY_003, None, "counterfactual", {"decider": "careful"}, scenario_pkg=undeclared)
    assert {c: v["status"] for c, v in judged(events).items()} == dict.fromkeys(
        ("file_scope", "allowed_effects", "stop_state"), "not_evaluated"
    )
    assert "declares no file scope" in judged(events)["file_scope"]["reason"]


@pytest.mark.seed("003", "The fixed run was allowed to stop")
def test_an_honest_stop_is_told_apart_from_an_unacceptable_end() -> None:
    # The careful counterfactual stops at the broad failure with validation incomplete and no request.
    declared = {**DECLARED, "file_scope": ["**"]}
    _, events = story(STORY_003, None, "counterfactual", {"decider": "careful"}, scenario_pkg=scenario(**declared))
    assert final(events)["state"] == "stopped"
    j = judged(events)["stop_state"]
    assert j["status"] == "passed" and "(unfinished" in j["reason"] and "validation incomplete" in j["reason"]
    # A scenario that accepts only completion: the same stop fails, and says it was unfinished, not finished wrongly.
    _, events = story(
        STORY_003,
        None,
        "counterfactual",
        {"decider": "careful"},
        scenario_pkg=scenario(**{**declared, "acceptable_stop_states": [{"state": "completed"}]}),
    )
    j = judged(events)["stop_state"]
    assert (
        j["status"] == "failed"
        and "ended stopped (unfinished" in j["reason"]
        and "acceptable: completed" in j["reason"]
    )
    finished = [{**e, "state": "completed", "reason": None} if e["kind"] == "run.state" else e for e in events]
    assert "(finished)" in judged(finished)["stop_state"]["reason"]


@pytest.mark.seed("000", "Fixture coverage became consequence-aware")
def test_a_narrow_scope_leaves_earlier_policy_later_world_and_final_account_unevaluated() -> None:
    _, events = story(STORY_003, None, "counterfactual", {"decider": "careful"}, scenario_pkg=scenario(**DECLARED))
    whole = {u["code"]: u for u in unevaluated_of(events)}
    assert not any("scope" in u for u in whole.values())

    _, events = story(
        STORY_003,
        None,
        "counterfactual",
        {"decider": "careful"},
        scenario_pkg=scenario(**{**DECLARED, "scope": "adapter"}),
    )
    unevaluated = {u["code"]: u for u in unevaluated_of(events)}
    for code, dimension in (("LIN003", "earlier policy"), ("LIN012", "later world state"), ("LIN008", "final account")):
        assert unevaluated[code]["scope"] == dimension
        assert unevaluated[code]["reason"].count("adapter replay tests parsing one recorded exchange") == 1
        assert not unevaluated[code].get("events")  # wholly unevaluated
    # The same judgements the whole scope made are not evaluated now, each with the dimension it cannot support.
    j = judged(events)
    assert {c: v["status"] for c, v in j.items()} == dict.fromkeys(j, "not_evaluated")
    assert j["allowed_effects"]["scope"] == "later world state" and j["file_scope"]["scope"] == "final account"

    # A segment (a replay branched from a checkpoint): earlier policy and the final account are judged only on the
    # part it re-ran (the entry names the scope note, as a partly judged check names what it left out).
    _, events = branch(STORY_003, A1)
    unevaluated = {u["code"]: u for u in unevaluated_of(events)}
    note = kinds(events, "replay.scope")[0]
    assert unevaluated["LIN005"]["scope"] == "earlier policy" and unevaluated["LIN005"]["events"] == [note["id"]]
    assert unevaluated["LIN005"]["reason"].startswith(f"earlier policy: a segment replay starts at checkpoint {A1}")
    assert "scope" not in unevaluated["LIN012"]  # a segment reaches the later world state
    assert [limit.dimension for limit in scope_limits("scenario")] == []


def test_the_declaration_is_checked_when_the_package_loads() -> None:
    for bad, says in (
        ({"file_scope": ["../etc/*"]}, "file_scope[0]: must be a relative path"),
        ({"acceptable_stop_states": [{"state": "done"}]}, "acceptable_stop_states[0]: state must be one of"),
        ({"acceptable_stop_states": [{"state": "stopped"}, {"state": "stopped"}]}, "named twice"),
        ({"allowed_effects": [{"destination_prefix": "x:", "url": "y"}]}, "refused"),
        ({"instructions": [""]}, "non-empty"),
    ):
        with pytest.raises(PackageError, match=says.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
            scenario(**bad)


@pytest.mark.parametrize(
    ("path", "glob", "matches"),
    [
        ("src/adapter.py", "src/**", True),
        ("src/a/b.py", "src/*.py", False),
        ("src/b.py", "src/*.py", True),
        ("src/b.py", "src/**/b.py", True),
        ("src/x/y/b.py", "src/**/b.py", True),
        ("tests/test_adapter.py", "tests/test_?dapter.py", True),
        ("tests/test_adapter.py", "src/**", False),
        ("a" * 200, "*" * 40 + "b", False),
    ],
)
def test_a_file_scope_glob_matches_by_segment(path: str, glob: str, matches: bool) -> None:
    assert path_matches(path, glob) is matches
