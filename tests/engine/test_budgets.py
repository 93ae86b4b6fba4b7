"""Budgets cumulative across attempts, with a recovery reserve, charged for the replay's own work too (issue 19,
seed 003 "Budgets exposed recovery cost")."""

from __future__ import annotations

import json

import pytest

from n17q_engine.canonical import canonical_json
from n17q_engine.package import PackageError, build_scenario
from tests.engine import replaylib as rl
from tests.engine.test_replay import BUNDLES, SEEDS, final, kinds, replay

STORY_003 = "run-003-review-request"


def coding_with(**meta):
    files = {n: json.loads(d) for n, d in SEEDS["coding-review-request"].files.items()}
    files["scenario.json"].update(meta)
    return build_scenario(files)


def careful_003(scenario_pkg=None, *, mode="counterfactual", vary=None, replay_id="replay-1"):
    b = BUNDLES[STORY_003]
    events = b"".join(canonical_json(e) + b"\n" for e in b.events)
    pkg = rl.replay_package(
        scenario_pkg or SEEDS["coding-review-request"],
        b.manifest,
        events,
        blobs=b.blobs,
        mode=mode,
        vary={"decider": "careful"} if vary is None else vary,
        replay_id=replay_id,
    )
    return replay(pkg)


def charges(log):
    return kinds(log, "budget.charged")


def test_the_careful_counterfactual_pays_for_its_own_validation_reruns_as_recovery():
    _out, log = careful_003()
    own = [c for c in charges(log) if c["origin"] == "replay"]
    # a turn for each proposal of its own, and each rerun suite's compute in workspace two: the focused (8 s),
    # then, back to planning after the denial, the broad (611 s)
    assert [(c["resource"], c["amount"]) for c in own] == [
        ("turns", 1),
        ("compute_s", 8),
        ("turns", 1),
        ("compute_s", 611),
    ]
    rerun = own[-1]
    receipt = next(e for e in log if e["id"] == rerun["cause"])
    assert receipt["kind"] == "command.receipt" and receipt["workspace_id"] == "ws-2"
    assert receipt["command"] == "pytest -q tests"
    # a2 recovers from a1 and a2.replan-1 from a2's denial: what they spend is recovery cost
    assert rerun["attempt"] == "a2.replan-1" and all(c["recovery"] for c in own)
    # cumulative across attempts: a1's recorded 912 s, then the two reruns
    assert rerun["spent_total"] == 912 + 8 + 611
    budget = final(log)["budget"]
    assert budget["compute_s"] == {
        "spent": 1531,
        "replay_own": 619,
        "recovery": 619,
        "limit": None,
        "recovery_reserve": None,
    }
    assert budget["turns"] == {"spent": 2, "replay_own": 2, "recovery": 2, "limit": None, "recovery_reserve": None}


def test_a_rerun_with_the_recorded_decisions_charges_only_what_the_recording_charged():
    _out, log = careful_003(mode="rerun", vary={})
    assert {c["origin"] for c in charges(log)} == {"recorded"}
    recorded = [e for e in BUNDLES[STORY_003].events if e["kind"] == "budget.charged"]
    # the rerun stops at the denied request, before a2's last recorded charge
    replayed = [(c["resource"], c["amount"], c["attempt"], c["recovery"]) for c in charges(log)]
    assert (
        replayed
        == [(e["resource"], e["amount"], e["attempt"], e["attempt"] == "a2") for e in recorded][: len(replayed)]
    )
    assert [r[0] for r in replayed] == ["tokens", "compute_s", "artifacts"]


def test_ordinary_spending_that_would_dig_into_the_recovery_reserve_stops_the_replay_with_the_numbers():
    sc = coding_with(budget={"compute_s": {"limit": 1500, "recovery_reserve": 600}})
    _out, log = careful_003(sc)
    state = final(log)
    assert state["state"] == "stopped"
    # a1's broad suite (912 s, not a recovery) would leave less than the 600 s reserved for recovery
    assert state["reason"].startswith(
        "budget reserve: compute_s 912 spent would dig into the recovery reserve of 600 (limit 1500; ordinary work "
        "may spend 900); 912 for the recorded charge"
    )
    assert "in attempt a1, which is not a recovery" in state["reason"]
    assert kinds(log, "effect.intent") == [] and not [c for c in charges(log) if c["origin"] == "replay"]
    assert state["budget"]["compute_s"]["limit"] == 1500 and state["budget"]["compute_s"]["recovery_reserve"] == 600


def test_recovery_may_spend_the_reserve_and_the_replays_own_rerun_counts_toward_the_limit():
    # 912 s ordinary (under 1500 - 500), then the careful rerun (611 s, recovery) goes past the limit itself
    sc = coding_with(budget={"compute_s": {"limit": 1500, "recovery_reserve": 500}})
    _out, log = careful_003(sc)
    state = final(log)
    assert state["state"] == "stopped"
    assert state["reason"].startswith(
        "budget exhausted: compute_s 1531 > 1500 (cumulative across attempts; 611 for the rerun command_receipt-"
    )
    assert state["reason"].endswith("in attempt a2.replan-1)")
    # with room for it, the recovery spends into the reserve and the careful decider stops on the failure instead
    sc = coding_with(budget={"compute_s": {"limit": 1700, "recovery_reserve": 700}})
    _out, log = careful_003(sc)
    state = final(log)
    assert "test_adapter_roundtrip_preserves_cursor" in state["reason"] and "budget" not in state["reason"]
    assert state["budget"]["compute_s"] == {
        "spent": 1531,
        "replay_own": 619,
        "recovery": 619,
        "limit": 1700,
        "recovery_reserve": 700,
    }


def test_a_counterfactual_budget_overrides_the_declared_limit_and_keeps_the_reserve():
    sc = coding_with(budget={"compute_s": {"limit": 5000, "recovery_reserve": 100}})
    _out, log = careful_003(sc, vary={"budget.compute_s": "950"})
    state = final(log)
    assert state["reason"].startswith("budget reserve: compute_s 912 spent would dig into the recovery reserve of 100")
    scope = kinds(log, "replay.scope")[0]
    assert scope["budget"] == {"compute_s": {"limit": 5000.0, "recovery_reserve": 100.0}}


def test_a_budgeted_replay_is_byte_identical_twice():
    sc = coding_with(budget={"compute_s": {"limit": 1700, "recovery_reserve": 700}, "turns": {"limit": 3}})
    first, _ = careful_003(sc)
    second, _ = careful_003(sc)
    assert first.events == second.events and first.manifest == second.manifest


@pytest.mark.parametrize(
    ("budget", "message"),
    [
        ({"compute_s": {"limit": 100, "recovery_reserve": 200}}, "the recovery reserve (200) exceeds the limit (100)"),
        ({"dollars": {"limit": 1}}, "budget.dollars: not a budget resource"),
        ({"turns": {"limit": -1}}, "budget.turns.limit: must be a non-negative number"),
        ({"turns": {"limit": 3, "reserve": 1}}, "unknown key 'reserve'"),
    ],
)
def test_a_scenario_budget_that_cannot_hold_is_refused_when_the_scenario_is_built(budget, message):
    with pytest.raises(PackageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        coding_with(budget=budget)
