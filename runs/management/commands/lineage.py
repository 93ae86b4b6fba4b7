from typing import Any

from django.core.management.base import CommandError

from accounts.cli import JsonCommand
from runs import selectors
from runs.models import Run


class Command(JsonCommand):
    help = "Check a stored run's lineage with today's rules (LIN001-LIN015)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("run", help="the run's id")
        super().add_arguments(parser)

    def run(self, *, run: str, **options: Any) -> dict[str, Any]:
        try:
            stored = selectors.run_get(run)
        except Run.DoesNotExist:
            raise CommandError(f"no run {run!r}") from None
        return selectors.run_lineage_json(stored)

    def human(self, result: dict[str, Any]) -> str:
        lines = [
            f"{result['run']}: {result.get('finding_count', len(result['findings']))} lineage findings"
            if result["findings"]
            else f"{result['run']}: no lineage findings"
        ]
        lines += [
            f"  {f['code']} {f['severity']}: {f['message']} ({f['from']} -> {f['to']})" for f in result["findings"]
        ]
        # DESIGN §10: no finding for a check that had nothing to judge is not a pass; say so.
        lines += [f"  {u['code']} not evaluated: {u['reason']}" for u in result.get("unevaluated", [])]
        return "\n".join(lines)
