"""Replays through a real Celery worker process on real Redis (issue 6 acceptance).

The worker is a subprocess (`celery -A n17q_site worker`, prefork) reading the test database; Redis is
REDIS_TEST_URL (the Makefile decides), or for the restart drill a private redis-server on a port of
helper C's range. With CI=true a missing Redis fails these tests instead of skipping them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.core.management import call_command

from fixtures_review.scenarios import scenario_import
from n17q_engine.canonical import canonical_json
from replays.models import Replay
from replays.services import replay_launch
from runs.importer import run_import_from_path
from runs.models import Event, Run
from tests.conftest import need_service
from tests.engine import replaylib as rl
from tests.replays.workers import REDIS_URL, REPO, PrivateRedis, Worker, celery_to, free_port, redis_up

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

LONG_CALLS = 3000


@pytest.fixture
def redis_url():
    need_service("Redis", redis_up(REDIS_URL), f"{REDIS_URL} does not answer (set REDIS_TEST_URL)")
    return REDIS_URL


@pytest.fixture
def queue(redis_url):
    name = f"n17q-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    yield name
    import redis

    redis.Redis.from_url(redis_url).delete(name)


@pytest.fixture
def workers(tmp_path):
    started: list[Worker] = []

    def make(broker: str, queue: str, **kw) -> Worker:
        w = Worker(broker=broker, queue=queue, data_dir=tmp_path, **kw)
        started.append(w)
        return w

    yield make
    for w in started:
        w.stop()


@pytest.fixture
def demo(capsys):
    call_command("load_demo", "--json")
    return json.loads(capsys.readouterr().out)


def long_source(tmp_path: Path, calls: int = LONG_CALLS) -> Run:
    """A recorded run of `calls` searches and a scenario version answering each: a replay of a few seconds."""
    fixtures = [rl.fixture(f"f{i}", rl.search_request(f"query {i}"), {"hits": [f"doc {i}"]}) for i in range(calls)]
    scenario_import(rl.scenario(fixtures=fixtures, name="long-search"))
    manifest, events = rl.source_run(
        [("docs.search", 1, {"query": f"query {i}"}) for i in range(calls)], run_id=f"run-long-{uuid.uuid4().hex[:6]}"
    )
    folder = tmp_path / "long-bundle"
    (folder / "blobs" / "sha256").mkdir(parents=True)
    (folder / "manifest.json").write_bytes(canonical_json(manifest))
    (folder / "events.jsonl").write_bytes(events)
    return run_import_from_path(folder).run


def wait_for(predicate, timeout: float, what: str, worker: Worker | None = None, step: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"{what} did not happen within {timeout} s" + (f"\n{worker.tail()}" if worker else ""))


def ended(*pks: int):
    return lambda: all(Replay.objects.get(pk=pk).ended for pk in pks)


def running_mid_replay(pk: int, attempt: int = 1):
    """Attempt number `attempt` of the replay is running and has made progress. The attempt number matters right
    after a kill: until the restarted worker claims the replay again, its row still shows the killed attempt
    running with progress, and killing the new worker then would kill it before it claimed anything."""

    def check():
        r = Replay.objects.get(pk=pk)
        return r.state == Replay.State.RUNNING and r.attempts >= attempt and r.progress_events > 2

    return check


def assert_one_complete_child(replay: Replay) -> Run:
    source = replay.source_run
    children = Run.objects.filter(run_id__startswith=f"{source.run_id}~{replay.mode}-{replay.pk}")
    assert children.count() == 1
    child = children.get()
    assert replay.run_id == child.pk and child.parent_id == source.pk
    events = Event.objects.filter(run=child)
    assert events.count() == child.event_count == len(set(events.values_list("event_id", flat=True)))
    return child


def test_it_runs_a_launched_replay_in_a_worker_and_imports_a_completed_child_run(
    demo, redis_url, queue, workers, settings
):
    celery_to(redis_url, settings, queue)
    worker = workers(redis_url, queue).start()
    replay = replay_launch(Run.objects.get(run_id="run-001-recorded"), mode="rerun")

    wait_for(ended(replay.pk), 60, "the replay's end", worker)
    replay.refresh_from_db()
    assert replay.state == Replay.State.FINISHED, replay.error
    child = assert_one_complete_child(replay)
    assert (child.final_state, child.environment, child.mode) == ("completed", "fixture", "rerun")
    assert replay.attempts == 1 and replay.claim_token == "" and replay.isolation == "netns"
    assert replay.progress_events == child.event_count
    deliveries = Event.objects.filter(run=child, kind="world.transition", body__resource__startswith="mailbox:")
    assert deliveries.count() == 1


def test_it_loses_no_replay_and_duplicates_no_event_when_the_worker_is_sigkilled_three_times(
    demo, redis_url, queue, workers, settings, tmp_path
):
    celery_to(redis_url, settings, queue)
    long_run = long_source(tmp_path)
    worker = workers(redis_url, queue).start()
    long = replay_launch(long_run, mode="rerun", scenario="long-search@1")
    queued_behind = [
        replay_launch(Run.objects.get(run_id="run-001-recorded"), mode="rerun"),
        replay_launch(Run.objects.get(run_id="run-000-recorded"), mode="rerun"),
    ]

    for kill in range(3):
        wait_for(
            running_mid_replay(long.pk, attempt=kill + 1),
            90,
            f"replay {long.pk} running (before kill {kill + 1})",
            worker,
        )
        worker.kill()
        # the dead worker's claim is left running (or was just queued again by its own recovery pass, if that ran
        # in the instant between the pool process's death and its own)
        assert Replay.objects.get(pk=long.pk).state in (Replay.State.RUNNING, Replay.State.QUEUED)
        worker.start()  # its recovery pass finds the claim of a process that is gone and queues the replay again

    wait_for(ended(long.pk, *(r.pk for r in queued_behind)), 180, "every replay's end", worker, step=0.2)
    long.refresh_from_db()
    assert long.state == Replay.State.FINISHED, long.error
    assert long.attempts == 4
    child = assert_one_complete_child(long)
    assert Event.objects.filter(run=child, kind="tool.call").count() == LONG_CALLS
    assert child.final_state == "completed"
    for replay in queued_behind:
        replay.refresh_from_db()
        assert replay.state == Replay.State.FINISHED, replay.error
        assert_one_complete_child(replay)
    assert Replay.objects.exclude(state=Replay.State.FINISHED).count() == 0  # 0 lost


def test_it_finishes_the_replay_and_recovers_when_redis_restarts_mid_replay(demo, workers, settings, tmp_path):
    redis_server = PrivateRedis(free_port(18610), tmp_path).start()
    try:
        queue = "n17q-restart-drill"
        celery_to(redis_server.url, settings, queue)
        long_run = long_source(tmp_path)
        worker = workers(redis_server.url, queue).start()
        long = replay_launch(long_run, mode="rerun", scenario="long-search@1")
        wait_for(running_mid_replay(long.pk), 90, "the long replay running", worker)

        redis_server.stop()
        # launched while the broker is away: it cannot be sent, and it is not lost
        during = replay_launch(Run.objects.get(run_id="run-001-recorded"), mode="rerun")
        assert Replay.objects.get(pk=during.pk).state == Replay.State.QUEUED
        time.sleep(1)  # the broker stays down a moment (part of the drill, not a wait for a condition)
        redis_server.start()

        wait_for(ended(long.pk, during.pk), 120, "both replays' end after the restart", worker, step=0.2)
        after = replay_launch(Run.objects.get(run_id="run-000-recorded"), mode="rerun")
        wait_for(ended(after.pk), 60, "a replay launched after the restart", worker)
        for replay in (long, during, after):
            replay.refresh_from_db()
            assert replay.state == Replay.State.FINISHED, (replay.pk, replay.error, worker.tail())
            assert_one_complete_child(replay)
        assert worker.proc.poll() is None  # the same worker process, reconnected
    finally:
        redis_server.stop()


def manage(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_replay_wait_json_enqueues_for_a_worker_and_prints_the_result(demo, redis_url, queue, workers):
    worker = workers(redis_url, queue).start()
    done = manage("replay", "run-001-recorded", "--mode", "rerun", "--wait", "--json", env=worker.env())
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert set(out) >= {"replay", "run", "mode", "state", "isolation", "missing", "findings"}
    assert (out["mode"], out["state"], out["replay_state"], out["isolation"]) == (
        "rerun",
        "completed",
        "finished",
        "netns",
    )
    replay = Replay.objects.get(pk=out["replay"])
    assert replay.run.run_id == out["run"] and replay.claimed_by.split(":")[-1] != str(os.getpid())


def test_replay_wait_without_a_worker_says_so_and_queues_nothing(demo, redis_url, queue, workers):
    env = Worker(broker=redis_url, queue=queue, data_dir=Path(os.environ.get("TMPDIR", "/tmp"))).env()
    before = Replay.objects.count()
    done = manage("replay", "run-001-recorded", "--mode", "rerun", "--wait", "--json", "--ping-timeout", "1", env=env)
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("CommandError: no Celery worker consuming queue")
    assert "nothing was queued" in lines[0]
    assert Replay.objects.count() == before


def test_replay_wait_with_the_broker_down_says_so(demo, workers, tmp_path):
    port = free_port(18630)
    env = Worker(broker=f"redis://127.0.0.1:{port}/0", queue="nobody", data_dir=tmp_path).env()
    done = manage("replay", "run-001-recorded", "--mode", "rerun", "--wait", "--ping-timeout", "1", env=env)
    assert done.returncode == 1
    assert "cannot be reached" in done.stderr or "no Celery worker" in done.stderr
    assert Replay.objects.count() == 0
