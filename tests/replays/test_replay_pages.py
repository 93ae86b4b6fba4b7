"""The replay buttons and pages (issue 6): who may launch, what the summary says, the comparison, the
missing-fixture page, regression scenarios; and the claim and recovery rules behind a replay's state."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from fixtures_review.models import ScenarioVersion, StagedRecording
from fixtures_review.scenarios import loaded_scenario
from n17q_demo import seed_scenarios
from replays import services as replays
from replays.models import Replay
from runs.models import Event, Run

# The scenario versions the demo loads (n17q_demo/seed_scenarios.py): a launch refused mints none.
SEED_VERSIONS = len(seed_scenarios.seed_packages())

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(capsys):
    call_command("load_demo", "--json")
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def client_as(role_user):
    made: list[str] = []

    def make(role: str, *, csrf: bool = False) -> Client:
        made.append(role)
        client = Client(enforce_csrf_checks=csrf)
        client.force_login(role_user(role, f"{role}-{len(made)}"))
        return client

    return make


@pytest.fixture
def no_broker(monkeypatch):
    """Launches in these tests are executed inline; what was enqueued is recorded."""
    sent: list[int] = []
    monkeypatch.setattr(replays, "replay_enqueue", lambda pk: sent.append(pk) or True)
    return sent


def seen(client: Client, run_id: str, button: str, data: dict) -> dict:
    """The launch form's data as a person sends it: after looking at the summary for it (its digest included)."""
    page = client.get(f"/runs/{run_id}/launch/{button}/", data).content.decode()
    digest = re.search(r'name="summary_digest" value="([^"]*)"', page)
    assert digest and digest.group(1), page[:3000]
    return {**data, "summary_digest": digest.group(1)}


def launched(client: Client, run_id: str, button: str, data: dict, django_capture_on_commit_callbacks) -> Replay:
    data = seen(client, run_id, button, data)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/runs/{run_id}/launch/{button}/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    pk = int(re.search(r"/replays/(\d+)/", response["Location"]).group(1))
    return replays.replay_execute(pk)


LAUNCH_URLS = ("inspect", "replay", "counterfactual")


def test_the_run_page_offers_the_three_buttons_to_an_operator_and_never_run_again(demo, client_as):
    html = client_as("operator").get("/runs/run-000-recorded/").content.decode()
    for label in ("Inspect recorded run", "Replay in fixtures", "Create counterfactual", "Make regression scenario"):
        assert label in html
    assert "run again" not in html.lower()


@pytest.mark.parametrize("button", LAUNCH_URLS)
def test_a_viewer_sees_no_button_and_cannot_launch(demo, client_as, button, no_broker):
    viewer = client_as("viewer")
    html = viewer.get("/runs/run-000-recorded/").content.decode()
    assert "Replay in fixtures" not in html and "Create counterfactual" not in html
    assert viewer.get(f"/runs/run-000-recorded/launch/{button}/").status_code == 403
    assert viewer.post(f"/runs/run-000-recorded/launch/{button}/", {"variable": "decider"}).status_code == 403
    assert viewer.post("/runs/run-001-recorded/regression/").status_code == 403
    assert Replay.objects.count() == 0 and no_broker == []


@pytest.mark.parametrize(
    "url",
    [
        "/runs/run-001-recorded/launch/inspect/",
        "/runs/run-001-recorded/launch/replay/",
        "/runs/run-001-recorded/launch/counterfactual/",
        "/runs/run-001-recorded/regression/",
    ],
)
def test_every_launching_button_refuses_a_post_without_its_csrf_token(demo, client_as, url, no_broker):
    operator = client_as("operator", csrf=True)
    page = operator.get(url)
    assert page.status_code == 200
    assert 'name="csrfmiddlewaretoken"' in page.content.decode()
    assert operator.post(url, {"variable": "decider", "decider": "careful", "checkpoint": "start"}).status_code == 403
    assert Replay.objects.count() == 0 and ScenarioVersion.objects.count() == SEED_VERSIONS


