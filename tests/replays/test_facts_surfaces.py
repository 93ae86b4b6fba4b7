"""Issue 34: every surface reads one set of facts per run (n17q_engine/facts.py), and no label overstates.

Measured on main before the fact layer: the declared race of `email-delivery-race@1` delivered the notice twice
(LIN012 on the run) while its comparison said "At most one delivery per intent: held, 0 simulated deliveries" and
the replay page's outcome "1 effect intent, 0 deliveries".
"""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from replays.comparison import comparison_build, run_outcome
from runs.models import Event, Finding, Run

pytestmark = pytest.mark.django_db


def run_json(capsys, *args) -> dict:
    call_command(*args, "--json")
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def demo(capsys):
    return run_json(capsys, "load_demo")


def test_the_declared_race_is_two_deliveries_to_one_intent_on_the_comparison_and_the_outcome(demo, capsys):
    out = run_json(
        capsys, "replay", "run-001-recorded", "--mode", "rerun", "--scenario", "email-delivery-race@1", "--inline"
    )
    child = Run.objects.get(run_id=out["run"])
    mailbox = Event.objects.filter(run=child, kind="world.transition", body__resource__startswith="mailbox:")
    assert [e.body["revision_after"] for e in mailbox.order_by("seq")] == [42, 43]
    assert Finding.objects.filter(run=child, code="LIN012").exists()

    report = comparison_build(child)
    one = next(i for i in report.invariants if i.key == "one_delivery")
    assert one.replay_held is False
    assert one.replay.startswith("2 simulated deliveries, at most 2 per intent")
    assert one.source_held is True and one.source.startswith("1 live delivery, at most 1 per intent")
    assert report.deliveries["replay"]["count"] == 2
    assert all(r.startswith("mailbox:") for r in report.deliveries["replay"]["resources"])

    outcome = run_outcome(child)
    assert outcome.effects.startswith("1 effect intent, 2 deliveries")
