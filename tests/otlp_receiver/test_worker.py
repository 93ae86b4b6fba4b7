"""Finalisation through real Celery worker processes on real Redis: each trace is sent once (issue 31).

Two workers, so two sweep loops in two processes race for the same due traces; the only sender is their sweeps
(the spans are stored by the service directly, so no request's sweep sends anything). Each finalisation task's
answer (its traces by state) is in its worker's log: every trace must be in exactly one task.
"""

from __future__ import annotations

import ast
import os
import re
import time
import uuid
from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from otlp_receiver.models import ReceivedTrace
from runs.models import Run
from tests.conftest import need_service
from tests.replays.workers import REDIS_URL, Worker, redis_up

from .test_sweep import receive

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

TRACES = 120
_DONE = re.compile(r"Task otlp_receiver\.finalize_traces\[[^\]]+\] succeeded in [0-9.e-]+s: (\{.*\})\s*$")


@pytest.fixture
def queue():
    need_service("Redis", redis_up(REDIS_URL), f"{REDIS_URL} does not answer (set REDIS_TEST_URL)")
    name = f"n17q-otlp-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    yield name
    import redis

    redis.Redis.from_url(REDIS_URL).delete(name)


def test_real_workers_send_each_due_trace_once(recorder, queue, tmp_path, settings):
    import redis

    env = {"N17Q_OTLP_QUEUE": queue, "N17Q_OTLP_QUIET_SECONDS": "1"}
    workers = [Worker(broker=REDIS_URL, queue=queue, data_dir=tmp_path, env=env) for _ in range(2)]
    try:
        for w in workers:
            w.start()
        # In waves, as an exporter sends them: the sweeps find some due while others are still arriving.
        for wave in range(4):
            for _ in range(TRACES // 4):
                receive(recorder, at=timezone.now() - timedelta(seconds=wave % 2))
            time.sleep(0.3)
        deadline = time.monotonic() + 180
        while ReceivedTrace.objects.exclude(state="finalized").exists():
            assert time.monotonic() < deadline, [w.tail() for w in workers]
            time.sleep(0.2)
        # Let anything still queued run (a duplicate would be there): the queue empties, every task received ends.
        broker = redis.Redis.from_url(REDIS_URL)
        while broker.llen(queue) or any(
            w.log.read_text().count("] received") != w.log.read_text().count("] succeeded") for w in workers
        ):
            assert time.monotonic() < deadline, [w.tail() for w in workers]
            time.sleep(0.2)
    finally:
        for w in workers:
            w.stop()
    sent: Counter[int] = Counter()
    tasks = 0
    for w in workers:
        for line in w.log.read_text(errors="replace").splitlines():
            if m := _DONE.search(line):
                tasks += 1
                for pks in ast.literal_eval(m.group(1)).values():
                    sent.update(pks)
    pks = set(ReceivedTrace.objects.values_list("pk", flat=True))
    assert len(pks) == TRACES and Run.objects.count() == TRACES
    assert sent == Counter(dict.fromkeys(pks, 1)), {pk: n for pk, n in sent.items() if n != 1}
    assert tasks < TRACES  # batched: fewer tasks than traces