def test_the_missing_fixture_actions_refuse_a_post_without_its_csrf_token(
    demo, client_as, django_capture_on_commit_callbacks, no_broker
):
    replay = launched(client_as("operator"), "run-000-recorded", "replay", {}, django_capture_on_commit_callbacks)
    operator = client_as("operator", csrf=True)
    staged_before = StagedRecording.objects.count()
    page = operator.get(f"/replays/{replay.pk}/missing/0/").content.decode()
    assert page.count('name="csrfmiddlewaretoken"') == page.count('<form method="post"') >= 2
    for action in ("copy-similar", "exclude-tool"):
        assert operator.post(f"/replays/{replay.pk}/missing/0/{action}/", {"reason": "x"}).status_code == 403
    assert StagedRecording.objects.count() == staged_before and ScenarioVersion.objects.count() == SEED_VERSIONS


def test_the_summary_names_model_policy_workspaces_fixtures_clock_and_isolation(demo, client_as):
    html = client_as("operator").get("/runs/run-000-recorded/launch/replay/").content.decode()
    assert "docs-research@1" in html and "research-policy@1" in html and "2026-07-01T09:00:00Z" in html
    assert "1 of 2</strong> recorded tool calls have a fixture" in html
    assert "status.lookup" in html and "no fixture holds this request" in html
    assert "own network namespace" in html and "It cannot touch" in html and "credentials" in html
    html = client_as("operator").get("/runs/run-003-review-request/launch/replay/").content.decode()
    assert "ws-1" in html and "ws-2" in html and "review-policy@8" in html


def test_the_counterfactual_form_takes_exactly_one_variable_and_a_checkpoint(demo, client_as, no_broker):
    operator = client_as("operator")
    html = operator.get("/runs/run-003-review-request/launch/counterfactual/").content.decode()
    for variable in ("policy revision", "decider", "human choice", "fault stage", "clock", "budget"):
        assert variable in html
    assert "review-policy@7" in html and "From checkpoint" in html
    missing_value = operator.post(
        "/runs/run-003-review-request/launch/counterfactual/",
        {"scenario": "coding-review-request@1", "variable": "clock", "clock": "", "checkpoint": "start"},
    )
    assert missing_value.status_code == 400 and "Give a value for the clock" in missing_value.content.decode()
    # Issue 38: a value of the wrong shape was "give a value"; it is named, and refused before any sandbox starts.
    for variable, fields, said in (
        ("clock", {"clock": "yesterday"}, "vary clock: &#x27;yesterday&#x27;: not an ISO-8601 time"),
        ("clock", {"clock": "2026-07-14T13:05:00"}, "has no timezone"),
        (
            "budget",
            {"budget_resource": "tokens", "budget_amount": "lots"},
            "vary budget.tokens: &#x27;lots&#x27; is not a number",
        ),
        ("budget", {"budget_resource": "tokens", "budget_amount": "-1"}, "must be a non-negative number"),
    ):
        shaped = operator.post(
            "/runs/run-003-review-request/launch/counterfactual/",
            {"scenario": "coding-review-request@1", "variable": variable, "checkpoint": "start", **fields},
        )
        assert shaped.status_code == 400 and said in shaped.content.decode(), (variable, fields)
        assert "Give a value" not in shaped.content.decode()
    bad_policy = operator.post(
        "/runs/run-003-review-request/launch/counterfactual/",
        {"scenario": "coding-review-request@1", "variable": "policy", "policy": "nope@1", "checkpoint": "start"},
    )
    assert bad_policy.status_code == 400
    later = operator.post(
        "/runs/run-003-review-request/launch/counterfactual/",
        {"scenario": "coding-review-request@1", "variable": "decider", "decider": "careful", "checkpoint": "c-9"},
    )
    assert later.status_code == 400
    assert Replay.objects.count() == 0 and no_broker == []


