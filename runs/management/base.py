"""A base for N17Q's commands: `--json` prints one JSON object on stdout; an error is one line on stderr.

Errors become CommandError, which Django prints as a single `CommandError: …` line with exit status 1
(and raises to the caller under call_command, which the tests use).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from n17q_engine.bundle import BundleError


class JsonCommand(BaseCommand):
    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            result = self.run(**options)
        except CommandError:
            raise
        except BundleError as exc:
            raise CommandError(" ".join(str(exc).splitlines())) from None
        if options.get("json"):
            self.stdout.write(json.dumps(result, ensure_ascii=False))
        else:
            self.stdout.write(self.human(result))

    def run(self, **options: Any) -> dict[str, Any]:
        raise NotImplementedError

    def human(self, result: dict[str, Any]) -> str:
        return json.dumps(result, indent=2, ensure_ascii=False)
