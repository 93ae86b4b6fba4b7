"""The comparison's budget ledger (issue 19, seed 003 "Budgets exposed recovery cost"): cumulative across attempts,
recovery apart, the replay's own work charged and shown, the limit and reserve it ran under, the stop's reason."""

from __future__ import annotations

import re

import pytest

from replays.comparison import budget_ledger
from tests.engine.test_budgets import careful_003, coding_with
from tests.engine.test_replay import BUNDLES, kinds
from tests.replays import test_replay_pages as pages

pytestmark = pytest.mark.django_db

STORY_003 = "run-003-review-request"
# the replay pages' fixtures and launcher: the demo loaded, a client per role, launches executed inline
demo, client_as, no_broker, launched = pages.demo, pages.client_as, pages.no_broker, pages.launched


def ledger_row(html: str, resource: str) -> list[str]:
    row = re.search(rf'<tr id="budget-{resource}">(.*?)</tr>', html, re.S)
    assert row, html[html.find("budget-ledger") - 200 :][:3000]
    return [
        re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", c)).strip()
        for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row.group(1), re.S)
    ]


def test_the_comparison_of_a_careful_counterfactual_shows_its_own_validation_cost_and_the_recovery(
    demo, client_as, django_capture_on_commit_callbacks, no_broker
):
    operator = client_as("operator")
    replay = launched(
        operator,
        STORY_003,
        "counterfactual",
        {"scenario": "coding-review-request@1", "variable": "decider", "decider": "careful", "checkpoint": "start"},
        django_capture_on_commit_callbacks,
    )
    html = operator.get(f"/replays/{replay.pk}/comparison/").content.decode()
    assert "Budget ledger: cumulative across attempts" in html
    # recorded: a1's 912 s; the replay: the same 912 s re-charged plus its own reruns in workspace two (8 s + 611 s),
    # all of those in recovery attempts
    assert ledger_row(html, "compute_s") == [
        "compute_s",
        "912",
        "1531 (619 in recovery)",
        "912",
        "619",
        "no limit declared",
    ]
    assert ledger_row(html, "turns") == ["turns", "0", "2 (2 in recovery)", "0", "2", "no limit declared"]
    # the recording spent 6,100 tokens in its recovery attempt; the replay stopped before that step
    assert ledger_row(html, "tokens")[1] == "24500 (6100 in recovery)"
    assert "Spending stopped the replay" not in html
    assert "619 of it the replay&#x27;s own work" in html


def test_the_comparison_of_a_budget_counterfactual_names_the_limit_and_why_spending_stopped_the_replay(
    demo, client_as, django_capture_on_commit_callbacks, no_broker
):
    operator = client_as("operator")
    replay = launched(
        operator,
        STORY_003,
        "counterfactual",
        {
            "scenario": "coding-review-request@1",
            "variable": "budget",
            "budget_resource": "compute_s",
            "budget_amount": "900",
            "checkpoint": "start",
        },
        django_capture_on_commit_callbacks,
    )
    assert replay.run.final_state == "stopped"
    html = operator.get(f"/replays/{replay.pk}/comparison/").content.decode()
    stop = re.search(r'<p class="budget-stop">(.*?)</p>', html, re.S).group(1)
    assert "budget exhausted: compute_s 912 &gt; 900 (cumulative across attempts; 912 for the recorded charge" in stop
    assert ledger_row(html, "compute_s")[-1] == "limit 900, recovery reserve 0 (ordinary work up to 900)"


def test_the_ledger_keeps_recovery_and_the_replays_own_work_apart_under_a_declared_reserve():
    sc = coding_with(budget={"compute_s": {"limit": 1700, "recovery_reserve": 700}})
    _out, log = careful_003(sc)
    source = BUNDLES[STORY_003].events
    recovering = {e["attempt"] for e in source if e["kind"] == "attempt.started" and e.get("parent_attempt_id")}
    state = kinds(log, "run.state")[-1]
    (compute,) = [
        line
        for line in budget_ledger(
            kinds(source, "budget.charged"), recovering, kinds(log, "budget.charged"), state["budget"]
        )
        if line.resource == "compute_s"
    ]
    assert (compute.recorded, compute.replay, compute.replayed, compute.own, compute.replay_recovery) == (
        912,
        1531,
        912,
        619,
        619,
    )
    assert (compute.limit, compute.reserve, compute.ordinary_allowance) == (1700, 700, 1000)