def test_a_launch_fixes_the_environment_at_creation_and_enqueues_after_commit(
    demo, client_as, django_capture_on_commit_callbacks, no_broker
):
    operator = client_as("operator")
    data = seen(operator, "run-001-recorded", "replay", {})
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = operator.post("/runs/run-001-recorded/launch/replay/", data)
    assert response.status_code == 302
    replay = Replay.objects.get()
    assert no_broker == [] and len(callbacks) == 1  # nothing is sent before the row is committed
    callbacks[0]()
    assert no_broker == [replay.pk]
    env = replay.environment
    assert (env["mode"], env["scenario"], env["policy"]["revision"], env["truth"]) == (
        "rerun",
        "email-delivery@1",
        "mail-policy@3",
        "comparable",
    )
    assert env["fixtures"]["recorded_calls"] > 0 and env["model"]["version"]
    assert replay.state == Replay.State.QUEUED and replay.checkpoint == "start"


def test_the_replay_page_polls_while_running_and_stops_when_it_ends(
    demo, client_as, django_capture_on_commit_callbacks, no_broker
):
    operator = client_as("operator")
    with django_capture_on_commit_callbacks(execute=True):
        operator.post("/runs/run-001-recorded/launch/replay/", seen(operator, "run-001-recorded", "replay", {}))
    replay = Replay.objects.get()
    queued = operator.get(f"/replays/{replay.pk}/").content.decode()
    assert 'hx-trigger="every 300ms"' in queued and "Queued" in queued
    replay = replays.replay_execute(replay.pk)
    poll = operator.get(f"/replays/{replay.pk}/?poll=1", HTTP_HX_REQUEST="true")
    body = poll.content.decode()
    assert "hx-trigger" not in body and "Finished" in body and poll["HX-Refresh"] == "true"
    assert f'<dd class="events-so-far">{Run.objects.get(pk=replay.run_id or 0).event_count}</dd>' in body


def test_a_replay_that_stops_on_a_missing_fixture_sends_the_watcher_to_the_missing_fixture_page(
    demo, client_as, django_capture_on_commit_callbacks, no_broker
):
    operator = client_as("operator")
    replay = launched(operator, "run-000-recorded", "replay", {}, django_capture_on_commit_callbacks)
    poll = operator.get(f"/replays/{replay.pk}/?poll=1", HTTP_HX_REQUEST="true")
    assert poll["HX-Redirect"] == f"/replays/{replay.pk}/missing/0/"
    html = operator.get(poll["HX-Redirect"]).content.decode()
    for fact in ("status.lookup", "Contract revision", "Request digest", "World revision", "Checkpoint"):
        assert fact in html
    assert replay.missing[0]["request_digest"] in html
    assert "e-000-call-status" in html and "not_found" in html  # the recorded call it never promoted
    assert "The docs describe key rotation" in html  # the claim that rests on it
    assert "request_id" in html and "search-rotate-keys" not in html  # another tool's fixture is no candidate
    assert "Copy the recorded answer (not_found)" in html and "Copy similar (empty response)" not in html
    assert "Exclude status.lookup" in html and "Inspect recorded run" in html


def test_it_copies_the_recorded_answer_into_review_and_does_not_touch_the_replay(
    demo, client_as, django_capture_on_commit_callbacks, no_broker
):
    operator = client_as("operator")
    replay = launched(operator, "run-000-recorded", "replay", {}, django_capture_on_commit_callbacks)
    events_before = Event.objects.filter(run=replay.run).count()
    staged_before = set(StagedRecording.objects.values_list("pk", flat=True))
    response = operator.post(f"/replays/{replay.pk}/missing/0/copy-recorded/", {}, follow=True)
    assert "the recorded answer (not_found, status 404)" in response.content.decode()
    staged = StagedRecording.objects.exclude(pk__in=staged_before).get()
    assert (staged.tool, staged.origin, staged.outcome, staged.response["status"]) == (
        "status.lookup",
        "copy-recorded",
        "not_found",
        404,
    )
    assert Event.objects.filter(run=replay.run).count() == events_before
    assert Replay.objects.get(pk=replay.pk).state == Replay.State.FINISHED
    assert ScenarioVersion.objects.count() == SEED_VERSIONS  # a candidate, not a version
    empty = operator.post(f"/replays/{replay.pk}/missing/0/copy-similar/", {}, follow=True)
    assert "copy the recorded answer instead of an empty one" in empty.content.decode()
    other = operator.post(
        f"/replays/{replay.pk}/missing/0/copy-similar/", {"like_fixture": "search-rotate-keys"}, follow=True
    )
    assert "another tool&#x27;s answer is never a candidate" in other.content.decode()
    assert StagedRecording.objects.exclude(pk__in=staged_before).count() == 1


