"""`manage.py export_package SCENARIO@VERSION OUT`: write a scenario version as a package (dir, .zip, .tar.gz)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import CommandError

from accounts.cli import JsonCommand
from fixtures_review.scenarios import ScenarioRefused, scenario_package, scenario_resolve
from n17q_engine.package import write_archive


class Command(JsonCommand):
    help = "Export an immutable scenario version as a digest-verified package."

    def add_arguments(self, parser: Any) -> None:
        super().add_arguments(parser)
        parser.add_argument("scenario", metavar="SCENARIO@VERSION")
        parser.add_argument("out", help="a new directory, or a path ending .zip or .tar.gz")

    def run(self, **options: Any) -> dict[str, Any]:
        out = Path(options["out"])
        if out.exists():
            raise CommandError(f"{out} exists; export to a new path (nothing is overwritten)")
        try:
            version = scenario_resolve(options["scenario"])
            package = scenario_package(version)
        except ScenarioRefused as exc:
            raise CommandError(str(exc)) from None
        write_archive(package, out)
        return {"scenario": version.ref, "digest": package.digest, "out": str(out), "files": len(package.files)}
