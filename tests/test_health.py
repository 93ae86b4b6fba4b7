"""/health/: database, broker and worker heartbeat with clear status codes; replays by state; queue depth."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from n17q_site.celery import app
from replays.heartbeat import Beating, heartbeat_beat, heartbeat_stop
from replays.models import Replay, WorkerHeartbeat
from runs.importer import run_import_from_path
from runs.models import Run
from tests import bundles
from tests.conftest import need_service
from tests.replays.workers import database_url

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.django_db


@pytest.fixture
def file_broker(tmp_path):
    """The embedded file broker in a folder of this test's own (the health check reads its queue)."""
    previous = (app.conf.broker_url, app.conf.broker_transport_options, app.conf.task_default_queue)
    folder = tmp_path / "broker"
    options = {
        "data_folder_in": str(folder / "queue"),
        "data_folder_out": str(folder / "queue"),
        "processed_folder": str(folder / "processed"),
        "control_folder": str(folder / "control"),
        "store_processed": False,
    }
    for key in ("data_folder_in", "processed_folder", "control_folder"):
        Path(str(options[key])).mkdir(parents=True, exist_ok=True)
    app.conf.broker_url, app.conf.broker_transport_options = "filesystem://", options
    app.pool.force_close_all()
    yield options
    app.conf.broker_url, app.conf.broker_transport_options, app.conf.task_default_queue = previous
    app.pool.force_close_all()


def publish(queue: str, count: int) -> None:
    """Messages into `queue` on the broker the app is configured with now (a fresh connection, not the pool's)."""
    import kombu

    target = kombu.Queue(queue, exchange=kombu.Exchange(queue, "direct"), routing_key=queue)
    with app.connection_for_write() as conn:
        producer = conn.Producer()
        for n in range(count):
            producer.publish({"n": n}, exchange=target.exchange, routing_key=queue, declare=[target])


def get(client, query: str = ""):
    return client.get(f"/health/{query}")


def test_it_answers_200_with_every_check_when_the_console_is_healthy(client, role_user, file_broker):
    heartbeat_beat("worker-a@host")
    client.force_login(role_user("viewer"))
    response = get(client)
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["status"] == "ok"
    assert {name: check["ok"] for name, check in body["checks"].items()} == {
        "database": True,
        "broker": True,
        "worker": True,
    }
    assert [w["hostname"] for w in body["checks"]["worker"]["workers"]] == ["worker-a@host"]
    assert body["queue_depth"] == 0 and body["checks"]["broker"]["transport"] == "filesystem"
    assert response["Cache-Control"] == "no-store"


def test_it_answers_503_without_a_recent_worker_heartbeat(client, role_user, file_broker, settings):
    settings.N17Q_HEARTBEAT_S = 10
    heartbeat_beat("old@host")
    WorkerHeartbeat.objects.update(last_seen_at=timezone.now() - timedelta(seconds=31))
    heartbeat_beat("stopped@host")
    heartbeat_stop("stopped@host")
    client.force_login(role_user("viewer"))
    response = get(client)
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "down" and body["checks"]["worker"]["ok"] is False
    assert "no worker heartbeat in the last 30 s" in body["checks"]["worker"]["error"]
    assert body["checks"]["database"]["ok"] and body["checks"]["broker"]["ok"]
    # A web container's own health check leaves the worker out, and is healthy.
    assert get(client, "?check=database,broker").status_code == 200


def test_it_answers_503_when_the_broker_cannot_be_reached(client, role_user, file_broker):
    heartbeat_beat("worker-a@host")
    app.conf.broker_url = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    client.force_login(role_user("viewer"))
    response = get(client)
    assert response.status_code == 503
    broker = response.json()["checks"]["broker"]
    assert broker["ok"] is False and broker["error"]
    assert "queue_depth" not in response.json()


HEALTH_IN_A_FRESH_PROCESS = """
import json, django
django.setup()
from django.test import Client
from django.test.utils import setup_test_environment
setup_test_environment()
answer = Client().get("/health/?check=database")
print(json.dumps({"status": answer.status_code, "body": answer.json()}))
"""


