"""Scenario versions: importing a package, exporting one, resolving `NAME@VERSION` (DESIGN §5, §8), and the one
resolver of the fixture bodies a version holds by digest (seed 001, "Retention preserved the failure, not every
byte forever").

A promoted fixture holds its reviewed body by digest (`response.body_digest`): the bytes are in the blob store under
the fixture's own hold (`FixtureBodyHold`, the recording's class from its `captured_at`), and once the sweep ended
that hold the body is "source material expired", with the deletion record that says so. `scenario_bodies(version)`
answers both from the holds and the deletion records (one query, none for a version that holds no body by digest),
and `loaded_scenario(version)` loads the version with them. Every reader of a stored version loads it here, never
by `load_scenario(scenario_package(...))` on its own (tests/fixtures_review/test_fixture_bodies.py holds the code to
it): a body by digest read without the resolver would be refused, or worse, read as empty.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.files.storage import storages
from django.db import IntegrityError, transaction

from n17q_engine import canonical
from n17q_engine.package import SCENARIO_FORMAT, Package, PackageError, ScenarioPackage, load_scenario
from runs.models import blob_storage_name
from runs.retention import Expiry, blob_expiries, expiry_of

from .models import FixtureBodyHold, ScenarioVersion


class ScenarioRefused(ValueError):
    """A scenario package or reference that cannot be used; one line naming what is wrong."""


def scenario_import(package: Package, *, user: Any = None, source: str = "import") -> tuple[ScenarioVersion, bool]:
    """Store a verified scenario package as an immutable version. The same bytes again: the stored one.

    Another package under a name@version already held is refused: a version never changes.
    """
    try:
        # Bodies its fixtures hold by digest load as this console holds them (seed 001): a digest it neither keeps
        # nor holds a deletion record for is refused, as the engine refuses it.
        fixtures = json.loads(package.files["fixtures.json"]) if "fixtures.json" in package.files else []
        bodies = fixture_bodies(body_digests(fixtures if isinstance(fixtures, list) else []))
        scenario = load_scenario(package, bodies=bodies.bodies, expired_bodies=bodies.expired)
    except (PackageError, ValueError) as exc:
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


# --- fixture bodies held by digest ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FixtureBodies:
    """The bodies some fixtures hold by digest, as the console holds them now: `bodies` {digest: canonical JSON
    bytes} of those still held, `expiries` {digest: Expiry} of those whose hold a deletion record ended. `expired`
    is the engine's form of the latter ({digest: {class, sensitivity, expired_at, removed_at, record}})."""

    bodies: dict[str, bytes] = field(default_factory=dict)
    expiries: dict[str, Expiry] = field(default_factory=dict)

    @property
    def expired(self) -> dict[str, dict[str, Any]]:
        return {digest: expiry.as_json() for digest, expiry in self.expiries.items()}

    def body(self, fixture: Mapping[str, Any]) -> FixtureBody:
        """What `fixture` (a fixtures.json item) answers with: its inline body, the body its digest names, or
        "source material expired" with the record. Never an empty body in place of an expired one."""
        response = fixture.get("response") or {}
        digest = response.get("body_digest")
        if not digest:
            return FixtureBody(response.get("body"), None, None)
        if digest in self.expiries:
            return FixtureBody(None, digest, self.expiries[digest])
        data = self.bodies.get(digest)
        if data is None:
            raise ScenarioRefused(
                f"fixture {fixture.get('id')}: its body {digest} is neither held nor recorded expired"
            )
        return FixtureBody(json.loads(data), digest, None)


@dataclass(frozen=True)
class FixtureBody:
    value: Any
    digest: str | None  # None: held inline (a fixture minted before bodies were held by digest, or a seed package's)
    expiry: Expiry | None  # set: source material expired, `value` is nothing

    @property
    def expired(self) -> bool:
        return self.expiry is not None


def body_digests(fixtures: Iterable[Mapping[str, Any]]) -> list[str]:
    """The body digests of `fixtures` (fixtures.json items) that hold their body by digest."""
    out = []
    for f in fixtures:
        digest = (f.get("response") or {}).get("body_digest") if isinstance(f, Mapping) else None
        if isinstance(digest, str) and digest not in out:
            out.append(digest)
    return out


