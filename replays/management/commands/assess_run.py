"""`python manage.py assess_run RUN --user NAME (--dimension D --score N --cite ID... [--rationale TEXT] |
--connection NAME [--model M]) [--json]`, or `assess_run RUN --list --json`: the command door of runs/assessments.py.

A qualitative assessment (seed 003: code clarity, diagnostic reasoning, report usefulness, path economy) is appended
to the run as a `review.assessment` event naming its author; with `--connection`, a model reviewer behind that
approved model connection assesses every dimension. The verdict and the findings never read it. Audited.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from accounts.cli import JsonCommand
from n17q_engine.assessments import DIMENSIONS, AssessmentRefused
from replays import model_review as model_review_service
from runs import annotations as annotation_service
from runs import assessments as assessment_service
from runs.cli import stored_run


class Command(JsonCommand):
    help = "Assess a run qualitatively per dimension (a person, or a model reviewer through a model connection)."

    def add_arguments(self, parser: Any) -> None:
        super().add_arguments(parser)
        parser.add_argument("run", help="the run's id")
        parser.add_argument("--list", action="store_true", help="list the run's assessments per dimension")
        parser.add_argument("--dimension", choices=list(DIMENSIONS), help="the dimension a person assesses")
        parser.add_argument("--score", type=int, help="1..5")
        parser.add_argument("--cite", nargs="+", default=[], help="event or artifact ids of the run it rests on")
        parser.add_argument("--rationale", help="why, in a sentence or two")
        parser.add_argument("--connection", help="an approved model connection: a model reviewer assesses")
        parser.add_argument("--model", default="reviewer", help="the model name sent to that connection")
        parser.add_argument("--user", help="the author: a user with the reviewer role")

    def run(self, **options: Any) -> dict[str, Any]:
        run_id = options["run"]
        run = stored_run(run_id)
        if options["list"]:
            return assessment_service.assessments_json(run)
        if not options.get("user"):
            raise CommandError("--user is required: an assessment names its author")
        user = self.named_user(options["user"])
        if not annotation_service.can_annotate(user):
            raise CommandError(f"{user.get_username()} may not assess runs (the reviewer role may)")
        try:
            if options.get("connection"):
                made = model_review_service.model_review(
                    run, user=user, connection=options["connection"], model=options["model"]
                )
            else:
                made = [
                    assessment_service.assessment_record(
                        run,
                        user=user,
                        dimension=options.get("dimension"),
                        score=options.get("score"),
                        cited=options["cite"],
                        rationale=options.get("rationale"),
                    )
                ]
        except AssessmentRefused as exc:
            raise CommandError(str(exc)) from None
        return {
            "run": run.run_id,
            "made": [
                {"id": m.event.event_id, "dimension": m.event.body["dimension"], "score": m.event.body["score"]}
                for m in made
            ],
        }

    def human(self, result: dict[str, Any]) -> str:
        if "dimensions" in result:
            return "\n".join(
                f"{d['dimension']}: "
                + (", ".join(f"{a['score']}/5 by {a['author']}" for a in d["assessments"]) or "not reviewed")
                for d in result["dimensions"]
            )
        return "\n".join(
            f"Appended {m['id']} ({m['dimension']} {m['score']}/5) to {result['run']}" for m in result["made"]
        )
