"""A regression scenario made from a replay keeps the fixtures its failure needs, not a copy of the whole package
(seed 001, "Retention preserved the failure, not every byte forever")."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from fixtures_review.models import ScenarioVersion
from runs.models import Event, Run

pytestmark = pytest.mark.django_db


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    call_command(*args, "--json")
    answer: dict[str, Any] = json.loads(capsys.readouterr().out)
    return answer


@pytest.mark.seed("001", "Retention preserved the failure, not every byte forever")
def test_a_regression_scenario_from_a_replay_keeps_only_the_fixtures_it_was_served_and_its_invariants_need(
    capsys: pytest.CaptureFixture[str], role_user: Callable[..., Any]
) -> None:
    run_json(capsys, "load_demo")
    # The failing rerun of story 003: policy denies the review request, the run stops; ws-2's tests never ran.
    out = run_json(capsys, "replay", "run-003-review-request", "--mode", "rerun", "--inline")
    assert out["state"] == "stopped"
    replay_run = Run.objects.get(run_id=out["run"])
    served = {
        body["fixture"]
        for body in Event.objects.filter(run=replay_run).values_list("body", flat=True)
        if isinstance(body.get("fixture"), str)
    }
    base = ScenarioVersion.objects.get(name="coding-review-request", version=1)
    base_fixtures = {f["id"]: f["tool"] for f in json.loads(base.files["fixtures.json"])}
    assert served and served < set(base_fixtures)

    operator = Client()
    operator.force_login(role_user("operator", "operator-regression"))
    page = operator.get(f"/runs/{replay_run.run_id}/regression/").content.decode()
    assert "Fixtures it keeps" in page and "holding only the fixtures below" in page
    assert operator.post(f"/runs/{replay_run.run_id}/regression/").status_code == 302

    minted = ScenarioVersion.objects.get(name="coding-review-request-regression")
    kept = {f["id"] for f in json.loads(minted.files["fixtures.json"])}
    # The effect route's fixtures stay (the invariant "at most one review request" must be judgeable when a fixed
    # agent does send one); everything else not served is left out, each named with why.
    route_tools = {"review.create_request", "review.get_request"}
    assert kept == served | {fid for fid, tool in base_fixtures.items() if tool in route_tools}
    record = json.loads(minted.files["scenario.json"])["minimal_fixtures"]
    assert record["run"] == replay_run.run_id
    assert {f["fixture"] for f in record["left_out"]} == set(base_fixtures) - kept
    assert {f["fixture"] for f in record["left_out"]} == {"focused-ws-2", "broad-ws-2"}
    assert all(f"not served to {replay_run.run_id}" in f["why"] for f in record["left_out"])
    assert record["kept_count"] + record["left_out_count"] == len(base_fixtures)

    viewer = Client()
    viewer.force_login(role_user("viewer", "viewer-regression"))
    version_page = viewer.get(f"/scenarios/{minted.name}@{minted.version}/").content.decode()
    assert f"{record['left_out_count']} left out" in version_page
    assert record["left_out"][0]["fixture"] in version_page

    # A recording was answered by no fixture: its regression scenario keeps the package whole, and says so.
    page = operator.get("/runs/run-001-recorded/regression/").content.decode()
    assert "no fixture answered it" in page and "kept whole" in page
