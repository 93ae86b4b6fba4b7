"""`python manage.py annotate_run RUN --user NAME (--score NAME=VALUE [--scale S] | --label NAME | --comment TEXT |
--correct EVENT.FIELD=VALUE --basis EVENT... --rationale TEXT) [--event ID | --finding CODE:EVENT] [--supersedes ID]
[--json]`, or `annotate_run RUN --list --json`: the command door of runs/annotations.py (docs/annotations.md).

An annotation is appended to the run as a new event naming its author (`--user`, who must hold the reviewer role),
basis and time; nothing the run recorded changes. Audited (`run.annotated`).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError

from accounts.cli import JsonCommand
from runs import annotations as annotation_service
from runs.cli import stored_run


def _value(text: str) -> Any:
    """A typed value as JSON when it reads as JSON (0.8, null, true), else as the text itself (error, pass)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


class Command(JsonCommand):
    help = "Annotate a run, an event or a finding (score, label, comment), or correct a recorded fact, or --list."

    def add_arguments(self, parser: Any) -> None:
        super().add_arguments(parser)
        parser.add_argument("run", help="the run's id")
        what = parser.add_mutually_exclusive_group(required=True)
        what.add_argument("--score", metavar="NAME=VALUE", help="a score: correctness=0.8, verdict=pass")
        what.add_argument("--label", metavar="NAME", help="a label (a tag)")
        what.add_argument(
            "--comment", metavar="TEXT", help=f"a comment (at most {annotation_service.TEXT_MAX} characters)"
        )
        what.add_argument("--correct", metavar="EVENT.FIELD=VALUE", help="a correction: e-14.outcome=error")
        what.add_argument("--list", action="store_true", help="list the run's annotations and corrections")
        parser.add_argument(
            "--scale", help="a score's scale: LOW..HIGH (default 0..1) or words joined by / (pass/fail)"
        )
        parser.add_argument("--text", help="a comment with a score or a label")
        parser.add_argument("--event", help="annotate this event (a span of an imported trace is its event)")
        parser.add_argument("--finding", help="annotate this finding: CODE:from-event (LIN006:e-12) or its id")
        parser.add_argument("--basis", nargs="+", default=[], help="a correction: the events it rests on")
        parser.add_argument("--rationale", help="a correction: why, in a sentence")
        parser.add_argument("--supersedes", help="the id of an earlier annotation this one replaces")
        parser.add_argument("--user", help="the author: a user with the reviewer role (required to annotate)")

    def run(self, **options: Any) -> dict[str, Any]:
        run_id = options["run"]
        run = stored_run(run_id)
        if options["list"]:
            rows = annotation_service.run_annotations(run, limit=annotation_service.annotation_total(run))
            return {"run": run.run_id, "annotations": [a.as_json() for a in rows]}
        if not options.get("user"):
            raise CommandError("--user is required: an annotation names its author")
        user = self.named_user(options["user"])
        if not annotation_service.can_annotate(user):
            raise CommandError(f"{user.get_username()} may not annotate runs (the reviewer role may)")
        data: dict[str, Any] = {"event": options.get("event"), "finding": options.get("finding")}
        data["supersedes"] = options.get("supersedes")
        if options.get("correct"):
            where, sep, value = options["correct"].partition("=")
            event, dot, field = where.rpartition(".")
            if not sep or not dot:
                raise CommandError("--correct must be EVENT.FIELD=VALUE (e-14.outcome=error)")
            data.update(
                annotation="correction",
                event=event,
                field=field,
                corrected=_value(value),
                basis=options["basis"],
                rationale=options.get("rationale"),
            )
        elif options.get("score"):
            name, sep, value = options["score"].partition("=")
            if not sep:
                raise CommandError("--score must be NAME=VALUE (correctness=0.8)")
            data.update(annotation="score", name=name, value=_value(value), scale=options.get("scale"))
            data["text"] = options.get("text")
        elif options.get("label"):
            data.update(annotation="label", name=options["label"], text=options.get("text"))
        else:
            data.update(annotation="comment", text=options.get("comment"))
        try:
            made = annotation_service.annotate(run, data, user=user)
        except annotation_service.AnnotationRefused as exc:
            raise CommandError(str(exc)) from None
        return {"run": run.run_id, **annotation_service.Annotation(made.event).as_json(), "masked": made.masked}

    def human(self, result: dict[str, Any]) -> str:
        if "annotations" in result:
            return (
                "\n".join(f"{a['id']} {a['annotation']} by {a['author']} at {a['at']}" for a in result["annotations"])
                or f"{result['run']} has no annotation"
            )
        return f"Appended {result['id']} ({result['annotation']}) to {result['run']}"
