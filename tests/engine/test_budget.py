"""n17q_engine.budget: a checkpoint refuses past the open budget's CPU or wall seconds, in one line; without a budget,
or in another thread (CPU), it does nothing."""

from __future__ import annotations

import contextvars
import threading

import pytest

from n17q_engine.budget import CHECK_EVERY, BudgetExceeded, checkpoint, limit, remaining_wall


def _spin_until_refused() -> BudgetExceeded:
    with pytest.raises(BudgetExceeded) as caught:
        for _ in range(10**9):
            checkpoint()
    return caught.value


def test_a_checkpoint_without_a_budget_does_nothing():
    for _ in range(CHECK_EVERY * 3):
        checkpoint(now=True)
    assert remaining_wall(7.0) == 7.0


def test_a_cpu_budget_is_refused_in_one_line_at_a_checkpoint():
    with limit(what="the upload", cpu_s=0.05, wall_s=3600):
        refused = _spin_until_refused()
    assert "CPU seconds" in str(refused) and "the upload" in str(refused) and "\n" not in str(refused)
    checkpoint(now=True)  # closed: nothing left to refuse


def test_a_wall_budget_is_refused_too():
    with limit(what="the upload", cpu_s=3600, wall_s=0):
        with pytest.raises(BudgetExceeded, match="0 seconds"):
            checkpoint(now=True)
        assert remaining_wall(5.0) == 0.0


def test_the_clocks_are_read_every_check_every_calls():
    with limit(what="x", cpu_s=0, wall_s=3600):
        for _ in range(CHECK_EVERY - 1):
            checkpoint()
        with pytest.raises(BudgetExceeded):
            checkpoint()


def test_another_thread_checks_the_wall_clock_only():
    failures: list[BaseException] = []
    with limit(what="x", cpu_s=0, wall_s=3600):
        carried = contextvars.copy_context()  # as asyncio.to_thread would carry it

        def helper() -> None:
            try:
                carried.run(checkpoint, now=True)
            except BaseException as exc:
                failures.append(exc)

        thread = threading.Thread(target=helper)
        thread.start()
        thread.join()
    assert failures == []
