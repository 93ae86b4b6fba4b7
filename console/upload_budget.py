"""The budget of a web request that reads an upload (issue 35): n17q_engine.budget with the site's settings.

A door wraps its parsing in `upload_budget(what)` and answers `BudgetExceeded` with UPLOAD_BUDGET_STATUS (422) and
the exception's one line; the parsers' checkpoints do the rest.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from django.conf import settings

from n17q_engine.budget import Budget, BudgetExceeded, limit

__all__ = ["UPLOAD_BUDGET_STATUS", "BudgetExceeded", "upload_budget"]

UPLOAD_BUDGET_STATUS = 422


def upload_budget(what: str) -> AbstractContextManager[Budget]:
    return limit(what=what, cpu_s=settings.N17Q_UPLOAD_CPU_S, wall_s=settings.N17Q_UPLOAD_WALL_S)
