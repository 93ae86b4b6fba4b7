"""`manage.py export_package SCENARIO@VERSION OUT`: write a scenario version as a package (dir, .zip, .tar.gz).

A fixture holding its body by digest (seed 001) is exported as the version holds it: `fixtures.json` pins the digest,
and the bytes stay in this console's blob store under the fixture's hold (an export is not a way around retention).
The answer says which bodies the package names by digest and which of them expired, with their deletion records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import CommandError

from accounts.cli import JsonCommand
from fixtures_review.scenarios import (
    ScenarioRefused,
    body_digests,
    fixture_bodies_expiries,
    scenario_package,
    scenario_resolve,
)
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
            digests = body_digests(version.fixture_items)
            expired = fixture_bodies_expiries(digests)
        except ScenarioRefused as exc:
            raise CommandError(str(exc)) from None
        write_archive(package, out)
        answer: dict[str, Any] = {
            "scenario": version.ref,
            "digest": package.digest,
            "out": str(out),
            "files": len(package.files),
        }
        if digests:  # added keys (DESIGN §8)
            answer["bodies_by_digest"] = digests
            answer["expired_bodies"] = {d: e.as_json() for d, e in sorted(expired.items())}
        return answer
