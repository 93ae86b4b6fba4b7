"""`manage.py migrate_fixtures SCENARIO@VERSION --to-revision R [--tool TOOL] [--user NAME] --json`.

Applies the structural operations contract revision R declares (`declare_contract`) to every fixture of the
scenario version for that tool: a new scenario version pinning revision R holds the migrated fixtures (each keeping
the original payload digest in its provenance); fixtures whose change carries meaning are staged for review
instead. The version migrated is untouched, and replays pinned to it stay pinned. docs/contract-migration.md.

Prints `{"scenario", "based_on", "tool", "from_revision", "to_revision", "path", "migrated": [{"fixture", "from",
"payload_digest", "operations"}], "staged": [{"staged", "from", "reasons", "blockers"}]}`. An unknown version, no
declared path to R, R not newer, a version that is not the latest, a migration already made: one line on stderr,
exit status 1, nothing written.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from accounts.cli import JsonCommand
from fixtures_review.contract_migration import MigrationRefused, fixtures_migrate

FLAGS = {"scenario": "SCENARIO@VERSION", "to_revision": "--to-revision", "tool": "--tool"}


class Command(JsonCommand):
    help = "Migrate a scenario version's fixtures of one tool to a newer declared contract revision."

    def add_arguments(self, parser: Any) -> None:
        super().add_arguments(parser)
        parser.add_argument("scenario", help="the scenario version, NAME@VERSION")
        parser.add_argument("--to-revision", required=True, help="the contract revision to migrate to")
        parser.add_argument("--tool", help="the tool (needed only when revision R is declared for several)")
        parser.add_argument("--user", help="who runs it (who may then not approve what it stages)")

    def run(self, **options: Any) -> dict[str, Any]:
        raw = str(options["to_revision"]).strip()
        if not raw.isdigit() or int(raw) < 1:
            raise CommandError(f"--to-revision: a positive integer, got {options['to_revision']!r}")
        user = self.named_user(options.get("user"))
        try:
            result = fixtures_migrate(
                ref=options["scenario"], to_revision=int(raw), tool=options.get("tool"), user=user
            )
        except MigrationRefused as exc:
            flag = FLAGS.get(exc.field or "")
            raise CommandError(f"{flag}: {exc}" if flag else str(exc)) from None
        return result.to_json()

    def human(self, result: dict[str, Any]) -> str:
        lines = [
            f"Minted {result['scenario']} from {result['based_on']}: {result['tool']} revision "
            f"{' → '.join(map(str, result['path']))}"
        ]
        for m in result["migrated"]:
            ops = ", ".join(m["operations"]) or "no change but the revision"
            lines.append(f"  migrated {m['from']} → {m['fixture']} ({ops}); payload {m['payload_digest']}")
        for s in result["staged"]:
            lines.append(f"  staged {s['staged']} for review (from {s['from']}): {'; '.join(s['reasons'])}")
        return "\n".join(lines)