def fixture_bodies(digests: Iterable[str]) -> FixtureBodies:
    """The bodies `digests` name, as the fixtures' holds answer: a digest some fixture still holds is carried (its
    bytes read from the blob store), one whose every fixture hold a deletion record ended is expired with the latest
    of them. One query; a second only for a digest no fixture holds (a package imported with bodies by digest), which
    answers as its blob does (the store's bytes, or the removal's record)."""
    wanted = sorted({d for d in digests if d})
    if not wanted:
        return FixtureBodies()
    expiries = fixture_bodies_expiries(wanted)
    store = storages["blobs"]
    live = [d for d in wanted if d not in expiries]
    bodies: dict[str, bytes] = {}
    for digest in live:
        try:
            with store.open(blob_storage_name(digest), "rb") as fh:
                bodies[digest] = fh.read()
        except (FileNotFoundError, OSError):
            raise ScenarioRefused(
                f"fixture body {digest}: the blob store has no bytes for it and no deletion record says they went"
            ) from None
    return FixtureBodies(bodies, expiries)


def fixture_bodies_expiries(digests: Iterable[str]) -> dict[str, Expiry]:
    """`fixture_bodies(digests).expiries` without reading any bytes: which of the bodies the fixtures' holds say
    expired (one query; a second only for a digest no fixture holds)."""
    wanted = sorted({d for d in digests if d})
    if not wanted:
        return {}
    live: set[str] = set()
    ended: dict[str, Any] = {}
    for hold in FixtureBodyHold.objects.filter(blob__digest__in=wanted).select_related("blob", "removed_by"):
        digest = hold.blob.digest
        if hold.removed_by is None:
            live.add(digest)
        elif digest not in ended or hold.removed_by.pk > ended[digest].pk:
            ended[digest] = hold.removed_by
    expiries = {d: expiry_of(record) for d, record in ended.items() if d not in live}
    unheld = [d for d in wanted if d not in live and d not in ended]
    if unheld:
        expiries.update(blob_expiries(unheld))
    return expiries


_BODIES_ATTR = "_n17q_fixture_bodies"


def scenario_bodies(version: ScenarioVersion) -> FixtureBodies:
    """The fixture bodies `version` holds by digest (`fixture_bodies`), read once per row object: a page that asks
    several times costs one query."""
    cached = getattr(version, _BODIES_ATTR, None)
    if cached is None:
        cached = fixture_bodies(body_digests(version.fixture_items))
        setattr(version, _BODIES_ATTR, cached)
    return cached


def loaded_scenario(version: ScenarioVersion) -> ScenarioPackage:
    """The stored version loaded whole, its bodies held by digest resolved (`scenario_bodies`): a fixture whose body
    expired loads as expired (a lookup reaching it stops the replay), never as an empty body. The one place a stored
    version is loaded; PackageError or ScenarioRefused when it does not load."""
    bodies = scenario_bodies(version)
    return load_scenario(scenario_package(version), bodies=bodies.bodies, expired_bodies=bodies.expired)


def source_expired_sentence(fixture_id: str, digest: str, expiry: Expiry | Mapping[str, Any]) -> str:
    """What every page says in place of a fixture body the sweep removed (an Expiry, or the engine's record as a
    `fixture.missing`'s `body_expired` carries it)."""
    name: Any
    sensitivity: Any
    removed_at: Any
    record: Any
    if isinstance(expiry, Expiry):
        name, sensitivity, removed_at, record = (
            expiry.retention_class,
            expiry.sensitivity,
            expiry.removed_at,
            expiry.record_id,
        )
    else:
        name, sensitivity = expiry.get("class"), expiry.get("sensitivity")
        removed_at, record = expiry.get("removed_at"), expiry.get("record")
    when = removed_at
    if isinstance(removed_at, str):
        try:
            when = datetime.fromisoformat(removed_at.replace("Z", "+00:00"))
        except ValueError:
            when = removed_at
    when_text = f"{when:%Y-%m-%d %H:%M} UTC" if isinstance(when, datetime) else str(when)
    kind = f", sensitivity {sensitivity}" if sensitivity else ""
    return (
        f"Source material expired: fixture {fixture_id}'s body {digest} was removed under retention class "
        f"{name!r}{kind} on {when_text} (deletion record {record}); the digest stays, and nothing is served in its "
        "place"
    )


def fixture_body_digest(body: Any) -> str:
    """The digest a fixture holds `body` by (the engine's `response.body_digest`): the sha256 of its canonical JSON."""
    return canonical.digest_json(body)
