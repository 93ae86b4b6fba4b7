"""`python manage.py run_facts [RUN ...] [--all] [--json]`: compute and store the facts of runs stored without them.

A run imported before the fact layer (issue 34) gets its facts on first read anyway (runs/facts.py); this computes
them ahead, so the first page that shows such a run does not pay for the pass over its events. `--all` recomputes
every run's (after a change of the fact layer's rules); by default only runs without current facts are computed.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from n17q_engine.facts import FACTS_VERSION
from runs.facts import facts_compute
from runs.models import Run


class Command(BaseCommand):
    help = "Compute and store the facts (issue 34) of runs stored without them."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("runs", nargs="*", help="run ids (default: every run without current facts)")
        parser.add_argument("--all", action="store_true", help="recompute every run's facts")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        runs = Run.objects.order_by("id")
        if options["runs"]:
            runs = runs.filter(run_id__in=options["runs"])
            missing = set(options["runs"]) - set(runs.values_list("run_id", flat=True))
            if missing:
                raise CommandError(f"no run with id {sorted(missing)[0]!r}")
        done = []
        # Parents first (ordered by id: a run is imported after the run it replays), so a replay inherits from
        # its source's fresh facts.
        for run in runs.select_related("parent").iterator():
            current = isinstance(run.facts, dict) and run.facts.get("version") == FACTS_VERSION
            if current and not options["all"] and not options["runs"]:
                continue
            facts = facts_compute(run)
            Run.objects.filter(pk=run.pk).update(facts=facts)
            done.append(run.run_id)
        if options["json"]:
            self.stdout.write(json.dumps({"computed": done}))
        else:
            self.stdout.write(f"computed the facts of {len(done)} run{'s' if len(done) != 1 else ''}")