@pytest.mark.parametrize(
    "database_url",
    [
        "postgres://postgres@127.0.0.1:1/test",  # nothing listens on port 1
        "sqlite:////nonexistent-n17q-folder/db.sqlite3",  # a folder that does not exist: cannot be opened
    ],
    ids=["postgresql-refused", "sqlite-unopenable"],
)
def test_it_answers_503_when_the_database_cannot_be_reached(tmp_path, database_url):
    """A real unreachable database, in a process of its own (this one's connection is the test database)."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "N17Q_DATA_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "n17q_site.settings",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-c", HEALTH_IN_A_FRESH_PROCESS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer == {"status": 503, "body": {"status": "down", "checks": {"database": {"ok": False}}}}


def test_it_tells_anonymous_callers_the_status_and_nothing_more(client, file_broker):
    heartbeat_beat("worker-a@host")
    response = get(client)
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "checks": {"database": {"ok": True}, "broker": {"ok": True}, "worker": {"ok": True}},
    }


def test_it_refuses_an_unknown_check(client):
    response = get(client, "?check=database,moon")
    assert response.status_code == 400 and "check" in response.json()["error"]


def test_it_counts_replays_by_state_every_state_listed(client, role_user, file_broker):
    run_import_from_path(bundles.EXAMPLE)
    run = Run.objects.get()
    for state in ("queued", "queued", "running", "failed"):
        Replay.objects.create(source_run=run, mode="reconstruction", state=state)
    heartbeat_beat("worker-a@host")
    client.force_login(role_user("viewer"))
    replays = get(client).json()["replays"]
    assert replays == {**dict.fromkeys(Replay.State.values, 0), "queued": 2, "running": 1, "failed": 1}


def test_it_counts_the_messages_waiting_in_the_file_broker(client, role_user, file_broker, settings):
    settings.N17Q_REPLAY_QUEUE = queue = f"n17q-health-{uuid.uuid4().hex[:8]}"
    publish(queue, 3)
    heartbeat_beat("worker-a@host")
    client.force_login(role_user("viewer"))
    body = get(client).json()
    assert body["queue_depth"] == 3 and body["checks"]["broker"]["queue"] == queue


def test_it_counts_the_messages_waiting_in_redis(client, role_user, file_broker, settings):
    url = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/15")
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
        up = True
    except redis.RedisError:
        up = False
    need_service("Redis", up, f"{url} (REDIS_TEST_URL)")
    app.conf.broker_url, app.conf.broker_transport_options = url, {}
    settings.N17Q_REPLAY_QUEUE = queue = f"n17q-health-{uuid.uuid4().hex[:8]}"
    app.pool.force_close_all()
    try:
        publish(queue, 4)
        heartbeat_beat("worker-a@host")
        client.force_login(role_user("viewer"))
        body = get(client).json()
        assert body["status"] == "ok" and body["queue_depth"] == 4
        assert body["checks"]["broker"]["transport"] == "redis" and "reserved" in body["checks"]["broker"]
    finally:
        # Only this test's keys (the queue and kombu's records of its exchange); never a FLUSHDB.
        redis.Redis.from_url(url).delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")


@pytest.mark.django_db(transaction=True)
def test_a_worker_thread_beats_and_says_when_it_stopped():
    beating = Beating("thread@host", 0.05)
    beating.start()
    deadline = time.monotonic() + 60
    while not WorkerHeartbeat.objects.filter(hostname="thread@host").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    first = WorkerHeartbeat.objects.get(hostname="thread@host").last_seen_at
    deadline = time.monotonic() + 60  # it beats every 50 ms; a loaded machine is slow, not wrong
    while WorkerHeartbeat.objects.get(hostname="thread@host").last_seen_at == first:
        assert time.monotonic() < deadline, "the worker thread beat once and never again"
        time.sleep(0.05)
    assert WorkerHeartbeat.objects.get(hostname="thread@host").last_seen_at > first
    beating.stop()
    assert WorkerHeartbeat.objects.get(hostname="thread@host").stopped_at is not None


@pytest.mark.django_db(transaction=True)
def test_a_real_celery_worker_beats_and_health_follows_it(client, role_user, tmp_path, file_broker):
    """A worker process (`celery -A n17q_site worker`) against this test's own database (a file on SQLite)."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "N17Q_DATA_DIR": str(tmp_path),
        "N17Q_HEARTBEAT_S": "1",
        "N17Q_LOG_FORMAT": "json",
    }
    env.pop("REDIS_URL", None)
    env.pop("N17Q_TEST_DATABASE_NAME", None)
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "n17q_site", "worker", "--pool=solo", "--hostname=health-test@%h"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while not WorkerHeartbeat.objects.filter(hostname__startswith="health-test@").exists():
            assert time.monotonic() < deadline and worker.poll() is None, "the worker never beat"
            time.sleep(0.2)
        client.force_login(role_user("viewer"))
        body = client.get("/health/?check=database,worker").json()
        assert body["status"] == "ok"
        assert body["checks"]["worker"]["workers"][0]["hostname"].startswith("health-test@")
    finally:
        worker.send_signal(signal.SIGTERM)
        output = worker.communicate(timeout=60)[0].decode(errors="replace")
    assert WorkerHeartbeat.objects.get(hostname__startswith="health-test@").stopped_at is not None, output[-2000:]
    assert client.get("/health/?check=database,worker").status_code == 503
