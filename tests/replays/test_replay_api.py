"""The replay API (issue 36, build 4): launch with the launch form's summary-digest rule, read a replay's state and
the full normalized request of each fixture it stopped on, under scoped tokens.

Story 000 (`run-000-recorded`, `docs-research@1`): its rerun stops on the status lookup of req-7781, which no fixture
answers (tests/replays/test_missing_loop.py follows the same stop through the pages)."""

from __future__ import annotations

import json
import re

import pytest
from django.core.management import call_command
from django.test import Client

from accounts.models import AuditEntry, HarnessToken
from n17q_engine.agent.model import MODEL_CONTRACT
from n17q_engine.canonical import digest_json
from n17q_engine.contracts import Contract
from replays import services as replays
from replays.models import Replay
from runs.models import Event
from tests.runs.test_api import token_for

pytestmark = pytest.mark.django_db

LAUNCH, READ = HarnessToken.Scope.LAUNCH_REPLAYS.value, HarnessToken.Scope.READ_REPLAYS.value
IMPORT = HarnessToken.Scope.IMPORT_RUNS.value
API = "/api/v1/replays/"
RERUN = {"run": "run-000-recorded", "mode": "rerun"}


@pytest.fixture
def demo(capsys):
    call_command("load_demo", "--json")
    capsys.readouterr()


@pytest.fixture
def no_broker(monkeypatch):
    """What was sent to the broker, recorded; the tests run the worker's task body themselves."""
    sent: list[int] = []
    monkeypatch.setattr(replays, "replay_enqueue", lambda pk: sent.append(pk) or True)
    return sent


@pytest.fixture
def harness(role_user):
    """A client whose every request carries a token of `role`'s user with `scopes`."""

    def make(role: str, *scopes: str, username: str = "") -> Client:
        key = token_for(role_user(role, username or f"{role}-{'-'.join(s.replace(':', '_') for s in scopes)}"), *scopes)
        return Client(HTTP_AUTHORIZATION=f"Token {key}")

    return make


@pytest.fixture
def client_as_operator(role_user) -> Client:
    client = Client()
    client.force_login(role_user("operator", "olga"))
    return client


def post(client: Client, data: dict):
    return client.post(API, json.dumps(data), content_type="application/json")


def confirmed(client: Client, data: dict) -> dict:
    """The launch's inputs with the digest of the summary the API answered for them (what a client shows)."""
    shown = post(client, data)
    assert shown.status_code == 409, shown.content.decode()[:2000]
    return {**data, "summary_digest": shown.json()["summary_digest"]}


def test_a_launch_without_the_digest_answers_the_forms_summary_and_queues_nothing(demo, harness, client_as_operator):
    operator = harness("operator", LAUNCH, READ)
    response = post(operator, RERUN)
    assert response.status_code == 409
    body = response.json()
    assert (
        body["error"]
        == "Review the summary before launching: this form did not carry the summary it was launched from."
    )
    assert body["summary"]["scenario"] == "docs-research@1" and body["summary"]["mode"] == "rerun"
    # The same summary the launch form shows for the same inputs: one rule, one digest.
    page = client_as_operator.get("/runs/run-000-recorded/launch/replay/").content.decode()
    assert body["summary_digest"] == re.search(r'name="summary_digest" value="([^"]+)"', page).group(1)
    assert Replay.objects.count() == 0


def test_a_confirmed_launch_queues_once_and_runs_through_the_worker(
    demo, harness, no_broker, django_capture_on_commit_callbacks
):
    operator = harness("operator", LAUNCH, READ)
    data = confirmed(operator, RERUN)
    with django_capture_on_commit_callbacks(execute=True):
        first = post(operator, data)
    assert first.status_code == 201, first.content.decode()
    launched = first.json()
    assert launched["created"] is True and launched["replay_state"] == "queued" and launched["run"] is None
    assert launched["url"] == f"/api/v1/replays/{launched['replay']}/" and launched["source_run"] == "run-000-recorded"
    assert launched["summary_digest"] == data["summary_digest"]
    # The same confirmation again (a client retrying after a lost answer): the same replay, nothing queued twice.
    with django_capture_on_commit_callbacks(execute=True):
        again = post(operator, data)
    assert (
        again.status_code == 200 and again.json()["replay"] == launched["replay"] and again.json()["created"] is False
    )
    assert Replay.objects.count() == 1 and no_broker == [launched["replay"]]
    (entry,) = AuditEntry.objects.filter(action="replay.create")  # one launch, audited once, as the token's
    assert entry.via.startswith("token n17q_") and entry.detail["replay"] == launched["replay"]

    replays.replay_execute(launched["replay"])  # the worker's task body (replays.tasks)
    read = operator.get(launched["url"]).json()
    assert read["ended"] is True and read["replay_state"] == "finished" and read["state"] == "incomplete_test_world"
    assert "status.lookup" in read["stop_reason"] and read["run"] == f"run-000-recorded~rerun-{launched['replay']}"
    # Ended, the same summary launches a new replay again: only a launch still in flight is answered as the same.
    with django_capture_on_commit_callbacks(execute=True):
        assert post(operator, data).status_code == 201
    assert Replay.objects.count() == 2


