"""Issue 34: every surface reads one set of facts per run (n17q_engine/facts.py), and no label overstates.

Measured on main before the fact layer: the declared race of `email-delivery-race@1` delivered the notice twice
(LIN012 on the run) while its comparison said "At most one delivery per intent: held, 0 simulated deliveries" and
the replay page's outcome "1 effect intent, 0 deliveries".
"""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.urls import reverse

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
    # its own title, never the source's "Maintenance notice sent once…"
    assert child.title == (
        "Rerun of run-001-recorded: delivered 2 times to mailbox:beta-customers@lists.acme.example (duplicate "
        "consequence); no validation; failed"
    )
    assert child.manifest_run["source_title"] == Run.objects.get(run_id="run-001-recorded").title


def _import_child(tmp_path, source_id: str, mode: str, events: list[dict], **run_fields) -> Run:
    """A run made from `source_id` (as a replay's worker would import it), from the given event bodies."""
    from runs.importer import run_import_from_path
    from tests.bundles import write_folder

    source = Run.objects.get(run_id=source_id)
    run = {
        **source.manifest_run,
        "id": f"{source_id}-{mode}-t",
        "environment": "fixture",
        "mode": mode,
        "parent_run": source_id,
        "created_at": "2026-07-01T09:00:00Z",
        **run_fields,
    }
    run.pop("title", None)
    lines = []
    for seq, body in enumerate(events, start=1):
        body = {k: (None if k in ("blob", "output_blob") else v) for k, v in body.items()}  # no blobs carried
        lines.append({**body, "seq": seq})
    folder = write_folder(tmp_path / run["id"], {"format": "n17q.run-bundle/1", "run": run, "blobs": {}}, lines, {})
    return run_import_from_path(folder).run


def _history(source_id: str, until: str) -> list[dict]:
    source = Run.objects.get(run_id=source_id)
    cut = Event.objects.get(run=source, event_id=until).seq
    return list(Event.objects.filter(run=source, seq__lte=cut).order_by("seq").values_list("body", flat=True))


def test_a_counterfactual_whose_agent_exits_at_once_is_not_validation_complete(demo, tmp_path):
    history = _history("run-003-review-request", "e-003-a1-checkpoint")
    stop = {
        "id": "cf-stopped",
        "kind": "run.state",
        "at": history[-1]["at"],
        "attempt": "a1",
        "state": "stopped",
        "reason": "the agent exited",
    }
    child = _import_child(tmp_path, "run-003-review-request", "counterfactual", [*history, stop])
    outcome = run_outcome(child)
    assert outcome.validation == "validation incomplete: validation:broad never ran"
    # the metamorphic twin: with the broad suite run and passing, it is complete
    broad = {
        **Event.objects.get(run__run_id="run-003-review-request", event_id="e-003-broad-receipt").body,
        "id": "cf-broad",
        "completion": "completed",
        "post_tree": history[-1]["workspaces"]["ws-1"],
        "results": {"passed": 120, "failed": 0, "skipped": 0},
        "exit_code": 0,
    }
    seen = {**broad, "kind": "evidence.observed", "id": "cf-broad-seen", "source": "cf-broad"}
    seen = {k: seen[k] for k in ("id", "kind", "at", "attempt", "source")}
    seen.update(workspace_id="ws-1", tree_digest=history[-1]["workspaces"]["ws-1"], scope=["validation:broad"])
    child2 = _import_child(
        tmp_path, "run-003-review-request", "counterfactual", [*history, broad, seen, stop], id="cf-2"
    )
    assert run_outcome(child2).validation == "validation complete"


def test_the_inspect_summary_of_story_003_names_its_recorded_workspaces(demo, role_user):
    from django.test import Client

    client = Client()
    client.force_login(role_user("operator", "operator-facts"))
    page = client.get("/runs/run-003-review-request/launch/inspect/").content.decode()
    assert "no workspaces in this scenario" not in page
    assert "<code>ws-1</code>" in page and "<code>ws-2</code>" in page
    assert "derived from <code>ws-1</code>" in page  # ws-2 was made from ws-1 (reconstruct)


def test_the_run_page_and_the_run_list_say_what_the_facts_say_of_the_race(demo, capsys, role_user):
    from django.test import Client

    out = run_json(
        capsys, "replay", "run-001-recorded", "--mode", "rerun", "--scenario", "email-delivery-race@1", "--inline"
    )
    client = Client()
    client.force_login(role_user("viewer", "viewer-facts"))
    page = client.get(f"/runs/{out['run']}/").content.decode()
    assert '<dd class="fact-effects bad">1 effect intent, 2 deliveries' in page
    assert "at most one delivery per intent does not hold (LIN012)" in page
    assert "a second delivery of one intent" in page  # the mailbox change at revision 43 is marked
    trace = client.get(f"/runs/{out['run']}/", {"facets": "effects"}).content.decode()
    assert trace.count('<span class="badge bad">second delivery of one intent</span>') == 1
    assert trace.count('<span class="badge delivery">delivery</span>') == 1
    listing = client.get(reverse("runs:run-list"), {"replays": "on"}).content.decode()
    assert '<span class="badge bad">1 intent, 2 deliveries (duplicate)</span>' in listing
    story = client.get("/runs/run-003-review-request/").content.decode()
    assert "2 workspaces: ws-1 (uncertain), ws-2" in story
    assert "validation incomplete: unit+contract+integration in ws-1 termination_unknown" in story


def test_a_regression_scenario_made_from_the_race_pins_one_delivery_not_none(demo, capsys):
    from replays.regression import regression_base, regression_invariants

    out = run_json(
        capsys, "replay", "run-001-recorded", "--mode", "rerun", "--scenario", "email-delivery-race@1", "--inline"
    )
    child = Run.objects.get(run_id=out["run"])
    base = regression_base(child)
    assert base is not None
    pinned = {i["id"]: i for i in regression_invariants(child, base)}
    send = next(i for key, i in pinned.items() if key.startswith("regression-email-send"))
    assert send["max"] == 1 and "made 2" in send["text"]
