"""A work budget for one request's reading of what it was sent: CPU seconds and wall-clock seconds (issue 35).

A door opens a budget around the parsing of an upload (`limit`); the parsers call `checkpoint()` at their chunk
boundaries (an archive chunk, an event line, a span, an exchange). Past either limit the checkpoint raises
`BudgetExceeded`, one line, and the door answers 422 with nothing stored: a worker is never held by one request for
longer than its budget plus one chunk. Without an open budget (a management command, a worker's job) a checkpoint
does nothing.

CPU time is the opening thread's (`time.thread_time`): a web process's other requests do not spend it. A checkpoint
in another thread (a helper thread the parser started) checks the wall clock only. The clocks are read every
`CHECK_EVERY` checkpoints (or when a caller says `now=True` at a phase boundary), so a tight loop pays a counter.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

CHECK_EVERY = 64


class BudgetExceeded(Exception):
    """The request used up its budget; the message is one line, fit for the answer."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.splitlines()))


@dataclass
class Budget:
    what: str
    cpu_s: float
    wall_s: float
    cpu_start: float
    wall_start: float
    thread: int
    calls: int = 0

    def check(self) -> None:
        if threading.get_ident() == self.thread and time.thread_time() - self.cpu_start >= self.cpu_s:
            raise BudgetExceeded(
                f"{self.what} took more than the {self.cpu_s:g} CPU seconds a request may spend reading it; "
                "nothing was stored: send it in smaller parts"
            )
        if self.remaining_wall() <= 0:
            raise BudgetExceeded(
                f"{self.what} took more than the {self.wall_s:g} seconds a request may spend reading it; "
                "nothing was stored: send it in smaller parts"
            )

    def remaining_wall(self) -> float:
        return self.wall_s - (time.monotonic() - self.wall_start)


_current: ContextVar[Budget | None] = ContextVar("n17q_budget", default=None)


@contextmanager
def limit(*, what: str, cpu_s: float, wall_s: float) -> Iterator[Budget]:
    """Open a budget of `cpu_s` CPU seconds and `wall_s` seconds for the enclosed reading of `what`."""
    budget = Budget(
        what=what,
        cpu_s=cpu_s,
        wall_s=wall_s,
        cpu_start=time.thread_time(),
        wall_start=time.monotonic(),
        thread=threading.get_ident(),
    )
    token = _current.set(budget)
    try:
        yield budget
    finally:
        _current.reset(token)


def checkpoint(*, now: bool = False) -> None:
    """Raise BudgetExceeded if the open budget (if any) is spent; the clocks are read every CHECK_EVERY calls."""
    budget = _current.get()
    if budget is None:
        return
    budget.calls += 1
    if now or budget.calls % CHECK_EVERY == 0:
        budget.check()


def remaining_wall(default: float) -> float:
    """Seconds left of the open budget's wall clock (at least 0), or `default` without one: for a wait's timeout."""
    budget = _current.get()
    return default if budget is None else max(0.0, min(default, budget.remaining_wall()))
