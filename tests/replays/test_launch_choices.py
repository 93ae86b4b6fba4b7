"""Issue 16, points 1, 2 and 5: the pre-launch summary is for exactly what would launch (and a POST of a summary
that no longer holds is refused), the scenario choices are the run's recorded version, its newer versions and its
regression versions, labelled, and a button that cannot work is shown disabled with the reason, in web words."""

from __future__ import annotations

import json
import re

import pytest
from django.core.management import call_command
from django.test import Client

from fixtures_review.models import ScenarioVersion
from fixtures_review.services import scenario_version_mint
from n17q_demo import seed_scenarios
from replays import services as replays
from replays.launch import launch_options
from replays.models import Replay
from runs.models import Run

# The scenario versions the demo loads (n17q_demo/seed_scenarios.py): a launch refused mints none.
SEED_VERSIONS = len(seed_scenarios.seed_packages())

pytestmark = pytest.mark.django_db

LAUNCH = "/runs/run-000-recorded/launch/replay/"


@pytest.fixture
def demo(capsys):
    call_command("load_demo", "--json")
    capsys.readouterr()


@pytest.fixture
def operator(role_user) -> Client:
    client = Client()
    client.force_login(role_user("operator", "olga"))
    return client


@pytest.fixture
def no_broker(monkeypatch):
    sent: list[int] = []
    monkeypatch.setattr(replays, "replay_enqueue", lambda pk: sent.append(pk) or True)
    return sent


@pytest.fixture
def docs_research_2(demo) -> ScenarioVersion:
    """A newer version of story 000's scenario, without the status lookup (as "Exclude the tool" mints it)."""
    return scenario_version_mint(
        base=ScenarioVersion.objects.get(name="docs-research", version=1),
        exclude_tools={"status.lookup": "the status service is not modelled yet"},
        user=None,
        source="exclusion",
    )


def summary_of(html: str) -> str:
    match = re.search(r'<section class="summary".*?</section>', html, re.S)
    assert match, html[:2000]
    return match.group(0)


def selected(html: str) -> list[str]:
    select = re.search(r'<select name="scenario".*?</select>', html, re.S)
    assert select, html[:2000]
    return re.findall(r'<option value="([^"]*)"[^>]*selected', select.group(0))


def digest_in(html: str) -> str:
    return re.search(r'name="summary_digest" value="([^"]*)"', html).group(1)


def test_it_follows_the_version_selector_in_the_summary(operator, docs_research_2):
    first = operator.get(LAUNCH).content.decode()
    assert "<code>docs-research@1</code>" in summary_of(first) and selected(first) == ["docs-research@1"]
    assert "no fixture holds this request" in summary_of(first)
    # The htmx request the selector's change sends: the launch region alone, for the version now selected.
    partial = operator.get(LAUNCH, {"scenario": "docs-research@2"}, HTTP_HX_REQUEST="true")
    html = partial.content.decode()
    assert partial.status_code == 200 and "<html" not in html and html.lstrip().startswith('<div id="launch">')
    assert "<code>docs-research@2</code>" in summary_of(html) and selected(html) == ["docs-research@2"]
    assert "excluded from the scenario: the status service is not modelled yet" in summary_of(html)
    assert digest_in(html) != digest_in(first)
    # Without JavaScript, "Update summary" submits the form by GET; the CSRF token is kept out of the address.
    update = operator.get(
        LAUNCH, {"scenario": "docs-research@2", "csrfmiddlewaretoken": "t", "summary_digest": "x", "update": "1"}
    )
    assert update.status_code == 302 and update["Location"] == f"{LAUNCH}?scenario=docs-research%402"
    assert 'formmethod="get"' in first and "Update summary" in first
    assert 'hx-get="/runs/run-000-recorded/launch/replay/"' in first and 'hx-trigger="change"' in first


def test_it_shows_the_summary_of_the_version_the_selector_names_when_scenario_names_another(operator, demo):
    # email-delivery@1 is run-001-recorded's own scenario: not offered for story 000's run.
    html = operator.get(LAUNCH, {"scenario": "email-delivery@1"}).content.decode()
    assert "<code>docs-research@1</code>" in summary_of(html) and "email-delivery@1" not in summary_of(html)
    assert selected(html) == ["docs-research@1"]
    assert "email-delivery@1 is not one of the scenario versions offered for this run" in html


