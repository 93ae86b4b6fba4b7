"""`manage.py declare_contract PATH [--user NAME] --json`: declare a tool contract revision to the console.

The file is one contract (DESIGN §5's contract dict), optionally with `migrations_from`: the declared structural
operations that turn fixtures of earlier revisions into this revision's (docs/contract-migration.md). Prints
`{"contract": "TOOL@REVISION", "digest", "created"}`; the same content again is the revision already held, other
content under a held revision is refused. Nothing is stored on a refusal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError

from accounts.cli import JsonCommand
from fixtures_review.contract_migration import MigrationRefused, contract_declare

MAX_CONTRACT_BYTES = 1024 * 1024


class Command(JsonCommand):
    help = "Declare a tool contract revision (and the migrations it declares from earlier revisions)."

    def add_arguments(self, parser: Any) -> None:
        super().add_arguments(parser)
        parser.add_argument("path", help="a JSON file holding one contract")
        parser.add_argument("--user", help="who declares it (who may then not approve what its changes stage)")

    def run(self, **options: Any) -> dict[str, Any]:
        path = Path(options["path"])
        if not path.is_file():
            raise CommandError(f"{path}: no such file")
        if path.stat().st_size > MAX_CONTRACT_BYTES:
            raise CommandError(f"{path}: larger than {MAX_CONTRACT_BYTES} bytes")
        try:
            contract = json.loads(path.read_bytes())
        except (ValueError, UnicodeDecodeError) as exc:
            raise CommandError(f"{path}: not JSON: {' '.join(str(exc).splitlines())}") from None
        user = self.named_user(options.get("user"))
        try:
            revision, created = contract_declare(contract=contract, user=user)
        except MigrationRefused as exc:
            raise CommandError(f"{path}: {exc}") from None
        return {"contract": str(revision), "digest": revision.digest, "created": created}

    def human(self, result: dict[str, Any]) -> str:
        said = "Declared" if result["created"] else "Already declared"
        return f"{said} {result['contract']} ({result['digest']})"
