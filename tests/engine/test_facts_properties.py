"""The fact layer as properties over generated runs (issue 34): differential against the plan that generated the
run and against lineage, and metamorphic (a second delivery, a missing broad receipt). The console's surfaces are
checked against the same facts in tests/replays/test_facts_surface_properties.py."""

from __future__ import annotations

from hypothesis import assume, given, settings

from n17q_engine.facts import effects_label, replay_title, run_facts, validation_label
from n17q_engine.lineage import check_events
from tests.engine.factgraphs import Plan, build, plans, validated
from tests.hypothesis_budget import examples


def _facts(plan: Plan) -> tuple[dict, set[str]]:
    log = build(plan)
    return run_facts(log.run, log.events), {f.code for f in check_events(log.run, log.events)}


@settings(max_examples=examples(300), deadline=None)
@given(plans())
def test_the_facts_agree_with_the_plan_and_with_lineage(plan):
    facts, codes = _facts(plan)
    effects = facts["effects"]
    per_intent = plan.deliveries()
    assert effects["intents"] == len(plan.intents)
    assert effects["deliveries"] == sum(per_intent)
    assert effects["max_deliveries_per_intent"] == max(per_intent, default=0)
    assert effects["acknowledged"] == sum(plan.acknowledged())
    assert [i["deliveries"] for i in effects["items"]] == per_intent
    # LIN012 is the duplicate the facts name; a second delivery without a second acknowledgement is one too
    assert ("LIN012" in codes) == plan.lin012()
    assert effects["at_most_one_delivery"] == (not plan.lin012() and max(per_intent, default=0) <= 1)
    assert ("LIN007" in codes) == bool(effects["left_containment"])
    assert facts["workspaces"]["count"] == plan.workspaces


@settings(max_examples=examples(200), deadline=None)
@given(plans())
def test_a_second_delivery_to_an_intent_flips_at_most_one_delivery_and_adds_lin012(plan):
    assume(plan.intents)
    facts, codes = _facts(plan.with_second_delivery(0))
    assert facts["effects"]["at_most_one_delivery"] is False and "LIN012" in codes
    assert "(one intent delivered" in effects_label(facts) or "(one intent acknowledged" in effects_label(facts)
    assert "(duplicate consequence)" in replay_title("rerun", "run-src", facts)


@settings(max_examples=examples(200), deadline=None)
@given(plans().map(validated))
def test_removing_the_broad_receipt_turns_validation_complete_into_incomplete(plan):
    facts, _ = _facts(plan)
    assert facts["validations"]["status"] == "complete" and validation_label(facts) == "validation complete"
    without, _ = _facts(plan.without_suite("broad"))
    assert without["validations"]["status"] == "incomplete"
    assert validation_label(without).startswith("validation incomplete: ")
    assert "validation:broad never ran" in validation_label(without)


@settings(max_examples=examples(300), deadline=None)
@given(plans())
def test_a_replay_title_never_claims_what_its_own_facts_contradict(plan):
    facts, _ = _facts(plan)
    title = replay_title("counterfactual", "run-src", facts)
    effects, status = facts["effects"], facts["validations"]["status"]
    assert ("no effect requested" in title) == (effects["intents"] == 0)
    assert ("validation complete" in title) == (status == "complete")
    assert ("(duplicate consequence)" in title) == (not effects["at_most_one_delivery"] and effects["intents"] > 0)
    if effects["deliveries"]:
        n = effects["deliveries"]
        assert f"delivered {n} time{'s' if n != 1 else ''}" in title
    else:
        assert "delivered" not in title.replace("nothing delivered", "")
    assert title.endswith(facts["outcome"]["state"])