def test_the_declared_race_can_be_launched_from_the_browser(operator, demo, no_broker):
    # Issue 38's tour: email-delivery-race@1 (recorded from no run) could be launched only from the command line.
    url = "/runs/run-001-recorded/launch/replay/"
    html = operator.get(url, {"scenario": "email-delivery-race@1"}, HTTP_HX_REQUEST="true").content.decode()
    assert selected(html) == ["email-delivery-race@1"] and "<code>email-delivery-race@1</code>" in summary_of(html)
    launched = operator.post(url, {"scenario": "email-delivery-race@1", "summary_digest": digest_in(html)})
    assert launched.status_code == 302
    replay = Replay.objects.get()
    assert replay.scenario_version.ref == "email-delivery-race@1" and replay.mode == "rerun"
    # The counterfactual form offers it too; the run page's buttons cost no query for it.
    form = operator.get("/runs/run-001-recorded/launch/counterfactual/").content.decode()
    assert 'value="email-delivery-race@1"' in form


def test_it_refuses_a_stale_digest_and_launches_nothing(operator, docs_research_2, no_broker):
    shown = operator.get(LAUNCH).content.decode()  # the summary of docs-research@1
    # The selector was changed to @2 without looking at its summary (no JavaScript, no "Update summary").
    response = operator.post(LAUNCH, {"scenario": "docs-research@2", "summary_digest": digest_in(shown)})
    html = response.content.decode()
    assert response.status_code == 400
    assert "What would launch changed since you looked: review it again." in html
    assert "<code>docs-research@2</code>" in summary_of(html)  # the fresh summary, with its own digest
    assert digest_in(html) != digest_in(shown)
    unseen = operator.post(LAUNCH, {"scenario": "docs-research@1"})
    assert unseen.status_code == 400 and "Review the summary before launching" in unseen.content.decode()
    assert Replay.objects.count() == 0 and no_broker == []
    # The same digest, for what it was computed from, launches.
    fresh = operator.post(LAUNCH, {"scenario": "docs-research@2", "summary_digest": digest_in(html)})
    assert fresh.status_code == 302 and Replay.objects.get().scenario_version == docs_research_2


def test_it_refuses_a_counterfactual_whose_variable_changed_after_the_summary(operator, demo, no_broker):
    url = "/runs/run-003-review-request/launch/counterfactual/"
    base = {"scenario": "coding-review-request@1", "variable": "decider", "checkpoint": "start"}
    careful = operator.get(url, {**base, "decider": "careful"}).content.decode()
    assert "<code>decider = careful</code>" in summary_of(careful)
    response = operator.post(url, {**base, "decider": "recorded", "summary_digest": digest_in(careful)})
    assert response.status_code == 400 and "review it again" in response.content.decode()
    assert "<code>decider = recorded</code>" in summary_of(response.content.decode())
    assert Replay.objects.count() == 0 and no_broker == []


def test_it_lists_recorded_newer_and_regression_versions_labelled(operator, demo, capsys):
    mint = operator.post("/runs/run-001-recorded/regression/")
    assert mint.status_code == 302
    html = operator.get("/runs/run-001-recorded/launch/replay/").content.decode()
    options = re.findall(r'<option value="([^"]*)"[^>]*>([^<]*)</option>', html)
    assert options[:2] == [
        ("email-delivery@1", "email-delivery@1 — recorded version"),
        (
            "email-delivery-regression@1",
            "email-delivery-regression@1 — regression of email-delivery@1, from run-001-recorded",
        ),
    ]
    # Then the authored worlds (recorded from no run): the declared race; never another run's recorded scenario.
    assert [ref for ref, _label in options[2:]] == ["email-delivery-race@1"]
    authored = "email-delivery-race@1 — authored, recorded from no run; models 3 of this run&#x27;s 3 tools"
    assert options[2][1] == authored
    assert selected(html) == ["email-delivery@1"] and "<code>email-delivery@1</code>" in summary_of(html)
    # The regression page builds on the recorded version too, never on the regression version made before.
    assert (
        "the package of <code>email-delivery@1</code>"
        in operator.get("/runs/run-001-recorded/regression/").content.decode()
    )
    # The CLI's default is the recorded version, and it says which one it took.
    call_command("replay", "run-001-recorded", "--mode", "reconstruction", "--inline", "--json")
    out = json.loads(capsys.readouterr().out)
    assert out["scenario"] == {"ref": "email-delivery@1", "label": "recorded version"}
    assert Replay.objects.get().scenario_version.ref == "email-delivery@1"


