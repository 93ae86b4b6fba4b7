"""A replay that stopped on a missing fixture is launched again as it was launched (issue 36: the model-fixture loop in
the browser). `runs.relaunch.relaunch_url` is the one address the missing-fixture page, the exclusion's redirect and
the review page's "Replays that needed it" link to: it opens the same button with the same variable, value and
checkpoint against the new version, so an agent's counterfactual is not relaunched as a rerun with the recorded
decider (which it was, before)."""

from __future__ import annotations

import html
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core.management import call_command
from django.test import Client

from fixtures_review.selectors import NeededBy
from runs.relaunch import relaunch_url

pytestmark = pytest.mark.django_db

A1 = "e-003-a1-checkpoint"


@pytest.fixture
def operator(role_user, capsys) -> Client:
    call_command("load_demo", "--json")
    capsys.readouterr()
    client = Client()
    client.force_login(role_user("operator", "olga"))
    return client


# (run, vary, checkpoint): one of each shape the counterfactual form turns into a `vary`
CASES = [
    ("run-003-review-request", {"decider": "careful"}, A1),
    ("run-003-review-request", {"clock": "2026-06-12T09:30:00Z"}, "start"),
    ("run-003-review-request", {"budget.compute_s": "600"}, A1),
    ("run-001-recorded", {"delay.email.send": "30"}, "start"),
]


@pytest.mark.parametrize(("run", "vary", "checkpoint"), CASES, ids=["decider", "clock", "budget", "delay"])
def test_the_relaunch_address_opens_the_same_counterfactual_against_the_new_version(operator, run, vary, checkpoint):
    scenario = {"run-003-review-request": "coding-review-request@1", "run-001-recorded": "email-delivery@1"}[run]
    url = relaunch_url(run, "counterfactual", vary, checkpoint, scenario)
    assert urlsplit(url).path == f"/runs/{run}/launch/counterfactual/"
    page = html.unescape(operator.get(url).content.decode())
    ((key, value),) = vary.items()
    assert f"<dt>Changed variable</dt><dd><code>{key} = {value}</code>" in page, url  # the form read it back
    assert f"<code>{scenario}</code>" in page or scenario in page
    if checkpoint != "start":
        assert f'<option value="{checkpoint}" selected>' in page, url


def test_a_rerun_is_relaunched_as_a_rerun_and_a_recorded_run_needs_no_variable():
    url = relaunch_url("run-000-recorded", "rerun", {}, "start", "docs-research@2")
    assert urlsplit(url).path == "/runs/run-000-recorded/launch/replay/"
    assert parse_qs(urlsplit(url).query) == {"scenario": ["docs-research@2"]}


def test_the_review_pages_needed_by_row_relaunches_what_the_run_manifest_says_was_launched():
    needed = NeededBy(
        "run-001-recorded~counterfactual-1",
        "run-001-recorded",
        "fixture_missing-1",
        "email-delivery@1",
        mode="counterfactual",
        vary={"decider": "agent:mcp-openai-agent"},
        checkpoint="start",
    )
    query = parse_qs(urlsplit(needed.relaunch_url("email-delivery@2")).query)
    assert query == {
        "scenario": ["email-delivery@2"],
        "variable": ["decider"],
        "decider": ["agent:mcp-openai-agent"],
        "checkpoint": ["start"],
    }