def test_exclude_the_tool_mints_a_new_scenario_version_with_the_reason(
    demo, client_as, django_capture_on_commit_callbacks, no_broker
):
    operator = client_as("operator")
    replay = launched(operator, "run-000-recorded", "replay", {}, django_capture_on_commit_callbacks)
    empty = operator.post(f"/replays/{replay.pk}/missing/0/exclude-tool/", {"reason": ""}, follow=True)
    assert "Say why" in empty.content.decode() and ScenarioVersion.objects.count() == SEED_VERSIONS
    response = operator.post(
        f"/replays/{replay.pk}/missing/0/exclude-tool/", {"reason": "status is never recorded for this corpus"}
    )
    assert response.status_code == 302 and "scenario=docs-research%402" in response["Location"].replace("@", "%40")
    minted = loaded_scenario(ScenarioVersion.objects.get(name="docs-research", version=2))
    assert minted.excluded("status.lookup") == "status is never recorded for this corpus"
    assert Replay.objects.get(pk=replay.pk).scenario_version.ref == "docs-research@1"  # pinned


def test_the_comparison_of_story_001_shows_one_simulated_delivery_and_the_historical_approval_unused(
    demo, client_as, django_capture_on_commit_callbacks, no_broker
):
    operator = client_as("operator")
    replay = launched(operator, "run-001-recorded", "replay", {}, django_capture_on_commit_callbacks)
    html = operator.get(f"/replays/{replay.pk}/comparison/").content.decode()
    assert html.index("Scope note") < html.index("First divergence") < html.index("Hard invariants")
    assert '<strong class="replay-deliveries">1 simulated</strong>' in html
    assert re.search(r"Historical approval <code>e-001-approval</code>.*?unused", html, re.S)
    for layer in ("Context inputs", "Proposals", "Policy decisions", "Tool transitions", "World changes", "Budget"):
        assert layer in html
    # No single replay score: the only scores are the qualitative section's, each run's own per dimension (seed 003).
    qualitative = re.search(r'<section aria-labelledby="qual-h".*?</section>', html, re.S)
    assert qualitative is not None and "never a score of the replay" in qualitative.group(0)
    rest = html.replace(qualitative.group(0), "")
    assert "Claims (the final account)" in rest and "score" not in rest.replace("never scored", "").replace(
        "no single score", ""
    )
    assert "None: every layer pairs up." in html  # recorded decisions, same fixtures: nothing diverges


def test_the_comparison_links_the_first_divergence_to_both_events(
    demo, client_as, django_capture_on_commit_callbacks, no_broker
):
    operator = client_as("operator")
    replay = launched(operator, "run-003-review-request", "replay", {}, django_capture_on_commit_callbacks)
    html = operator.get(f"/replays/{replay.pk}/comparison/").content.decode()
    first = re.search(r'class="first-divergence">(.*?)</p>', html, re.S).group(1)
    links = re.findall(r'href="/runs/([^/]+)/\?focus=([^"]+)"', first)
    assert [run for run, _ in links] == ["run-003-review-request", replay.run.run_id]
    for run_id, event_id in links:
        assert Event.objects.filter(run__run_id=run_id, event_id=event_id).exists()
    assert "<strong>deny</strong>" in html  # today's policy denies what the recording allowed