def test_a_stale_digest_is_refused_with_the_summary_as_it_is_now(demo, harness, no_broker):
    operator = harness("operator", LAUNCH, READ)
    inspect = confirmed(operator, {"run": "run-000-recorded", "mode": "reconstruction"})
    response = post(operator, {**RERUN, "summary_digest": inspect["summary_digest"]})  # a digest of another summary
    assert response.status_code == 409
    body = response.json()
    assert body["error"] == "What would launch changed since you looked: review it again."
    assert body["summary"]["mode"] == "rerun" and body["summary_digest"] != inspect["summary_digest"]
    assert Replay.objects.count() == 0 and no_broker == []


def test_it_answers_the_full_normalized_request_a_replay_stopped_on(
    demo, harness, no_broker, django_capture_on_commit_callbacks
):
    operator = harness("operator", LAUNCH, READ)
    with django_capture_on_commit_callbacks(execute=True):
        pk = post(operator, confirmed(operator, RERUN)).json()["replay"]
    assert operator.get(f"/api/v1/replays/{pk}/missing/").status_code == 409  # queued: nothing to read yet
    replay = replays.replay_execute(pk)
    reader = harness("viewer", READ)
    response = reader.get(f"/api/v1/replays/{pk}/missing/")
    assert response.status_code == 200, response.content.decode()
    body = response.json()
    assert body["state"] == "incomplete_test_world" and len(body["missing"]) == 1
    missing = body["missing"][0]
    record = replay.missing[0]
    assert (missing["tool"], missing["request_digest"]) == ("status.lookup", record["request_digest"])
    assert missing["page"] == f"/replays/{pk}/missing/0/" and missing["event"] == record["id"]
    call = Event.objects.get(run=replay.run, event_id=record["call_id"]).body
    assert missing["request"] == call["request"] and missing["request"]  # the whole request, as the run holds it
    # It is the normalized request: the contract answered beside it digests it to the digest that was looked up.
    contract = Contract.from_dict(missing["contract"])
    assert contract.revision == missing["contract_revision"] == record["contract_revision"]
    assert contract.digest(missing["request"]) == (missing["request"], missing["request_digest"])
    assert missing["answers"]["staged"]  # the demo's staged capture of this request, as the page lists it
    assert missing["scenario"]["name"] == "docs-research"


def test_each_operation_needs_its_scope(demo, harness, no_broker):
    reader = harness("operator", READ)
    assert post(reader, RERUN).status_code == 403  # reading is not launching
    launcher = harness("operator", LAUNCH)
    assert post(launcher, RERUN).status_code == 403  # the launch answers the summary: a reading too
    runs_only = harness("operator", IMPORT)
    assert post(runs_only, RERUN).status_code == 403
    assert post(harness("operator", LAUNCH, READ), RERUN).status_code == 409  # positive control
    replay = replays.replay_create(replays.Run.objects.get(run_id="run-000-recorded"), mode="rerun")
    for url in (f"/api/v1/replays/{replay.pk}/", f"/api/v1/replays/{replay.pk}/missing/"):
        assert runs_only.get(url).status_code == 403, url
        assert reader.get(url).status_code in (200, 409), url
    assert Replay.objects.count() == 1 and no_broker == []


