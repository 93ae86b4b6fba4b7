"""The model-call door (issue 37 point 2): an imported run's model calls staged as `model.chat` recordings
(`fixtures_review.run_model_calls.run_model_calls_stage`), from an OTLP trace (the real OpenTelemetry SDK's) and from
a real Inspect eval's log, each holding every canary in its messages, its tool calls and its answer."""

from __future__ import annotations

import html

import pytest

from fixtures_review.models import StagedRecording
from fixtures_review.run_model_calls import run_model_calls_stage
from n17q_engine.agent.model import MODEL_TOOL
from runs.models import Run

from . import spans
from .canaries import Canaries
from .test_run_doors import import_run, inspect_logs

pytestmark = pytest.mark.django_db(transaction=True)

FETCH_CONFIG = [{"name": "fetch_config", "description": "Read a configuration.", "parameters": {"type": "object"}}]


def _stage(run_id: str, **more) -> dict:
    run = Run.objects.get(run_id=run_id)
    out = run_model_calls_stage(run=run, scenario="docs-research", connection="docs-api", **more).to_json()
    assert out["recordings"], out  # a positive control: the door took the calls
    assert all(StagedRecording.objects.get(public_id=r["staged"]).tool == MODEL_TOOL for r in out["recordings"])
    return out


def test_otlp_model_calls(sweep, seed_scenarios, reviewed_connections, tmp_path):
    path = tmp_path / "spans.bin"
    path.write_bytes(spans.protobuf(sweep.canaries))
    answer = import_run(path)
    # The GenAI span records no tool definitions: the stager gives them, bytes the run never held (canaries too).
    given = sweep.also(Canaries.fresh("model tools given"))
    tools = [{**FETCH_CONFIG[0], "description": given.prose(), "parameters": {"type": "object", "x": given.document()}}]
    _stage(answer["run"], model_tools=tools)
    sweep.check("model calls of an OTLP run (run_model_calls_stage)")


@pytest.fixture(scope="module")
def inspect_made(tmp_path_factory) -> tuple[Canaries, dict]:
    canaries = Canaries.fresh()
    return canaries, inspect_logs(canaries, tmp_path_factory.mktemp("inspect"))


def test_inspect_model_calls(sweep, seed_scenarios, reviewed_connections, inspect_made):
    sweep.use(inspect_made[0])
    answer = import_run(inspect_made[1]["eval"])
    _stage(answer["run"])
    sweep.check("model calls of an Inspect run (run_model_calls_stage)")


def _conversation_pages(client, run_id: str) -> list[tuple[str, bytes]]:
    """The detail panel of every model call of the run (issue 38 point 2: the conversation view), as people get it."""
    from runs.models import Event

    pages = []
    for event_id in Event.objects.filter(run__run_id=run_id, kind="model.proposal").values_list("event_id", flat=True):
        response = client.get(f"/runs/{run_id}/events/{event_id}/", HTTP_HX_REQUEST="true")
        assert response.status_code == 200
        assert b'class="conversation"' in response.content  # a positive control: the conversation is laid out
        pages.append((event_id, response.content))
    assert pages
    return pages


def _no_canary_on(pages: list[tuple[str, bytes]], canaries: Canaries, door: str) -> None:
    from . import reader

    finder = reader.Finder([*canaries.all])
    # Searched as sent and with the template's escaping undone (a canary's quote or ampersand is escaped in HTML).
    hits = [
        hit.line(door)
        for event_id, page in pages
        for data in (page, html.unescape(page.decode()).encode())
        for hit in reader.search(finder, "page", event_id, data)
    ]
    assert hits == []
    # The messages were laid out, masked: the canaries' places show the mask.
    assert any(b"[masked:" in page for _event_id, page in pages)


def test_otlp_conversation_view(sweep, client, role_user, tmp_path):
    path = tmp_path / "spans.bin"
    path.write_bytes(spans.protobuf(sweep.canaries))
    answer = import_run(path)
    client.force_login(role_user("viewer"))
    _no_canary_on(_conversation_pages(client, answer["run"]), sweep.canaries, "conversation view (OTLP)")
    sweep.check("conversation view of an OTLP run's model calls")


def test_inspect_conversation_view(sweep, client, role_user, inspect_made):
    sweep.use(inspect_made[0])
    answer = import_run(inspect_made[1]["eval"])
    client.force_login(role_user("viewer"))
    _no_canary_on(_conversation_pages(client, answer["run"]), inspect_made[0], "conversation view (Inspect)")
    sweep.check("conversation view of an Inspect run's model calls")