def test_a_careful_counterfactual_of_story_003_ends_with_validation_incomplete_and_no_request(
    demo, client_as, django_capture_on_commit_callbacks, no_broker
):
    operator = client_as("operator")
    replay = launched(
        operator,
        "run-003-review-request",
        "counterfactual",
        {"scenario": "coding-review-request@1", "variable": "decider", "decider": "careful", "checkpoint": "start"},
        django_capture_on_commit_callbacks,
    )
    assert replay.vary == {"decider": "careful"} and replay.state == Replay.State.FINISHED
    run = replay.run
    assert run.final_state == "stopped"
    assert not Event.objects.filter(run=run, kind="effect.intent").exists()
    page = operator.get(f"/replays/{replay.pk}/").content.decode()
    assert '<span class="validation">validation incomplete: validation:broad' not in page  # suites, not purposes
    assert re.search(r'<span class="validation">validation incomplete: [^<]*ws-2: 1 failed</span>', page)
    assert '<span class="effects">no request: no effect intent, no delivery</span>' in page
    html = operator.get(f"/replays/{replay.pk}/comparison/").content.decode()
    assert '<strong class="replay-deliveries">0 simulated</strong>' in html


def test_make_regression_scenario_pins_the_runs_invariants_as_success_criteria(demo, client_as):
    operator = client_as("operator")
    page = operator.get("/runs/run-001-recorded/regression/").content.decode()
    assert "max_transitions" in page and "mailbox:" in page
    response = operator.post("/runs/run-001-recorded/regression/")
    assert response.status_code == 302
    version = ScenarioVersion.objects.get(name="email-delivery-regression", version=1)
    sc = loaded_scenario(version)
    checks = {(i["check"], i.get("resource_prefix"), i.get("max")) for i in sc.invariants}
    assert checks == {
        ("no_live_effect", None, None),
        ("max_transitions", "mailbox:", 1),
        ("approval_before_effect", None, None),
    }
    assert sc.source_runs == ("run-001-recorded",) and version.source == "regression"
    operator.post("/runs/run-001-recorded/regression/")
    assert ScenarioVersion.objects.filter(name="email-delivery-regression").count() == 2  # a new version each time


def test_a_run_without_a_scenario_cannot_become_a_regression_scenario(demo, client_as, capsys):
    call_command("import_run", "tests/data/example-bundle")
    response = client_as("operator").post("/runs/run-example-docs/regression/")
    assert response.status_code == 400 and "names no scenario version" in response.content.decode()
    assert ScenarioVersion.objects.count() == SEED_VERSIONS


# --- claims and recovery -------------------------------------------------------------------------------------


def test_a_replay_is_claimed_once_and_a_second_delivery_changes_nothing(demo):
    replay = replays.replay_create(Run.objects.get(run_id="run-001-recorded"), mode="rerun")
    token = replays.replay_claim(replay.pk)
    assert token and replays.replay_claim(replay.pk) is None  # held by a live process (this one)
    Replay.objects.filter(pk=replay.pk).update(state=Replay.State.QUEUED, claim_token="")
    done = replays.replay_execute(replay.pk)
    events = Event.objects.filter(run=done.run).count()
    again = replays.replay_execute(replay.pk)
    assert again.state == Replay.State.FINISHED and again.run_id == done.run_id
    assert Event.objects.filter(run=done.run).count() == events
    assert Run.objects.filter(run_id__startswith="run-001-recorded~").count() == 1


def test_a_run_already_imported_under_the_replays_id_is_taken_not_imported_twice(demo):
    replay = replays.replay_create(Run.objects.get(run_id="run-001-recorded"), mode="rerun")
    first = replays.replay_execute(replay.pk)
    # as if the worker died after the import committed but before the end was recorded
    Replay.objects.filter(pk=replay.pk).update(state=Replay.State.QUEUED, run=None)
    again = replays.replay_execute(replay.pk)
    assert again.state == Replay.State.FINISHED and again.run_id == first.run_id
    assert Run.objects.filter(run_id=first.run.run_id).count() == 1