def test_the_person_behind_the_token_must_be_allowed_to_launch(demo, harness, role_user, no_broker):
    # A viewer (and a reviewer) cannot launch in the browser (403), so their tokens cannot either, whatever scopes.
    for role in ("viewer", "reviewer"):
        response = post(harness(role, LAUNCH, READ), RERUN)
        assert response.status_code == 403 and response.json() == {"error": "needs runs.launch_replay"}, role
    replay = replays.replay_create(replays.Run.objects.get(run_id="run-000-recorded"), mode="rerun")
    # Reading is a role's, as the replay pages are; someone without a role reads nothing, anonymous nobody.
    viewer = Client()
    viewer.force_login(role_user("viewer", "vera"))
    assert (
        viewer.get(f"/replays/{replay.pk}/").status_code
        == viewer.get(f"/api/v1/replays/{replay.pk}/").status_code
        == 200
    )
    nora = role_user("viewer", "nora")
    nora.groups.clear()  # signed in, holding no role
    nobody = Client()
    nobody.force_login(nora)
    assert nobody.get(f"/api/v1/replays/{replay.pk}/").status_code == 403
    assert Client().get(f"/api/v1/replays/{replay.pk}/").status_code in (401, 403)
    assert Replay.objects.count() == 1 and no_broker == []


@pytest.mark.parametrize(
    ("data", "status", "error"),
    [
        ({"run": "run-000-recorded", "mode": "again"}, 400, 'mode: "again" is not a valid choice.'),
        ({"mode": "rerun"}, 400, "run: This field is required."),
        ({"run": "no-such-run", "mode": "rerun"}, 404, "no run 'no-such-run'"),
        (
            {**RERUN, "vary": {"decider": "careful"}},
            400,
            "a rerun changes nothing; a varied value belongs to a counterfactual",
        ),
        (
            {**RERUN, "mode": "counterfactual", "vary": {"weather": "rain"}},
            400,
            "vary.weather: not a declared variable (one of policy, decider, human, fault, clock, budget, delay)",
        ),
        (
            {**RERUN, "mode": "counterfactual", "vary": {"clock": "noon"}},
            400,
            "vary clock: 'noon': not an ISO-8601 time (write e.g. 2026-07-14T13:05:00Z)",
        ),
        (
            {**RERUN, "mode": "counterfactual", "vary": {"decider": "agent:nobody"}},
            400,
            None,
        ),
        ({**RERUN, "mode": "counterfactual", "vary": {"human.\u0000": "rejected"}}, 400, None),
        ({**RERUN, "scenario": "nowhere@9"}, 400, None),
        ({**RERUN, "checkpoint": "e-nowhere"}, 400, None),
        (
            {**RERUN, "model_connection": "openai"},
            400,
            "a live model connection is for a counterfactual whose decider is an agent",
        ),
    ],
)
def test_bad_input_is_refused_in_one_line(demo, harness, no_broker, data, status, error):
    response = post(harness("operator", LAUNCH, READ), data)
    assert response.status_code == status, response.content.decode()
    message = response.json()["error"]
    assert "\n" not in message and message
    if error is not None:
        assert message == error
    assert Replay.objects.count() == 0 and no_broker == []


def test_a_body_that_is_not_json_is_refused(demo, harness):
    response = harness("operator", LAUNCH, READ).post(API, "run=x", content_type="application/json")
    assert response.status_code == 400 and "JSON parse error" in response.json()["error"]


def test_an_unknown_replay_is_not_found(demo, harness):
    reader = harness("viewer", READ)
    for url in ("/api/v1/replays/999/", "/api/v1/replays/999/missing/", f"/api/v1/replays/{2**70}/"):
        response = reader.get(url)
        assert response.status_code == 404 and response.json()["error"].startswith("no replay"), url


def test_a_second_click_on_the_forms_launch_answers_the_replay_the_first_queued(demo, client_as_operator, no_broker):
    # Before issue 36 the form queued one replay per click: the confirmation rule is now the API's and the form's.
    url = "/runs/run-000-recorded/launch/replay/"
    page = client_as_operator.get(url).content.decode()
    data = {"summary_digest": re.search(r'name="summary_digest" value="([^"]+)"', page).group(1)}
    first, second = client_as_operator.post(url, data), client_as_operator.post(url, data)
    assert first.status_code == second.status_code == 302 and first["Location"] == second["Location"]
    assert Replay.objects.count() == 1
    shown = client_as_operator.get(second["Location"]).content.decode()
    assert f"Replay {Replay.objects.get().pk} of this very summary is already queued: shown." in shown


