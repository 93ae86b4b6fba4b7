"""`manage.py import_package PATH`: store a scenario package (dir, .zip, .tar.gz) as an immutable version."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import CommandError
from django.db import transaction

from accounts.audit import audit_record
from accounts.cli import JsonCommand
from fixtures_review.scenarios import ScenarioRefused, scenario_import
from n17q_engine.package import SCENARIO_FORMAT, PackageError, read_package


class Command(JsonCommand):
    help = "Import a scenario package; every file is digest-verified and one changed byte refuses it."

    def add_arguments(self, parser: Any) -> None:
        super().add_arguments(parser)
        parser.add_argument("path")

    def run(self, **options: Any) -> dict[str, Any]:
        try:
            package = read_package(Path(options["path"]), SCENARIO_FORMAT)
            with transaction.atomic():
                version, created = scenario_import(package)
                if created:
                    audit_record(
                        actor=None,
                        action="scenario.import",
                        target=f"scenario:{version.ref}",
                        detail={"digest": version.digest, "path": str(options["path"])},
                    )
        except (PackageError, ScenarioRefused) as exc:
            raise CommandError(" ".join(str(exc).splitlines())) from None
        return {"scenario": version.ref, "digest": version.digest, "created": created}