def test_recovery_requeues_an_expired_claim_and_interrupts_after_too_many(demo, settings, monkeypatch):
    sent: list[int] = []
    monkeypatch.setattr(replays, "replay_enqueue", lambda pk: sent.append(pk) or True)
    replay = replays.replay_create(Run.objects.get(run_id="run-001-recorded"), mode="rerun")
    past = timezone.now() - timedelta(seconds=5)
    Replay.objects.filter(pk=replay.pk).update(
        state=Replay.State.RUNNING, claim_token="t1", claimed_by="elsewhere:1", lease_expires_at=past, attempts=1
    )
    assert replays.replays_recover()["requeued"] == [replay.pk] and sent == [replay.pk]
    assert Replay.objects.get(pk=replay.pk).state == Replay.State.QUEUED

    Replay.objects.filter(pk=replay.pk).update(
        state=Replay.State.RUNNING,
        claim_token="t2",
        claimed_by="elsewhere:1",
        lease_expires_at=past,
        attempts=settings.N17Q_REPLAY_MAX_ATTEMPTS,
        progress_checkpoint="checkpoint-abc",
    )
    assert replays.replays_recover()["interrupted"] == [replay.pk]
    replay.refresh_from_db()
    assert replay.state == Replay.State.INTERRUPTED and "checkpoint-abc" in replay.error
    assert replays.replay_execute(replay.pk).state == Replay.State.INTERRUPTED  # never runs again by itself


def test_recovery_leaves_a_live_claim_alone_and_resends_a_forgotten_queued_replay(demo, settings, monkeypatch):
    sent: list[int] = []
    monkeypatch.setattr(replays, "replay_enqueue", lambda pk: sent.append(pk) or True)
    live = replays.replay_create(Run.objects.get(run_id="run-001-recorded"), mode="rerun")
    Replay.objects.filter(pk=live.pk).update(
        state=Replay.State.RUNNING,
        claim_token="t",
        claimed_by="elsewhere:1",
        lease_expires_at=timezone.now() + timedelta(seconds=60),
    )
    forgotten = replays.replay_create(Run.objects.get(run_id="run-000-recorded"), mode="rerun")
    Replay.objects.filter(pk=forgotten.pk).update(
        enqueued_at=timezone.now() - timedelta(seconds=settings.N17Q_REPLAY_REQUEUE_S + 1)
    )
    result = replays.replays_recover()
    assert result == {"requeued": [], "interrupted": [], "resent": [forgotten.pk]} and sent == [forgotten.pk]
    assert Replay.objects.get(pk=live.pk).state == Replay.State.RUNNING


def test_a_claim_of_a_process_that_is_gone_on_this_host_is_taken_over_at_once(demo):
    import socket
    import subprocess

    gone = subprocess.Popen(["true"])
    gone.wait()
    replay = replays.replay_create(Run.objects.get(run_id="run-001-recorded"), mode="rerun")
    Replay.objects.filter(pk=replay.pk).update(
        state=Replay.State.RUNNING,
        claim_token="old",
        claimed_by=f"{socket.gethostname()}:{gone.pid}",
        lease_expires_at=timezone.now() + timedelta(seconds=60),
        attempts=1,
    )
    done = replays.replay_execute(replay.pk)
    assert done.state == Replay.State.FINISHED and done.attempts == 2