def test_an_agent_replay_launched_by_api_answers_the_chat_request_it_stopped_on(
    demo, harness, tmp_path, capsys, no_broker, django_capture_on_commit_callbacks
):
    """Story 003 from the checkpoint before the broad suite, decided by a registered agent (`agent:NAME` as the
    decider, as the form and `replay --vary` take it): it stops at the agent's first model call, and the API answers
    the chat request the agent sent (its messages and the tools it was offered), not a digest."""
    from tests.engine.test_agent_decider import _isolation_or_skip, agent_folder

    _isolation_or_skip()
    folder = agent_folder(tmp_path, "mcp_openai_agent.py")
    call_command("register_agent", "api-agent", str(folder), "--command", "python mcp_openai_agent.py", "--json")
    capsys.readouterr()
    operator = harness("operator", LAUNCH, READ)
    data = {
        "run": "run-003-review-request",
        "mode": "counterfactual",
        "scenario": "coding-review-request@1",
        "vary": {"decider": "agent:api-agent"},
        "checkpoint": "e-003-a1-checkpoint",
    }
    shown = post(operator, data).json()
    assert shown["summary"]["agent"]["name"] == "api-agent" and shown["summary"]["model"]["name"] == "agent:api-agent"
    with django_capture_on_commit_callbacks(execute=True):
        launched = post(operator, {**data, "summary_digest": shown["summary_digest"]})
    assert launched.status_code == 201 and launched.json()["decider"] == "agent:api-agent"
    replay = replays.replay_execute(launched.json()["replay"])
    assert replay.state == Replay.State.FINISHED, replay.error
    (missing,) = operator.get(f"/api/v1/replays/{replay.pk}/missing/").json()["missing"]
    assert missing["tool"] == "model.chat" and missing["checkpoint"] == replay.missing[0]["checkpoint_id"]
    request = missing["request"]
    assert request["messages"] and {"role", "content"} <= set(request["messages"][0])
    assert {t["function"]["name"] for t in request["tools"]}  # the scenario's tools, as the agent offered them
    # The scenario pins no model.chat contract: the built-in one normalized the request, recorded in its tool.call,
    # and the answer names it as the contract in force (the engine's one rule, `contract_for`).
    assert missing["contract"] == Contract.from_dict(MODEL_CONTRACT).to_dict()  # as a pinned one is shown
    assert "pins no model.chat contract" in missing["reason"]
    assert missing["request_digest"] == digest_json(request)
    stored = Event.objects.get(run=replay.run, event_id=missing["call"]).body
    assert stored["kind"] == "tool.call" and stored["request"] == request


@pytest.fixture
def celery_worker_on_redis(settings, tmp_path):
    """A real `celery worker` process on REDIS_TEST_URL taking this test's own queue (tests/replays/workers.py)."""
    import uuid

    import redis

    from tests.conftest import need_service
    from tests.replays.workers import REDIS_URL, Worker, celery_to, redis_up

    need_service("Redis", redis_up(REDIS_URL), f"{REDIS_URL} does not answer (set REDIS_TEST_URL)")
    queue = f"n17q-test-api-{uuid.uuid4().hex[:6]}"
    celery_to(REDIS_URL, settings, queue)
    worker = Worker(broker=REDIS_URL, queue=queue, data_dir=tmp_path).start()
    yield worker
    worker.stop()
    redis.Redis.from_url(REDIS_URL).delete(queue)


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_replay_launched_by_api_runs_in_a_celery_worker_and_is_read_back(demo, harness, celery_worker_on_redis):
    """The whole door: the confirmed launch is sent to the broker once committed, a real worker process takes it,
    and a client polling the replay's `url` sees it end with its child run."""
    from tests.replays.test_replay_worker import wait_for

    worker = celery_worker_on_redis
    operator = harness("operator", LAUNCH, READ)
    response = post(operator, confirmed(operator, {"run": "run-001-recorded", "mode": "rerun"}))
    assert response.status_code == 201, response.content.decode()
    url = response.json()["url"]
    wait_for(lambda: operator.get(url).json()["ended"], 90, "the replay's end", worker, step=0.2)
    read = operator.get(url).json()
    assert (read["replay_state"], read["state"], read["isolation"]) == ("finished", "completed", "netns"), read
    assert read["run"] == f"run-001-recorded~rerun-{read['replay']}" and read["stop_reason"]
    assert operator.get(read["missing_url"]).json()["missing"] == []


def test_issue_token_issues_a_replay_token_that_launches(demo, role_user, capsys, no_broker):
    role_user("operator", "ci-bot")
    call_command(
        "issue_token", "ci-bot", "--name", "ci", "--scope", "replays:launch", "--scope", "replays:read", "--json"
    )
    issued = json.loads(capsys.readouterr().out)
    assert issued["scopes"] == ["replays:launch", "replays:read"]
    client = Client(HTTP_AUTHORIZATION=f"Token {issued['token']}")
    assert post(client, RERUN).status_code == 409  # shown the summary: the token may launch
    assert client.get("/api/v1/runs/").status_code == 403  # and reads no run list: that is runs:import's
