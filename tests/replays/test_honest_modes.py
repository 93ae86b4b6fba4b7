"""Honest modes (issue 34 point 6; seeds 000 and 001: replay stays inside reviewed simulation, live repetition is a
separate workflow, "the absence of traffic was backed by the absence of a route"): degraded isolation reads
`isolation: none` in red on the run's verdict header, the replay page and the comparison (production settings refuse
it outright: tests/test_first_hour.py); a live model is a separately labelled fresh comparison run, never one of the
counterfactual's diagnostic variables, and its run reads "not reproducible" on every page."""

from __future__ import annotations

import json
import re
from functools import partial

import pytest
from django.core.management import call_command
from django.test import Client

from n17q_engine import sandbox
from replays import services as replays
from replays.models import Replay
from runs.models import Run
from tests.replays.model_connections import approve_model_connection

pytestmark = pytest.mark.django_db

NONE_IN_RED = '<span class="badge bad isolation-none"'
NOT_REPRODUCIBLE = '<span class="badge bad not-reproducible"'


@pytest.fixture
def demo(capsys):
    call_command("load_demo", "--json")
    capsys.readouterr()


@pytest.fixture
def viewer(role_user) -> Client:
    client = Client()
    client.force_login(role_user("viewer", "viewer-honest"))
    return client


def pages(client: Client, replay: Replay) -> dict[str, str]:
    assert replay.run is not None
    return {
        "run": client.get(f"/runs/{replay.run.run_id}/").content.decode(),
        "replay": client.get(f"/replays/{replay.pk}/").content.decode(),
        "comparison": client.get(f"/replays/{replay.pk}/comparison/").content.decode(),
    }


def test_degraded_isolation_reads_isolation_none_in_red_on_the_run_the_replay_and_the_comparison(
    demo, monkeypatch, settings, viewer
):
    def cannot(flags):
        raise OSError(1, "Operation not permitted")

    settings.N17Q_ALLOW_DEGRADED_ISOLATION = True  # development only: production settings refuse to start with it
    monkeypatch.setattr(replays, "run_sandboxed", partial(sandbox.run_sandboxed, _unshare=cannot))
    replay = replays.replay_execute(replays.replay_create(Run.objects.get(run_id="run-000-recorded"), mode="rerun").pk)
    assert replay.isolation == "degraded" and replay.run.isolation == "degraded"
    for where, html in pages(viewer, replay).items():
        assert NONE_IN_RED in html and ">isolation: none</span>" in html, where
    run_page = pages(viewer, replay)["run"]
    head = run_page[run_page.index('class="run-head verdict"') : run_page.index('id="findings"')]
    assert NONE_IN_RED in head  # on the verdict header, not somewhere below it


def test_netns_isolation_is_not_called_none(demo, viewer, capsys):
    call_command("replay", "run-000-recorded", "--mode", "rerun", "--inline", "--json")
    out = json.loads(capsys.readouterr().out)
    if out["isolation"] != "netns":
        pytest.skip("this machine gives replays no network namespace")
    replay = Replay.objects.get(pk=out["replay"])
    for where, html in pages(viewer, replay).items():
        assert "isolation: none" not in html and NOT_REPRODUCIBLE not in html, where


def test_a_run_whose_model_answered_live_reads_not_reproducible_on_every_page(demo, viewer, capsys):
    """The relay itself is tests/replays/test_agents.py's (it needs the sandbox and a loopback provider); here a
    finished replay is given what a relayed one records (its model connection; its run's model `source: live:…`)."""
    call_command("replay", "run-001-recorded", "--mode", "rerun", "--inline", "--json")
    out = json.loads(capsys.readouterr().out)
    replay = Replay.objects.get(pk=out["replay"])
    for where, html in pages(viewer, replay).items():
        assert NOT_REPRODUCIBLE not in html, where
    Replay.objects.filter(pk=replay.pk).update(
        model_connection={"connection": "m", "base_url": "https://m.example:443/v1", "credential_name": "X"}
    )
    run = replay.run
    manifest = dict(run.manifest_run)
    manifest["model"] = {**manifest["model"], "source": "live:m.example:443"}
    Run.objects.filter(pk=run.pk).update(manifest_run=manifest)
    replay.refresh_from_db()
    assert Run.objects.get(pk=run.pk).fresh_comparison
    shown = pages(viewer, replay)
    for where, html in shown.items():
        assert NOT_REPRODUCIBLE in html and "fresh comparison run (live model): not reproducible" in html, where
    assert "<h1>Replay" in shown["replay"] and "Fresh comparison run</h1>" in shown["replay"]


def test_the_live_model_is_a_separate_labelled_choice_not_a_diagnostic_variable(demo, role_user):
    approve_model_connection("approved-model", port=9, credential="N17Q_MODEL_CREDENTIAL_PROVIDER")
    operator = Client()
    operator.force_login(role_user("operator", "operator-honest"))
    page = operator.get("/runs/run-003-review-request/launch/counterfactual/").content.decode()
    variables = re.search(r'<fieldset class="variables">(.*?)</fieldset>', page, re.S)
    fresh = re.search(r'<fieldset class="fresh-comparison" id="fresh-comparison">(.*?)</fieldset>', page, re.S)
    assert variables and fresh, page[:3000]
    assert 'name="model_connection"' not in variables.group(1)  # not one option among the diagnostic ones
    assert "<legend>Fresh comparison run (live model, not reproducible)</legend>" in fresh.group(1)
    assert 'name="model_connection"' in fresh.group(1) and "approved-model" in fresh.group(1)
