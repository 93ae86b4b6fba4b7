"""Every surface says what the run's facts say (issue 34), over generated runs imported through the real importer.

The differential half: the comparison's invariants, a replay's outcome, the verdict header and the run list's
columns read one set of facts, and those agree with the plan that generated the run (the oracle) and with the
lineage findings stored at import. The metamorphic half: a second delivery to an intent flips "at most one delivery"
and adds LIN012 on every surface. Run against the code before the fact layer (534a3a5's counting in
replays/comparison.py), the first property fails on a race-caused delivery: a world change whose cause is a
`schedule.step` naming the intent was counted as no delivery.

Each example imports into a savepoint that is always rolled back (history is append-only), as
tests/runs/test_import_properties.py does.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from django.db import transaction
from hypothesis import HealthCheck, assume, given, settings

from n17q_engine.facts import effects_label, validation_label
from replays.comparison import _invariants, run_outcome
from runs.importer import run_import_from_path
from runs.models import Finding, Run
from runs.selectors import run_list
from runs.verdict import verdict_build
from tests import bundles
from tests.engine.factgraphs import Plan, build, plans
from tests.hypothesis_budget import examples

pytestmark = pytest.mark.django_db


class _Undo(Exception):
    pass


def _settings(n: int):
    return settings(
        max_examples=examples(n), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )


def _surfaces(plan: Plan) -> dict:
    log = build(plan)
    with tempfile.TemporaryDirectory() as tmp:
        folder = bundles.write_folder(
            Path(tmp) / "bundle", {"format": "n17q.run-bundle/1", "run": log.run, "blobs": {}}, log.events, {}
        )
        run = run_import_from_path(folder).run
    run = Run.objects.get(pk=run.pk)
    facts = run.facts
    assert facts is not None
    invariants = _invariants(run)
    outcome = run_outcome(run)
    lines = {line.key: line for line in verdict_build(run).facts}
    row = run_list(q=run.run_id).get(pk=run.pk)
    return {
        "facts": facts,
        "codes": set(Finding.objects.filter(run=run).values_list("code", flat=True)),
        "one_delivery": invariants["one_delivery"],
        "no_live_effect": invariants["no_live_effect"],
        "outcome": outcome,
        "lines": lines,
        # the list's annotations (runs.selectors.run_list), not model fields
        "row": tuple(getattr(row, name) for name in ("facts_effects", "facts_effects_tone", "facts_validation")),
    }


def _in_savepoint(plan: Plan) -> dict:
    seen: dict = {}
    try:
        with transaction.atomic():
            seen.update(_surfaces(plan))
            raise _Undo
    except _Undo:
        pass
    return seen


def _agree(plan: Plan, seen: dict) -> None:
    facts, effects = seen["facts"], seen["facts"]["effects"]
    per_intent = plan.deliveries()
    once = not plan.lin012() and max(per_intent, default=0) <= 1
    # the oracle and lineage
    assert effects["deliveries"] == sum(per_intent) and effects["at_most_one_delivery"] == once
    assert ("LIN012" in seen["codes"]) == plan.lin012()
    # the comparison's invariants
    text, held = seen["one_delivery"]
    assert held == once
    kind = "live" if plan.live else "simulated"
    n = sum(per_intent)
    assert text.startswith(f"{n} {kind} deliver{'y' if n == 1 else 'ies'}, at most {max(per_intent, default=0)}")
    assert seen["no_live_effect"][1] == (None if plan.live else not effects["left_containment"])
    # a replay's outcome
    assert seen["outcome"].effects == effects_label(facts)
    assert seen["outcome"].validation == validation_label(facts)
    # the verdict header
    assert seen["lines"]["effects"].text.startswith(effects_label(facts))
    assert (seen["lines"]["effects"].tone == "bad") == (not once or bool(effects["left_containment"]))
    assert seen["lines"]["validation"].text == validation_label(facts)
    assert seen["lines"]["workspaces"].text.startswith(
        f"{plan.workspaces} workspace" if plan.workspaces else "no workspaces"
    )
    # the run list
    effects_text, _tone, validation = seen["row"]
    assert validation == facts["validations"]["status"]
    assert effects_text.endswith("(duplicate)") == (not once)


@_settings(120)
@given(plans())
def test_every_surface_agrees_with_the_facts_the_plan_and_lineage(plan):
    _agree(plan, _in_savepoint(plan))


@_settings(80)
@given(plans())
def test_a_second_delivery_flips_at_most_one_delivery_and_adds_lin012_on_every_surface(plan):
    assume(plan.intents)
    doubled = plan.with_second_delivery(0)
    seen = _in_savepoint(doubled)
    _agree(doubled, seen)
    assert seen["one_delivery"][1] is False and "LIN012" in seen["codes"]
    assert seen["lines"]["effects"].tone == "bad" and "LIN012" in seen["lines"]["effects"].text
    assert seen["row"][1] == "bad"
