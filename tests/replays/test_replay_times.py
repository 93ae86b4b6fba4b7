"""The replay page and `replay --json` report logical and execution time apart (seed 001 "Time had to be
controlled"), and the run page's detail panel shows a fixture result's recording age, source and freshness."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from replays import services as replays
from replays.models import Replay
from runs.models import Event, Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(capsys: pytest.CaptureFixture[str]) -> None:
    call_command("load_demo", "--json")
    capsys.readouterr()


@pytest.fixture
def viewer(role_user: Any) -> Client:
    client = Client()
    client.force_login(role_user("viewer", "viewer-times"))
    return client


def _dd(page: str, css: str) -> str:
    match = re.search(rf'<dd class="{css}">(.*?)</dd>', page, re.S)
    assert match is not None, f"no <dd class={css}>"
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", match.group(1))).strip()


@pytest.mark.seed("001", "Time had to be controlled")
def test_the_replay_page_and_its_json_show_logical_and_execution_time_apart(
    demo: None, viewer: Client, django_assert_max_num_queries: Any
) -> None:
    source = Run.objects.get(run_id="run-001-recorded")
    replay = replays.replay_execute(replays.replay_create(source, mode="rerun").pk)
    assert replay.state == Replay.State.FINISHED and replay.run is not None and replay.wall_s is not None

    # The rerun follows the recording's pace on the logical clock: 2 min 34.2 s of scenario time, from the clock's
    # start to the last event, whatever the sandbox took on the wall clock.
    times = replays.replay_json(replay)["time"]
    assert times["logical"] == {
        "start": "2026-06-10T14:00:00.000000Z",
        "end": "2026-06-10T14:02:34.200000Z",
        "elapsed_s": 154.2,
        "elapsed": "2 min 34 s",
    }
    assert times["execution"]["sandbox_s"] == replay.wall_s
    assert times["execution"]["finished_at"] is not None
    assert json.loads(json.dumps(times)) == times

    with django_assert_max_num_queries(12):
        page = viewer.get(f"/replays/{replay.pk}/").content.decode()
    logical, wall = _dd(page, "logical"), _dd(page, "wall")
    assert logical.startswith("2026-06-10T14:02:34.200000Z: 2 min 34 s of scenario time since 2026-06-10T14:00:00")
    assert f"{replay.wall_s:.3f} s in the sandbox" in wall
    # each says only its own: no wall figure among the logical, no scenario time among the wall
    assert f"{replay.wall_s:.3f}" not in logical and "scenario time" not in wall
    assert "<dt>Execution (wall) time</dt>" in page and "<dt>Logical time</dt>" in page


@pytest.mark.seed("000", "Credentials never entered replay artifacts")
def test_the_detail_panel_shows_a_fixture_results_recording_age_source_and_freshness(
    demo: None, viewer: Client
) -> None:
    replay = replays.replay_execute(replays.replay_create(Run.objects.get(run_id="run-001-recorded"), mode="rerun").pk)
    assert replay.run is not None
    result = Event.objects.filter(run=replay.run, kind="tool.result").order_by("seq").first()
    assert result is not None and result.body["freshness"]["state"] == "not_evaluated"
    page = viewer.get(f"/runs/{replay.run.run_id}/", {"event": result.event_id}).content.decode()
    recording = re.search(r"<dt>recording</dt><dd>(.*?)</dd>", page, re.S)
    assert recording is not None
    text = recording.group(1)
    assert text.startswith(f"recorded {result.body['freshness']['recorded_at']}, ")
    assert ", 6 s before logical 2026-06-10T14:00:06Z; " in text and "contract revision 3" in text
    assert text.endswith("; not evaluated")
