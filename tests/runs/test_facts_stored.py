"""Issue 34: a run's facts are computed once, when it is stored; a run stored before them gets them on first read."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from n17q_engine.facts import FACTS_VERSION
from n17q_engine.vocabulary import APPENDED_BY_REVIEWERS
from runs.facts import facts_compute, facts_of
from runs.models import Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(capsys):
    call_command("load_demo", "--json")
    capsys.readouterr()


def test_the_import_stores_the_facts_of_the_run(demo):
    run = Run.objects.get(run_id="run-003-review-request")
    facts = run.facts
    assert facts is not None
    # the demo appends reviewers' assessments to this run after its import: they are not facts of the run
    appended = sum((run.kind_counts or {}).get(kind, 0) for kind in APPENDED_BY_REVIEWERS)
    assert appended > 0
    assert facts["version"] == FACTS_VERSION and facts["events"] == run.event_count - appended
    assert facts_compute(run) == facts
    assert sorted(w["id"] for w in facts["workspaces"]["items"]) == ["ws-1", "ws-2"]
    assert facts["validations"]["required"] == ["validation:broad", "validation:focused"]
    assert facts["effects"]["deliveries"] == 1 and facts["effects"]["intents"] == 1


def test_a_run_stored_without_facts_gets_them_on_first_read_and_keeps_them(demo, django_assert_num_queries):
    run = Run.objects.get(run_id="run-001-recorded")
    stored = run.facts
    Run.objects.filter(pk=run.pk).update(facts=None)
    run.refresh_from_db()
    assert facts_of(run) == stored
    assert Run.objects.get(pk=run.pk).facts == stored
    again = Run.objects.get(pk=run.pk)
    with django_assert_num_queries(0):
        assert facts_of(again) == stored


def test_an_older_version_of_the_facts_is_recomputed(demo):
    run = Run.objects.get(run_id="run-001-recorded")
    Run.objects.filter(pk=run.pk).update(facts={"version": 0})
    run.refresh_from_db()
    assert facts_of(run)["version"] == FACTS_VERSION


def test_the_run_facts_command_computes_what_is_missing_and_refuses_an_unknown_run(demo, capsys):
    Run.objects.filter(run_id__in=["run-000-recorded", "run-001-recorded"]).update(facts=None)
    call_command("run_facts", "--json")
    assert sorted(json.loads(capsys.readouterr().out)["computed"]) == ["run-000-recorded", "run-001-recorded"]
    assert Run.objects.filter(facts__isnull=True).count() == 0
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="no run with id 'nope'"):
        call_command("run_facts", "nope")
