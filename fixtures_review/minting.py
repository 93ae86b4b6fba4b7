"""Minting scenario versions (DESIGN §7): a new immutable `name@(latest+1)` from a base version plus fixtures or
minus tools (`scenario_version_mint`), or from a scenario package's files (`scenario_files_mint`), checked whole as
any import is.

Minting serializes per scenario on the scenario's first version row (SELECT … FOR UPDATE, `_lock_scenario`), reads
the latest version after the lock, and builds on it; the unique (name, version) constraint is the last guard.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max

from n17q_engine import canonical
from n17q_engine.agent.model import MODEL_CONTRACT, MODEL_TOOL
from n17q_engine.package import PackageError, build_scenario

from .fixture_checks import fixture_id_for
from .models import FixtureVersion, ScenarioVersion
from .scenarios import ScenarioRefused, body_digests, fixture_bodies, scenario_package


def scenario_version_mint(
    *,
    base: ScenarioVersion,
    add_fixtures: Iterable[Any] = (),
    exclude_tools: dict[str, str] | None = None,
    user: Any,
    source: str,
    _locked: bool = False,
) -> ScenarioVersion:
    """A new immutable ScenarioVersion `base.name@(latest+1)`: base's package plus fixtures / minus tools.

    `add_fixtures` are fixture dicts (with or without an id: a missing id is derived from the content) or
    FixtureVersion rows. A fixture with the key and world condition of one base holds replaces it (a re-recording
    supersedes, it does not make lookups ambiguous). `exclude_tools` {tool: reason} drops the tool's fixtures
    and records the reason in the package's excluded tools. The whole package is checked as any import is (every
    fixture against its contract); a failure is ScenarioRefused and nothing is stored. Race-safe: concurrent
    callers get one version number each.
    """
    try:
        package = scenario_package(base)
    except ScenarioRefused:
        raise
    files = {name: json.loads(data) for name, data in package.files.items()}
    fixtures: list[dict[str, Any]] = list(files["fixtures.json"])
    meta = files["scenario.json"]
    for tool, reason in (exclude_tools or {}).items():
        if not isinstance(reason, str) or not reason.strip():
            raise ScenarioRefused(f"excluding {tool}: say why (the reason is recorded in the scenario version)")
        fixtures = [f for f in fixtures if f.get("tool") != tool]
        excluded = [e for e in meta.get("excluded_tools", []) if e.get("tool") != tool]
        excluded.append({"tool": tool, "reason": reason.strip()})
        meta["excluded_tools"] = sorted(excluded, key=lambda e: e["tool"])
    for item in add_fixtures:
        fixture = dict(item.fixture if isinstance(item, FixtureVersion) else item)
        fixture.setdefault("id", fixture_id_for(fixture))
        key = (fixture.get("tool"), fixture.get("contract_revision"), _digest_of(fixture))
        fixtures = [
            f
            for f in fixtures
            if f.get("id") != fixture["id"]
            and not (
                (f.get("tool"), f.get("contract_revision"), _digest_of(f)) == key
                and (f.get("condition") or None) == (fixture.get("condition") or None)
            )
        ]
        fixtures.append(fixture)
    files["fixtures.json"] = fixtures
    pinned = {c.get("tool") for c in files["contracts.json"] if isinstance(c, dict)}
    if MODEL_TOOL not in pinned and any(f.get("tool") == MODEL_TOOL for f in fixtures):
        # A model answer approved for a scenario that pinned no model.chat contract: the version that holds it pins
        # the built-in contract it was normalized under (docs/agents.md "Model fixtures"), so the package says it.
        files["contracts.json"] = [*files["contracts.json"], copy.deepcopy(MODEL_CONTRACT)]
    return scenario_files_mint(base=base, files=files, user=user, source=source, _locked=_locked)


def scenario_files_mint(
    *, base: ScenarioVersion, files: dict[str, Any], user: Any, source: str, _locked: bool = False
) -> ScenarioVersion:
    """Store `files` (a scenario package's files as JSON values, built from `base`) as `base.name@(latest+1)`,
    based on `base`. Checked whole as any import is; race-safe as `scenario_version_mint` says."""
    meta = files["scenario.json"]
    actor = user if getattr(user, "is_authenticated", False) else None
    for _attempt in range(5):
        with transaction.atomic():
            if not _locked:
                _lock_scenario(base.name)
            latest = ScenarioVersion.objects.filter(name=base.name).aggregate(n=Max("version"))["n"] or 0
            meta["version"] = latest + 1
            try:
                # Bodies held by digest load as the console holds them (kept, or expired with their record).
                bodies = fixture_bodies(body_digests(files["fixtures.json"]))
                new_package = build_scenario(files, bodies=bodies.bodies, expired_bodies=bodies.expired)
            except PackageError as exc:
                raise ScenarioRefused(f"{base.name}@{latest + 1} would not load: {exc}") from None
            try:
                with transaction.atomic():
                    return ScenarioVersion.objects.create(
                        name=base.name,
                        version=latest + 1,
                        digest=new_package.digest,
                        manifest=new_package.manifest,
                        files={n: d.decode("utf-8") for n, d in sorted(new_package.files.items())},
                        source=source[:20],
                        imported_by=actor,
                        based_on=base,
                    )
            except IntegrityError:
                # Another minter took this number (or minted these exact bytes); take the next one.
                if ScenarioVersion.objects.filter(digest=new_package.digest).exists():
                    raise ScenarioRefused(
                        f"a scenario version with exactly this content is already held "
                        f"({ScenarioVersion.objects.get(digest=new_package.digest).ref})"
                    ) from None
                continue
    raise ScenarioRefused(f"could not mint a version of {base.name}: too many concurrent mints, try again")


def _lock_scenario(name: str) -> None:
    """Serialize mints of one scenario: lock its first version's row (a row every minter of it must pass)."""
    first = ScenarioVersion.objects.filter(name=name).order_by("version").values_list("pk", flat=True).first()
    if first is not None:
        list(ScenarioVersion.objects.select_for_update().filter(pk=first).values_list("pk", flat=True))


def _digest_of(fixture: Mapping[str, Any]) -> str | None:
    request = fixture.get("request")
    return fixture.get("request_digest") or (canonical.request_digest(request) if request is not None else None)


def fixture_request_digest(fixture: Mapping[str, Any]) -> str | None:
    """The request digest a fixture (as a scenario package holds it) is keyed by."""
    return _digest_of(fixture)
