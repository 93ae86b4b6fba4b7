"""Scenario versions: importing a package, exporting one, resolving `NAME@VERSION` (DESIGN §5, §8)."""

from __future__ import annotations

import json
from typing import Any

from django.db import IntegrityError, transaction

from n17q_engine.package import SCENARIO_FORMAT, Package, PackageError, load_scenario

from .models import ScenarioVersion


class ScenarioRefused(ValueError):
    """A scenario package or reference that cannot be used; one line naming what is wrong."""


def scenario_import(package: Package, *, user: Any = None, source: str = "import") -> tuple[ScenarioVersion, bool]:
    """Store a verified scenario package as an immutable version. The same bytes again: the stored one.

    Another package under a name@version already held is refused: a version never changes.
    """
    try:
        scenario = load_scenario(package)
    except PackageError as exc:
        raise ScenarioRefused(str(exc)) from None
    existing = ScenarioVersion.objects.filter(name=scenario.name, version=scenario.version).first()
    if existing is not None:
        if existing.digest == package.digest:
            return existing, False
        raise ScenarioRefused(
            f"{scenario.name}@{scenario.version} is already held with digest {existing.digest}; a scenario version "
            f"is immutable (this package is {package.digest}): mint a new version instead"
        )
    try:
        with transaction.atomic():
            version = ScenarioVersion.objects.create(
                name=scenario.name,
                version=scenario.version,
                digest=package.digest,
                manifest=package.manifest,
                files={name: data.decode("utf-8") for name, data in sorted(package.files.items())},
                source=source,
                imported_by=user if getattr(user, "is_authenticated", False) else None,
            )
    except IntegrityError:
        raise ScenarioRefused(f"{scenario.name}@{scenario.version} was imported concurrently; try again") from None
    return version, True


def scenario_package(version: ScenarioVersion) -> Package:
    """The stored version as a package, verified again (a tampered row is refused, not exported)."""
    try:
        return Package.verify(
            version.manifest, {n: t.encode("utf-8") for n, t in version.files.items()}, SCENARIO_FORMAT
        )
    except PackageError as exc:
        raise ScenarioRefused(f"{version.ref}: the stored package no longer verifies: {exc}") from None


def scenario_resolve(ref: str) -> ScenarioVersion:
    name, sep, number = ref.partition("@")
    if not sep or not name or not number.isdigit():
        raise ScenarioRefused(f"{ref!r}: name a scenario version as NAME@VERSION, e.g. email-delivery@1")
    version = ScenarioVersion.objects.filter(name=name, version=int(number)).first()
    if version is None:
        held = ", ".join(v.ref for v in ScenarioVersion.objects.filter(name=name)) or "none"
        raise ScenarioRefused(f"no scenario version {ref} (versions of {name} held: {held})")
    return version


def scenario_for_run(run: Any) -> ScenarioVersion | None:
    """The version a run names, or else the latest stored version recorded from it (its `source_runs`)."""
    if run.scenario_name and run.scenario_version:
        return ScenarioVersion.objects.filter(name=run.scenario_name, version=run.scenario_version).first()
    for version in ScenarioVersion.objects.order_by("-imported_at", "-id"):
        meta = json.loads(version.files["scenario.json"])  # verified when the version was stored
        if run.run_id in meta.get("source_runs", []):
            return version
    return None
