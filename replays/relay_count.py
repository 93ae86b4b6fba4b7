"""A replay's relayed model calls, counted in its own row (issue 33: "calls through the relay are counted and capped
per replay").

The count lives in `Replay.model_calls` / `model_calls_refused`, written by one conditional UPDATE per call: the row
is taken only while `model_calls < cap`, so of any number of relays of one replay (threads of one worker, a worker
that took over a lapsed lease while the first still runs, a claim after a worker died) exactly `cap` calls are sent.
The count is never reset and never written back from a worker's memory (`services._end` leaves it alone).

The relay answers from the sandbox's relay thread (`n17q_engine.sandbox._RelayChannel`), not the worker's main
thread: Django gives that thread a connection of its own, which is closed after each call rather than left open
for the thread's life (the thread ends with the replay; an open connection would outlive it).
"""

from __future__ import annotations

import threading

from django.db import connections
from django.db.models import F

from .models import Replay


class ReplayCallCount:
    def __init__(self, replay_pk: int) -> None:
        self.replay_pk = replay_pk
        self._owner = threading.get_ident()

    def take(self, cap: int) -> bool:
        try:
            rows = Replay.objects.filter(pk=self.replay_pk)
            if rows.filter(model_calls__lt=cap).update(model_calls=F("model_calls") + 1) == 1:
                return True
            rows.update(model_calls_refused=F("model_calls_refused") + 1)
            return False
        finally:
            self._release()

    def made(self) -> int:
        try:
            return int(Replay.objects.filter(pk=self.replay_pk).values_list("model_calls", flat=True).first() or 0)
        finally:
            self._release()

    def _release(self) -> None:
        if threading.get_ident() != self._owner:
            connections.close_all()  # this thread's connections only (they are per thread)
