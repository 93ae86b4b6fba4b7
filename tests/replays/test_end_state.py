"""A replay's end state judged against its scenario's declaration (seed 003), and what a narrow scope leaves
unevaluated (seed 000), through `replay --inline --json` and the replay page."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from fixtures_review.minting import scenario_files_mint
from fixtures_review.models import ScenarioVersion
from replays.models import Replay
from runs.models import Run

pytestmark = pytest.mark.django_db


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    call_command(*args, "--json")
    answer: dict[str, Any] = json.loads(capsys.readouterr().out)
    return answer


@pytest.fixture
def demo(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    return run_json(capsys, "load_demo")


@pytest.fixture
def viewer(role_user: Callable[..., Any]) -> Client:
    client = Client()
    client.force_login(role_user("viewer", "viewer-end-state"))
    return client


def statuses(answer: dict[str, Any]) -> dict[str, str]:
    return {j["check"]: j["status"] for j in answer["evaluation"]["judgements"]}


@pytest.mark.seed("003", "The scenario definition grew richer")
def test_the_replay_answer_and_page_judge_the_end_state_against_the_scenario(
    demo: dict[str, Any], capsys: pytest.CaptureFixture[str], viewer: Client
) -> None:
    out = run_json(
        capsys, "replay", "run-003-review-request", "--mode", "counterfactual", "--vary", "decider=careful", "--inline"
    )
    assert out["state"] == "stopped"
    assert statuses(out) == {"file_scope": "passed", "allowed_effects": "passed", "stop_state": "passed"}
    stop = next(j for j in out["evaluation"]["judgements"] if j["check"] == "stop_state")
    assert "unfinished" in stop["reason"] and "validation incomplete" in stop["reason"]
    assert out["evaluation"]["declared"]["file_scope"] == ["src/**", "tests/**"]
    replay = Replay.objects.get(pk=out["replay"])
    assert replay.evaluation == out["evaluation"]  # judged once, when the replay ended, and kept

    page = viewer.get(f"/replays/{replay.pk}/").content.decode()
    assert "End state, judged against the scenario" in page
    assert "Request review only with focused and broad receipts" in page  # the instructions it applies
    assert 'class="judgement judgement-stop_state status-passed"' in page
    assert f"?event={stop['events'][0]}" in page  # the event the judgement rests on


@pytest.mark.seed("000", "Fixture coverage became consequence-aware")
def test_an_adapter_scope_replay_says_what_it_cannot_judge_in_its_answer_and_page(
    demo: dict[str, Any], capsys: pytest.CaptureFixture[str], viewer: Client
) -> None:
    base = ScenarioVersion.objects.get(name="coding-review-request", version=1)
    files = {name: json.loads(text) for name, text in base.files.items()}
    files["scenario.json"]["scope"] = "adapter"
    narrow = scenario_files_mint(base=base, files=files, user=None, source="test")
    out = run_json(
        capsys,
        "replay",
        "run-003-review-request",
        "--mode",
        "counterfactual",
        "--vary",
        "decider=careful",
        "--scenario",
        narrow.ref,
        "--inline",
    )
    assert set(statuses(out).values()) == {"not_evaluated"}
    by_code = {u["code"]: u for u in out["unevaluated"]}
    assert by_code["LIN013"]["scope"] == "earlier policy"
    assert by_code["LIN012"]["scope"] == "later world state"
    assert by_code["LIN015"]["scope"] == "final account"
    # The same list the run page's "Not evaluated" reads (Run.unevaluated, kept at import).
    assert Run.objects.get(run_id=out["run"]).unevaluated == out["unevaluated"]

    page = viewer.get(f"/replays/{out['replay']}/").content.decode()
    assert "Not evaluated by this scope." in page
    for dimension in ("earlier policy", "later world state", "final account"):
        assert f"<strong>{dimension}</strong>" in page
