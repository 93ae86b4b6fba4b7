"""`python manage.py run_summaries [RUN ...] [--all] [--limit N]`: compute and store the search summaries
(runs.models.RunSummary, issue 38 §3) of runs stored without one.

Migration 0022 writes them for the runs stored before it; an import writes its run's. `--all` recomputes every run's
(after a change of the price table, `N17Q_MODEL_PRICES`: the stored cost is priced when the summary is written).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from runs.models import Run
from runs.summary import summaries_fill


class Command(BaseCommand):
    help = "Compute and store the search summaries of runs stored without one (or every run's, with --all)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("runs", nargs="*", help="run ids (default: every run without a summary)")
        parser.add_argument("--all", action="store_true", help="recompute every run's summary (a new price table)")
        parser.add_argument("--limit", type=int, default=None, help="at most this many runs")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["limit"] is not None and options["limit"] < 1:
            raise CommandError("--limit must be 1 or more")
        if options["runs"]:
            found = set(Run.objects.filter(run_id__in=options["runs"]).values_list("run_id", flat=True))
            missing = sorted(set(options["runs"]) - found)
            if missing:
                raise CommandError(f"no run with id {missing[0]!r}")
        done = summaries_fill(run_ids=options["runs"] or None, every=options["all"], limit=options["limit"])
        self.stdout.write(f"wrote the search summaries of {done} run{'s' if done != 1 else ''}")