def test_it_labels_a_newer_version_and_keeps_the_recorded_one_first(operator, docs_research_2):
    html = operator.get(LAUNCH).content.decode()
    options = re.findall(r'<option value="([^"]*)"[^>]*>([^<]*)</option>', html)
    assert options == [
        ("docs-research@1", "docs-research@1 — recorded version"),
        ("docs-research@2", "docs-research@2 — newer (a tool excluded)"),
    ]


def test_it_shows_disabled_buttons_with_reasons_on_a_scenarioless_run(operator, demo, capsys):
    call_command("import_run", "tests/data/example-bundle")
    html = operator.get("/runs/run-example-docs/").content.decode()
    nav = re.search(r'<nav class="replay-buttons".*?</nav>', html, re.S).group(0)
    assert 'href="/runs/run-example-docs/launch/inspect/">Inspect recorded run</a>' in nav
    for label in ("Replay in fixtures", "Create counterfactual", "Make regression scenario"):
        assert (
            f'<button type="button" class="button" disabled aria-describedby="why-not-launch">{label}</button>' in nav
        )
    reason = re.search(r'<span class="why-not muted" id="why-not-launch">([^<]+)</span>', nav).group(1)
    assert reason.startswith("This run names no scenario version and none was recorded from it")
    assert "/launch/replay/" not in nav and "/launch/counterfactual/" not in nav and "/regression/" not in nav
    # A run that has a scenario version: every button is a link, and no reason is shown.
    html = operator.get("/runs/run-000-recorded/").content.decode()
    nav = re.search(r'<nav class="replay-buttons".*?</nav>', html, re.S).group(0)
    assert "disabled" not in nav and "why-not" not in nav and nav.count('class="button"') == 4


def test_it_refuses_a_launch_that_cannot_work_in_web_words(operator, demo, capsys, no_broker):
    call_command("import_run", "tests/data/example-bundle")
    for url in (
        "/runs/run-example-docs/launch/replay/",
        "/runs/run-example-docs/launch/counterfactual/",
        "/runs/run-example-docs/regression/",
    ):
        page = operator.get(url).content.decode()
        assert "names no scenario version" in page and "disabled" in page and "--scenario" not in page
        refused = operator.post(
            url, {"summary_digest": "sha256:" + "0" * 64, "variable": "decider", "decider": "careful"}
        )
        html = refused.content.decode()
        assert refused.status_code == 400, url
        assert "names no scenario version and none was recorded from it" in html and "--scenario" not in html
    assert Replay.objects.count() == 0 and no_broker == [] and ScenarioVersion.objects.count() == SEED_VERSIONS


def test_it_answers_launch_options_in_a_fixed_number_of_queries(demo, django_assert_num_queries, capsys):
    call_command("import_run", "tests/data/example-bundle")
    named, recorded_from, none = (
        Run.objects.get(run_id=r) for r in ("run-000-recorded", "run-001-recorded", "run-example-docs")
    )
    with django_assert_num_queries(1):  # the versions of the scenario it names and of its regression scenario
        assert launch_options(named).recorded.ref == "docs-research@1"
    with django_assert_num_queries(2):  # the versions recorded from it; then its scenario's and regression's
        assert launch_options(recorded_from).recorded.ref == "email-delivery@1"
    with django_assert_num_queries(1):  # the versions recorded from it: none
        assert launch_options(none).buttons["replay"].available is False
    with django_assert_num_queries(3):  # the launch page: + the authored versions (the race models its tools)
        assert [c.ref for c in launch_options(recorded_from, others=True).choices][-1] == "email-delivery-race@1"
    with django_assert_num_queries(2):  # the race models none of story 000's tools: not offered
        assert [c.ref for c in launch_options(named, others=True).choices] == ["docs-research@1"]