def test_the_replay_list_costs_the_same_queries_for_three_replays_or_nine(
    demo, client_as, django_assert_max_num_queries
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    viewer = client_as("viewer")
    source = Run.objects.get(run_id="run-001-recorded")

    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert viewer.get("/replays/").status_code == 200
        return len(ctx.captured_queries)

    for _ in range(3):
        replays.replay_execute(replays.replay_create(source, mode="rerun").pk)
    three = queries()
    for _ in range(6):
        replays.replay_create(source, mode="rerun")
    # 8: the session, the user, the count, one page of replays joined to their source run, scenario version and
    # run, the replay runs imported with their source, the user's groups (roles in the header), the user's and the
    # groups' permissions (can_import/can_launch)
    assert queries() == three == 8


def test_the_replay_list_shows_the_replay_runs_imported_with_their_source(demo, client_as):
    # Issue 38: the stories' own replays came in as runs; the page said "No replays yet" while two existed, and a
    # source's "Replays of this run" link led to a list without its fail-open replay.
    viewer = client_as("viewer")
    html = viewer.get("/replays/").content.decode()
    assert "No replays yet" not in html
    imported = html[html.index("imported-replays") :]
    assert "run-000-fail-open-replay" in imported and "run-001-naive-replay" in imported
    assert "1 error" in imported and "3 errors" in imported  # what each found, read from the run
    one = viewer.get("/replays/", {"source": "run-000-recorded"}).content.decode()
    assert "run-000-fail-open-replay" in one and "run-001-naive-replay" not in one
    none = viewer.get("/replays/", {"source": "run-003-review-request"}).content.decode()
    assert "No replays of this run yet." in none and "Launch one" not in none  # a viewer cannot launch
    operator = client_as("operator").get("/replays/", {"source": "run-003-review-request"}).content.decode()
    assert 'Launch one from <a href="/runs/run-003-review-request/">its page</a>' in operator


def test_the_replay_list_pages_newest_first_and_its_links_keep_the_source_filter(demo, client_as):
    source = Run.objects.get(run_id="run-001-recorded")
    for _ in range(51):
        replays.replay_create(source, mode="rerun")
    viewer = client_as("viewer")
    html = viewer.get("/replays/", {"source": source.run_id}).content.decode()
    assert f'href="?source={source.run_id}&amp;page=2">Older</a>' in html and "Page 1 of 2" in html
    second = viewer.get("/replays/", {"source": source.run_id, "page": 2})
    assert f'href="?source={source.run_id}&amp;page=1">Newer</a>' in second.content.decode()


# --- reports without holes (issue 16) ---------------------------------------------------------------------------


def test_account_matches_world_counts_claims_not_findings(
    demo, client_as, django_capture_on_commit_callbacks, no_broker
):
    # Story 003's one claim breaks two ways (two LIN008 findings): it is still one unsupported claim.
    assert Event.objects.filter(run__run_id="run-003-review-request", kind="account.claim").count() == 1
    operator = client_as("operator")
    replay = launched(operator, "run-003-review-request", "replay", {}, django_capture_on_commit_callbacks)
    html = operator.get(f"/replays/{replay.pk}/comparison/").content.decode()
    row = html[html.index('id="inv-account_matches"') :]
    row = row[: row.index("</tr>")]
    assert "1 unsupported claim (LIN008)" in row and "2 unsupported" not in row


def test_a_finished_replay_says_what_it_was_launched_with_and_names_its_last_checkpoint(
    demo, client_as, django_capture_on_commit_callbacks, no_broker
):
    operator = client_as("operator")
    replay = launched(operator, "run-001-recorded", "replay", {}, django_capture_on_commit_callbacks)
    html = operator.get(f"/replays/{replay.pk}/").content.decode()
    assert "Before it starts" not in html and "What it was launched with: Replay in fixtures" in html
    last = Event.objects.filter(run=replay.run, kind="checkpoint").order_by("-seq").first()
    assert last is not None and replay.progress_checkpoint == last.event_id
    checkpoint = re.search(r"<dt>Last checkpoint</dt><dd>(.*?)</dd>", html, re.S).group(1)
    assert f"?event={last.event_id}" in checkpoint and "—" not in checkpoint
    # Before launch the same summary speaks of the future.
    assert (
        "Before it starts: Replay in fixtures" in operator.get("/runs/run-001-recorded/launch/replay/").content.decode()
    )


def test_a_reconstructions_comparison_has_no_blank_scope_fields(
    demo, client_as, django_capture_on_commit_callbacks, no_broker
):
    operator = client_as("operator")
    replay = launched(operator, "run-001-recorded", "inspect", {}, django_capture_on_commit_callbacks)
    assert replay.mode == "reconstruction" and replay.run is not None
    html = operator.get(f"/replays/{replay.pk}/comparison/").content.decode()
    note = html[html.index('class="scope-note"') :]
    note = note[: note.index("</section>")]
    assert "A reconstruction of <code>run-001-recorded</code>" in note and "truth claim <strong>exact</strong>" in note
    assert "<code></code>" not in note and "<code>@</code>" not in note and "<strong></strong>" not in note
    assert "decider" not in note.replace("no decider", "")  # a reconstruction decides nothing again
