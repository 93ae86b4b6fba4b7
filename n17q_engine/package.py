"""Packages: the scenario package and the portable replay package (docs/packages.md has the schema).

A package is a set of named files and a manifest, `package.json`, that lists every file with the SHA-256 of
its bytes. The same package travels three ways, each verified the same way on load:

- a directory (`package.json` beside the files),
- a `.zip` or `.tar.gz` of that directory (unpacked by `archive.py`, which refuses unsafe members),
- the wire form a replay sandbox reads on stdin (`WIRE_MAGIC`): a first line naming the form, a second line
  `{"files": [[name, size], ...], "package.json": <manifest>}` (canonical JSON), then each file's bytes in that
  order, as they are: nothing to escape or decode on the way in.

Loading refuses, with the file's name: a file the manifest does not list, a listed file that is missing, a
digest that differs (one changed byte), a name that is not a plain relative path, a manifest of another
format. Files are UTF-8 JSON, written in canonical form, so a package's bytes depend only on its content.

Two formats use this:

- `n17q.scenario-package/1` (`ScenarioPackage`): an immutable scenario version. Files `scenario.json`,
  `contracts.json`, `fixtures.json`, `world.json`, `workspaces.json`, `policy.json`. Everything is data:
  contracts, fixtures, snapshots, policy rules. There is no key that could hold an endpoint, a credential
  or code, and a key that names one (`url`, `endpoint`, `host`, `password`, `secret`, `token`, `api_key`,
  `credentials`, `authorization`, `code`, `script`) is refused anywhere outside fixture response bodies
  and recorded requests (which are evidence: a captured page may well contain a link).
- `n17q.replay-package/1` (`ReplayPackage`): what one replay reads. `replay.json` (the replay's identity,
  mode, the one declared variation, decider, launch instant, and `checkpoint`, the id of the source run's
  `checkpoint` event it branches from, present only when that is not the run's start), the scenario
  package's files under `scenario/` (its own manifest included and verified again), and the source run as a bundle under
  `source/` (`manifest.json`, `events.jsonl`, `blobs/sha256/<hex>`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import canonical
from .bundle import BundleError, load_json
from .concurrency import Race, RaceError, parse_races
from .contracts import ContractError, ContractSet
from .fixtures import Fixture, FixtureError, FixtureRegistry
from .identifiers import INT32_MAX, id_problem, scenario_name_problem
from .path_globs import glob_problem
from .vocabulary import BUDGET_RESOURCES, FAULT_STAGES, RUN_STATES
from .world import SimulatedWorld, WorldError, parse_time

MANIFEST = "package.json"
WIRE_MAGIC = b"n17q.package-wire/2\n"  # /1 was one JSON object with every file in base64
SCENARIO_FORMAT = "n17q.scenario-package/1"
REPLAY_FORMAT = "n17q.replay-package/1"
SCENARIO_FILES = ("contracts.json", "fixtures.json", "policy.json", "scenario.json", "workspaces.json", "world.json")
SCOPES = ("adapter", "segment", "scenario")
# Where a replay package carries the fixture bodies its scenario holds by digest (seed 001; docs/packages.md).
FIXTURE_BODIES = "fixture-bodies/sha256/"
MODES = ("reconstruction", "rerun", "counterfactual")
MAX_FILES = 100_000
MAX_PACKAGE_BYTES = 2 << 30
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9][A-Za-z0-9._-]*)*$")
# Keys that would let a package carry an endpoint, a credential or code. Fixture bodies and recorded
# requests are evidence and are not searched (a captured page may contain a link).
FORBIDDEN_KEYS = frozenset(
    {
        "url",
        "urls",
        "endpoint",
        "endpoints",
        "host",
        "hostname",
        "password",
        "secret",
        "token",
        "api_key",
        "apikey",
        "credential",
        "credentials",
        "authorization",
        "code",
        "script",
        "command_line",
    }
)


class PackageError(ValueError):
    """A package that cannot be loaded; the message names the file (and the field) at fault."""


# --- the container ---------------------------------------------------------------------------------------------


def dump(value: Any) -> bytes:
    """A package file's bytes: canonical JSON, so equal content is equal bytes."""
    return canonical.canonical_json(value)


@dataclass(frozen=True)
class Package:
    """A verified manifest and its files (name -> bytes)."""

    manifest: dict[str, Any]
    files: dict[str, bytes]

    @property
    def digest(self) -> str:
        """The package's identity: the digest of its manifest, which pins every file's digest."""
        return canonical.digest_json(self.manifest)

    @classmethod
    def build(cls, fmt: str, header: Mapping[str, Any], files: Mapping[str, bytes]) -> Package:
        for name in files:
            _check_name(name)
        manifest = {
            **header,
            "format": fmt,
            "files": {name: canonical.digest_bytes(data) for name, data in sorted(files.items())},
        }
        return cls(manifest, dict(files))

    def json(self, name: str) -> Any:
        if name not in self.files:
            raise PackageError(f"{name}: not in the package")
        return parse_json(self.files[name], name)

    # directory
    def write_dir(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in self.files.items():
            target = directory / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        (directory / MANIFEST).write_bytes(dump(self.manifest))
        return directory

    @classmethod
    def read_dir(cls, directory: Path, fmt: str) -> Package:
        manifest_path = directory / MANIFEST
        if not manifest_path.is_file():
            raise PackageError(f"{MANIFEST}: missing (not a package directory: {directory})")
        manifest = _manifest(manifest_path.read_bytes(), fmt)
        present = {
            p.relative_to(directory).as_posix()
            for p in directory.rglob("*")
            if (p.is_file() or p.is_symlink()) and p != manifest_path
        }
        listed = set(manifest["files"])
        extra = sorted(present - listed)
        if extra:
            raise PackageError(f"{extra[0]}: in the package but not listed in {MANIFEST}")
        files = {}
        for name in sorted(listed):
            path = directory / name
            if path.is_symlink() or not path.is_file():
                raise PackageError(f"{name}: listed in {MANIFEST} but missing (or not a regular file)")
            files[name] = path.read_bytes()
        return _verified(manifest, files)

    # wire
    def to_wire(self) -> bytes:
        names = sorted(self.files)
        header = {MANIFEST: self.manifest, "files": [[name, len(self.files[name])] for name in names]}
        return b"".join([WIRE_MAGIC, dump(header), b"\n", *(self.files[name] for name in names)])

    @classmethod
    def from_wire(cls, data: bytes, fmt: str) -> Package:
        if not data.startswith(WIRE_MAGIC):
            raise PackageError(f"the package's wire form starts with {WIRE_MAGIC!r}")
        end = data.find(b"\n", len(WIRE_MAGIC))
        view = memoryview(data)
        try:
            outer = json.loads(view[len(WIRE_MAGIC) : end].tobytes()) if end >= 0 else None
        except (ValueError, UnicodeDecodeError) as exc:
            raise PackageError(f"the package's wire header is not JSON: {exc}") from None
        if not isinstance(outer, dict) or set(outer) != {MANIFEST, "files"} or not isinstance(outer["files"], list):
            raise PackageError(f'the wire header is {{"{MANIFEST}": ..., "files": [[name, size], ...]}}')
        files: dict[str, bytes] = {}
        offset = end + 1
        for item in outer["files"]:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
                raise PackageError(f"the wire header lists {item!r}, not [name, size]")
            name, size = item
            if not isinstance(size, int) or isinstance(size, bool) or size < 0 or offset + size > len(data):
                raise PackageError(f"{name}: the wire form does not hold its {size!r} bytes")
            if name in files:
                raise PackageError(f"{name}: twice in the wire form")
            files[name] = view[offset : offset + size].tobytes()
            offset += size
        if offset != len(data):
            raise PackageError(f"the wire form holds {len(data) - offset} bytes its header does not account for")
        return cls.verify(outer[MANIFEST], files, fmt)

    @classmethod
    def verify(cls, manifest: Any, files: Mapping[str, bytes], fmt: str) -> Package:
        """A package from a manifest and files held elsewhere (a database row, say), checked as on any load."""
        manifest = _manifest(dump(manifest), fmt)
        extra = sorted(set(files) - set(manifest["files"]))
        if extra:
            raise PackageError(f"{extra[0]}: in the package but not listed in {MANIFEST}")
        return _verified(manifest, dict(files))

    def subpackage(self, prefix: str, fmt: str) -> Package:
        """The package stored under `prefix/` (its own manifest included), verified on its own."""
        inner_manifest = self.files.get(f"{prefix}/{MANIFEST}")
        if inner_manifest is None:
            raise PackageError(f"{prefix}/{MANIFEST}: missing")
        manifest = _manifest(inner_manifest, fmt, where=f"{prefix}/{MANIFEST}")
        files = {name[len(prefix) + 1 :]: data for name, data in self.files.items() if name.startswith(prefix + "/")}
        files.pop(MANIFEST)
        extra = sorted(set(files) - set(manifest["files"]))
        if extra:
            raise PackageError(f"{prefix}/{extra[0]}: not listed in {prefix}/{MANIFEST}")
        return _verified(manifest, files, prefix=prefix + "/")


def parse_json(raw: bytes, name: str) -> Any:
    """Strict JSON (the bundle's rules: no NaN, no NUL, bounded depth); every failure names the file."""

    def err(field: str | None, message: str) -> PackageError:
        return PackageError(f"{name}: {field + ': ' if field else ''}{message}")

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PackageError(f"{name}: not UTF-8 (byte {exc.start})") from None
    if _SUSPECT.search(text):  # a NUL or a lone surrogate could be in there: the bundle's full walk decides
        try:
            return load_json(text, err)
        except json.JSONDecodeError as exc:
            raise PackageError(f"{name}: not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") from None
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise PackageError(f"{name}: not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") from None
    except RecursionError:
        raise PackageError(f"{name}: not valid JSON (nested too deeply)") from None
    except ValueError as exc:
        raise PackageError(f"{name}: not valid JSON ({exc})") from None


_SUSPECT = re.compile(r"\\u(?:0000|[dD][89a-fA-F])|\x00")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME_RE.match(name) or ".." in name.split("/") or name == MANIFEST:
        raise PackageError(f"{name!r}: a package file name is a plain relative path")


def _manifest(raw: bytes, fmt: str, *, where: str = MANIFEST) -> dict[str, Any]:
    manifest = parse_json(raw, where)
    if not isinstance(manifest, dict):
        raise PackageError(f"{where}: must be a JSON object")
    if manifest.get("format") != fmt:
        raise PackageError(f"{where}: format is {manifest.get('format')!r}, expected {fmt!r}")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise PackageError(f"{where}: files must list every file with its digest")
    if len(files) > MAX_FILES:
        raise PackageError(f"{where}: more than {MAX_FILES} files")
    for name, digest in files.items():
        _check_name(name)
        if not canonical.is_digest(digest):
            raise PackageError(f"{where}: files.{name}: {digest!r} is not a sha256: digest")
    return manifest


def _verified(manifest: dict[str, Any], files: dict[str, bytes], *, prefix: str = "") -> Package:
    for name, digest in sorted(manifest["files"].items()):
        data = files.get(name)
        if data is None:
            raise PackageError(f"{prefix}{name}: listed in {MANIFEST} but missing")
        actual = canonical.digest_bytes(data)
        if actual != digest:
            raise PackageError(f"{prefix}{name}: digest mismatch: {MANIFEST} says {digest}, the file is {actual}")
    return Package(manifest, files)


def read_package(path: Path, fmt: str) -> Package:
    """A package from a directory, a .zip or a .tar.gz (safely unpacked to a temporary folder)."""
    import shutil
    import tempfile

    from .archive import unpack

    if path.is_dir():
        return Package.read_dir(path, fmt)
    if not path.is_file():
        raise PackageError(f"{path}: no such file or directory")
    dest = Path(tempfile.mkdtemp(prefix="n17q-package-"))
    try:
        root = unpack(path, dest, max_bytes=MAX_PACKAGE_BYTES, max_members=MAX_FILES + 1, marker=MANIFEST)
        return Package.read_dir(root, fmt)
    except BundleError as exc:
        raise PackageError(f"{path.name}: {exc}") from None
    finally:
        shutil.rmtree(dest, ignore_errors=True)


def write_archive(package: Package, out: Path) -> Path:
    """Write `package` as a directory, or as .zip / .tar.gz when `out` ends so."""
    name = out.name
    if not (name.endswith(".zip") or name.endswith(".tar.gz") or name.endswith(".tgz")):
        return package.write_dir(out)
    import io
    import tarfile
    import zipfile

    members = sorted([(MANIFEST, dump(package.manifest)), *package.files.items()])
    tmp = out.with_name(out.name + ".partial")
    if name.endswith(".zip"):
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for member, data in members:
                info = zipfile.ZipInfo(member, date_time=(1980, 1, 1, 0, 0, 0))
                info.external_attr = 0o644 << 16
                zf.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    else:
        with tarfile.open(tmp, "w:gz", format=tarfile.PAX_FORMAT) as tf:
            for member, data in members:
                entry = tarfile.TarInfo(member)
                entry.size, entry.mode, entry.mtime = len(data), 0o644, 0
                tf.addfile(entry, io.BytesIO(data))
    tmp.replace(out)
    return out


# --- the scenario package ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EffectRoute:
    """How an effect on a destination is carried out in the fixture world."""

    destination_prefix: str
    tool: str  # the mutation contract an execution goes through
    status_tool: str | None  # the read a careful agent asks before resending after an unknown outcome
    status_args: tuple[str, ...]  # which of the effect's arguments the status read takes


@dataclass(frozen=True)
class Fault:
    tool: str
    stage: str
    request_digest: str | None  # None: every request of the tool


@dataclass(frozen=True)
class QuietHours:
    """Hours of the logical clock (UTC) in which effects to a rule's destination are held back: [start, end) in
    minutes of the day; an `end` before `start` spans midnight (22:00-07:00)."""

    start: int
    end: int

    def holds(self, minute: int) -> bool:
        if self.start <= self.end:
            return self.start <= minute < self.end
        return minute >= self.start or minute < self.end

    @property
    def text(self) -> str:
        return f"{self.start // 60:02d}:{self.start % 60:02d}-{self.end // 60:02d}:{self.end % 60:02d} UTC"


@dataclass(frozen=True)
class PolicyRule:
    destination_prefix: str
    required: tuple[str, ...]
    approval: str  # "required" | "none"
    # Time-dependent policy (seed 001 "Time had to be controlled"), read from the replay's logical clock only: an
    # approval binds for `approval_expires_s` seconds of scenario time after it was given; effects are denied in
    # `quiet_hours`. None: the rule has no such limit.
    approval_expires_s: float | None = None
    quiet_hours: QuietHours | None = None


@dataclass(frozen=True)
class Policy:
    revision: str
    rules: tuple[PolicyRule, ...]
    require_all: bool  # every required purpose must have admitted evidence (False: any one suffices)
    lineage_gate: bool  # the final gate re-checks lineage before an intent is activated

    def rule_for(self, destination: str) -> PolicyRule | None:
        for rule in self.rules:
            if destination.startswith(rule.destination_prefix):
                return rule
        return None


@dataclass(frozen=True)
class Budget:
    """A declared budget of one resource (issue 19, seed 003 "Budgets exposed recovery cost"): `limit` is what a
    replay may spend across all its attempts; `recovery_reserve` of it is kept for recovery (work in an attempt
    started to recover from another), so ordinary work may spend at most `limit - recovery_reserve`."""

    resource: str
    limit: float
    recovery_reserve: float

    @property
    def ordinary(self) -> float:
        return max(0.0, self.limit - self.recovery_reserve)


@dataclass(frozen=True)
class Grant:
    """A scoped authorization the fixture world issues to a replay as a synthetic token (issue 19, seed 000
    "Credentials never entered replay artifacts"): it authorizes `tools` on `account`, and nothing else."""

    id: str
    account: str
    tools: tuple[str, ...]


@dataclass(frozen=True)
class ScenarioPackage:
    """A loaded, checked scenario version. Built only by `load_scenario`, which refuses anything inconsistent."""

    package: Package
    name: str
    version: int
    seed: str
    world_name: str
    clock_start: str
    scope: str
    source_runs: tuple[str, ...]
    recorded_between: list[str] | None
    excluded_tools: tuple[dict[str, str], ...]
    uncovered: tuple[str, ...]
    invariants: tuple[dict[str, Any], ...]
    delays: Mapping[str, float]
    faults: tuple[Fault, ...]
    effects: tuple[EffectRoute, ...]
    contracts: ContractSet
    registry: FixtureRegistry
    fixtures: tuple[Fixture, ...]
    world: dict[str, Any]  # the snapshot; each replay builds its own SimulatedWorld from it
    workspaces: Mapping[str, dict[str, Any]]
    policies: Mapping[str, Policy]
    current_policy: str
    approvals: str  # "simulated": a recorded human decision is replayed as a simulated approval; "none"
    races: tuple[Race, ...] = ()  # declared concurrency (concurrency.py, docs/concurrency.md)
    # Issue 19 (additive, all optional in scenario.json): declared budgets with their recovery reserve, the grants
    # the world issues as synthetic tokens, and which tools need one (tool -> the request field naming the account).
    budgets: Mapping[str, Budget] = field(default_factory=dict)
    grants: tuple[Grant, ...] = ()
    authorized_tools: Mapping[str, str] = field(default_factory=dict)
    # Seed 003 "The scenario definition grew richer" (additive, optional in scenario.json): `instructions`,
    # `file_scope`, `allowed_effects`, `acceptable_stop_states` as declared (`_declared`); a replay's scope note
    # carries them and n17q_engine/scenario_evaluation.py judges its end state against them.
    declared: Mapping[str, Any] = field(default_factory=dict)
    # Seed 000 "Unknown fixture data stayed unknown" (additive, optional in scenario.json): the values of a tool's
    # answer this scenario needs, [{tool, path, reason}]. A fixture answer that marks one absent, redacted,
    # unavailable or not applicable, or an excluded tool whose value is required, stops the replay as an incomplete
    # test world instead of carrying on without it (replay/calls.py).
    required_values: tuple[dict[str, str], ...] = ()
    # Seed 000 "Credentials never entered replay artifacts" (freshness against simulated time): tool -> the oldest a
    # fixture's recording may be, in seconds of scenario time, when a replay serves it (`replay/calls.py` `_freshness`).
    freshness: Mapping[str, float] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return self.package.digest

    @property
    def ref(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version}

    def route_for(self, destination: str) -> EffectRoute | None:
        for route in self.effects:
            if destination.startswith(route.destination_prefix):
                return route
        return None

    def race_for(self, tool: str) -> Race | None:
        return next((race for race in self.races if race.tool == tool), None)

    def excluded(self, tool: str) -> str | None:
        for item in self.excluded_tools:
            if item["tool"] == tool:
                return item["reason"]
        return None

    def requires(self, tool: str) -> dict[str, str] | None:
        """The first value this scenario requires of `tool`'s answers, or None."""
        return next((item for item in self.required_values if item["tool"] == tool), None)

    def required_absent(self, tool: str, absent: Mapping[str, str]) -> tuple[dict[str, str], str, str] | None:
        """(the requirement, the absent path, its kind) when `absent` (a result's {path: kind}) leaves out a value the
        scenario requires of `tool`: the path itself, a part of it, or what holds it (`body` holds `body.email`)."""
        for item in self.required_values:
            if item["tool"] != tool:
                continue
            need = item["path"]
            for path, kind in absent.items():
                if path == need or need.startswith(path + ".") or path.startswith(need + "."):
                    return item, path, kind
        return None


def build_scenario(
    files: Mapping[str, Any],
    *,
    bodies: Mapping[str, bytes] | None = None,
    expired_bodies: Mapping[str, Mapping[str, Any]] | None = None,
) -> Package:
    """A scenario package from its files' JSON values (the seed script and the tests build them so). `bodies` and
    `expired_bodies`: the fixture bodies held by digest, as `load_scenario` takes them (not part of the package)."""
    missing = sorted(set(SCENARIO_FILES) - set(files))
    if missing:
        raise PackageError(f"{missing[0]}: a scenario package needs it")
    scenario = files["scenario.json"]
    header = {"scenario": {"name": scenario.get("name"), "version": scenario.get("version")}}
    package = Package.build(SCENARIO_FORMAT, header, {name: dump(value) for name, value in files.items()})
    load_scenario(package, bodies=bodies, expired_bodies=expired_bodies)  # refuse to build what could not be loaded
    return package


def fixture_bodies(bodies: Mapping[str, bytes], where: str) -> dict[str, Any]:
    """{digest: body} of fixture bodies held by digest ({digest: canonical JSON bytes}): each one's bytes must hash
    to its digest, so a body carried beside a package is as verified as the package's own files."""
    out: dict[str, Any] = {}
    for digest, data in bodies.items():
        if not canonical.is_digest(digest) or canonical.digest_bytes(data) != digest:
            raise PackageError(f"{where}{digest}: the body's bytes do not hash to its digest")
        out[digest] = parse_json(data, f"{where}{digest}")
    return out


def check_body_expiries(expired: Any, where: str, *, carried: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The deletion records of fixture bodies whose bytes are gone ({digest: {class, sensitivity, expired_at,
    removed_at, record}}), checked; a digest listed as expired cannot also be carried."""
    out: dict[str, dict[str, Any]] = {}
    for digest, entry in _obj(expired, where).items():
        if not canonical.is_digest(digest) or digest in carried:
            raise PackageError(f"{where}.{digest}: not a sha256: digest the package lacks")
        _keys(
            _obj(entry, f"{where}.{digest}"),
            f"{where}.{digest}",
            required={"class", "sensitivity", "expired_at", "removed_at", "record"},
        )
        if not isinstance(entry["class"], str) or not isinstance(entry["sensitivity"], str):
            raise PackageError(f"{where}.{digest}: class and sensitivity must be strings")
        _time(entry["removed_at"], f"{where}.{digest}.removed_at")
        out[digest] = dict(entry)
    return out


def load_scenario(
    package: Package,
    *,
    fixtures_normalized: bool = False,
    bodies: Mapping[str, bytes] | None = None,
    expired_bodies: Mapping[str, Mapping[str, Any]] | None = None,
) -> ScenarioPackage:
    """Check a scenario package whole: every file, every fixture against its contract, every cross-reference.

    A fixture holding its body by digest (`response.body_digest`, seed 001) takes it from `bodies` ({digest:
    canonical JSON bytes}, each checked against its digest) or, when retention removed its bytes, from
    `expired_bodies` ({digest: deletion record}): the package's own digest is the same either way, and a lookup
    reaching an expired body stops the replay (`fixtures.BodyExpired`). A digest in neither is refused.

    `fixtures_normalized=True` (only `load_replay`, for a scenario its builder checked in full under
    `CHECK_REVISION`) skips re-normalizing each fixture's request; every other check still runs, and each
    fixture's key is still computed from its request (see `Fixture.from_dict`).
    """
    if package.manifest.get("format") != SCENARIO_FORMAT:
        raise PackageError(f"{MANIFEST}: not a scenario package")
    names = set(package.files)
    for name in SCENARIO_FILES:
        if name not in names:
            raise PackageError(f"{name}: a scenario package needs it")
    extra = sorted(names - set(SCENARIO_FILES))
    if extra:
        raise PackageError(f"{extra[0]}: not a file of {SCENARIO_FORMAT}")
    values = {name: package.json(name) for name in SCENARIO_FILES}
    # fixtures.json and world.json are schema-strict (an unknown key is refused when they load) and hold evidence
    # (recorded requests, responses, states) that may well contain a link; the other files are walked.
    for name in ("contracts.json", "policy.json", "scenario.json", "workspaces.json"):
        _no_endpoints(values[name], name)

    meta = _obj(values["scenario.json"], "scenario.json")
    _keys(
        meta,
        "scenario.json",
        required={"name", "version", "seed", "clock_start", "scope"},
        optional={
            "world",
            "source_runs",
            "recorded_between",
            "excluded_tools",
            "uncovered",
            "invariants",
            "delays",
            "faults",
            "effects",
            "approvals",
            "description",
            "contract_migrations",
            "concurrency",
            "budget",
            "grants",
            "authorized_tools",
            "instructions",
            "file_scope",
            "allowed_effects",
            "acceptable_stop_states",
            "minimal_fixtures",
            "required_values",
            "freshness",
        },
    )
    name = meta["name"]
    problem = scenario_name_problem(name)
    if problem is not None:
        raise PackageError(f"scenario.json: name {problem}")
    version = meta["version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise PackageError(f"scenario.json: version must be a positive integer, got {version!r}")
    if version > INT32_MAX:  # kept in a 32-bit column (fixtures_review ScenarioVersion.version)
        raise PackageError(f"scenario.json: version must be at most {INT32_MAX}, got a larger one")
    header = package.manifest.get("scenario")
    if header != {"name": name, "version": version}:
        raise PackageError(f"{MANIFEST}: scenario {header!r} differs from scenario.json ({name}@{version})")
    seed = meta["seed"]
    if not isinstance(seed, str) or not seed:
        raise PackageError("scenario.json: seed must be a non-empty string")
    clock_start = _time(meta["clock_start"], "scenario.json: clock_start")
    scope = meta["scope"]
    if scope not in SCOPES:
        raise PackageError(f"scenario.json: scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    source_runs = tuple(_strs(meta.get("source_runs", []), "scenario.json: source_runs"))
    recorded = meta.get("recorded_between")
    if recorded is not None:
        if not isinstance(recorded, list) or len(recorded) != 2:
            raise PackageError("scenario.json: recorded_between must be [first, last] or null")
        for i, moment in enumerate(recorded):
            _time(moment, f"scenario.json: recorded_between[{i}]")

    try:
        contracts = ContractSet.from_dicts(_list(values["contracts.json"], "contracts.json"))
    except ContractError as exc:
        raise PackageError(f"contracts.json: {exc}") from None
    by_key = {c.key: c for c in contracts}
    for i, contract in enumerate(contracts):
        problem = id_problem(contract.tool, what="a tool name")
        if problem is not None:
            raise PackageError(f"contracts.json[{i}]: tool {problem}")
        if contract.revision > INT32_MAX:  # kept in 32-bit columns (captures, fixture versions)
            raise PackageError(f"contracts.json[{i}]: revision must be at most {INT32_MAX}, got a larger one")
    fixture_items = _list(values["fixtures.json"], "fixtures.json")
    carried = fixture_bodies(bodies or {}, "fixture body ")
    expired_records = check_body_expiries(expired_bodies or {}, "fixture bodies expired", carried=carried)
    fixtures = []
    for i, item in enumerate(fixture_items):
        key = (item.get("tool"), item.get("contract_revision")) if isinstance(item, dict) else None
        contract = by_key.get(key) if key else None
        if contract is None:
            raise PackageError(f"fixtures.json[{i}]: no contract {key} in contracts.json for this fixture")
        try:
            fixtures.append(
                Fixture.from_dict(
                    item,
                    contract,
                    parsed=True,
                    normalized=fixtures_normalized,
                    bodies=carried,
                    expired_bodies=expired_records,
                )
            )
        except FixtureError as exc:
            raise PackageError(f"fixtures.json[{i}]: {exc}") from None
    for i, fixture in enumerate(fixtures):
        problem = id_problem(fixture.id, what="a fixture id")
        if problem is not None:
            raise PackageError(f"fixtures.json[{i}]: id {problem}")
    try:
        registry = FixtureRegistry(fixtures)
    except FixtureError as exc:
        raise PackageError(f"fixtures.json: {exc}") from None

    try:
        world = SimulatedWorld.from_snapshot(values["world.json"])
    except WorldError as exc:
        raise PackageError(f"world.json: {exc}") from None
    if "world" in meta and meta["world"] != world.name:
        raise PackageError(
            f"scenario.json: world names {meta['world']!r}, but world.json's world (the one a replay runs in) is "
            f"{world.name!r}"
        )
    workspaces = _workspaces(values["workspaces.json"])
    policies, current = _policies(values["policy.json"])

    excluded = []
    for i, item in enumerate(_list(meta.get("excluded_tools", []), "scenario.json: excluded_tools")):
        where = f"scenario.json: excluded_tools[{i}]"
        _keys(_obj(item, where), where, required={"tool", "reason"})
        if not isinstance(item["reason"], str) or not item["reason"].strip():
            raise PackageError(f"{where}: an excluded tool needs its reason")
        problem = id_problem(item["tool"], what="a tool name")
        if problem is not None:
            raise PackageError(f"{where}: tool {problem}")
        excluded.append({"tool": str(item["tool"]), "reason": item["reason"]})
    required = []
    for i, item in enumerate(_list(meta.get("required_values", []), "scenario.json: required_values")):
        where = f"scenario.json: required_values[{i}]"
        _keys(_obj(item, where), where, required={"tool", "path", "reason"})
        for part in ("tool", "path", "reason"):
            if not isinstance(item[part], str) or not item[part].strip():
                raise PackageError(f"{where}: {part} must be a non-empty string")
        if item["tool"] not in contracts:
            raise PackageError(f"{where}: {item['tool']} is not a contract of this scenario")
        required.append({"tool": item["tool"], "path": item["path"], "reason": item["reason"]})
    uncovered = tuple(_strs(meta.get("uncovered", []), "scenario.json: uncovered"))
    invariants = tuple(_invariants(meta.get("invariants", [])))
    delays = {}
    for tool, seconds in _obj(meta.get("delays", {}), "scenario.json: delays").items():
        if tool not in contracts or contracts.get(tool).effect_class != "mutation":
            raise PackageError(f"scenario.json: delays.{tool}: not a mutation contract of this scenario")
        if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds < 0:
            raise PackageError(f"scenario.json: delays.{tool}: must be a non-negative number of seconds")
        delays[tool] = float(seconds)
    faults = tuple(
        check_fault(contracts, f, f"scenario.json: faults[{i}]") for i, f in enumerate(meta.get("faults", []))
    )
    effects = tuple(_effects(meta.get("effects", []), contracts))
    _contract_migrations(meta.get("contract_migrations", []), contracts)
    approvals = meta.get("approvals", "simulated")
    if approvals not in ("simulated", "none"):
        raise PackageError(f"scenario.json: approvals must be simulated or none, got {approvals!r}")
    try:
        races = parse_races(
            meta.get("concurrency", []),
            contracts,
            routed={route.tool for route in effects},
            faulted={f.tool for f in faults} | {f.tool for f in fixtures if f.fault_stage is not None},
        )
    except RaceError as exc:
        raise PackageError(str(exc)) from None

    budgets = _budgets(meta.get("budget", {}))
    freshness = _freshness(meta.get("freshness", {}), contracts)
    grants, authorized_tools = _grants(meta.get("grants", []), meta.get("authorized_tools", {}), contracts)
    declared = _declared(meta)
    _minimal_fixtures(meta.get("minimal_fixtures"), {f.id for f in fixtures})

    return ScenarioPackage(
        package=package,
        name=name,
        version=version,
        seed=seed,
        # The world a replay runs in is world.json's (SimulatedWorld.from_snapshot): its name, never a label made
        # from the scenario's version (which named "email-delivery-w2" for a version whose world is -w1, so the
        # launch summary promised a namespace the replay did not use).
        world_name=world.name,
        clock_start=clock_start,
        scope=scope,
        source_runs=source_runs,
        recorded_between=recorded,
        excluded_tools=tuple(excluded),
        required_values=tuple(required),
        uncovered=uncovered,
        invariants=invariants,
        delays=delays,
        faults=faults,
        effects=effects,
        contracts=contracts,
        registry=registry,
        fixtures=tuple(fixtures),
        world=world.snapshot(),
        workspaces=workspaces,
        policies=policies,
        current_policy=current,
        approvals=approvals,
        races=races,
        budgets=budgets,
        grants=grants,
        authorized_tools=authorized_tools,
        declared=declared,
        freshness=freshness,
    )


def check_fault(contracts: ContractSet, item: Any, where: str) -> Fault:
    """A fault declared for a tool; refused unless that tool's contract supports the stage."""
    _keys(_obj(item, where), where, required={"tool", "stage"}, optional={"request_digest"})
    tool, stage = item["tool"], item["stage"]
    if tool not in contracts:
        raise PackageError(f"{where}: no contract for {tool!r} in this scenario")
    if stage not in FAULT_STAGES:
        raise PackageError(f"{where}: stage {stage!r} is not one of {', '.join(FAULT_STAGES)}")
    contract = contracts.get(tool)
    if stage not in contract.fault_stages:
        supported = ", ".join(contract.fault_stages) or "none"
        raise PackageError(
            f"{where}: {tool} revision {contract.revision} does not support fault stage {stage} "
            f"(supported: {supported})"
        )
    digest = item.get("request_digest")
    if digest is not None and not canonical.is_digest(digest):
        raise PackageError(f"{where}: request_digest must be a sha256: digest")
    return Fault(tool, stage, digest)


def _workspaces(value: Any) -> dict[str, dict[str, Any]]:
    out = {}
    for ws, snap in _obj(value, "workspaces.json").items():
        where = f"workspaces.json: {ws}"
        _keys(
            _obj(snap, where),
            where,
            required={"base_digest", "overlay_digest", "environment_revision", "tree_digest", "overlay_revision"},
            optional={"derived_from", "overlay_files"},
        )
        for key in ("base_digest", "overlay_digest", "tree_digest"):
            if not canonical.is_digest(snap[key]):
                raise PackageError(f"{where}: {key} must be a sha256: digest")
        rev = snap["overlay_revision"]
        if not isinstance(rev, int) or isinstance(rev, bool) or rev < 0:
            raise PackageError(f"{where}: overlay_revision must be a non-negative integer")
        derived = snap.get("derived_from")
        if derived is not None:
            _keys(
                _obj(derived, f"{where}.derived_from"),
                f"{where}.derived_from",
                required={"workspace_id", "relation", "content_equal"},
            )
        out[ws] = dict(snap)
    for ws, snap in out.items():
        parent = (snap.get("derived_from") or {}).get("workspace_id")
        if parent is not None and parent not in out:
            raise PackageError(f"workspaces.json: {ws} is derived from {parent}, which the snapshot does not hold")
    return out


def _policies(value: Any) -> tuple[dict[str, Policy], str]:
    data = _obj(value, "policy.json")
    _keys(data, "policy.json", required={"current", "revisions"})
    revisions = _obj(data["revisions"], "policy.json: revisions")
    policies = {}
    for revision, body in revisions.items():
        where = f"policy.json: revisions.{revision}"
        _keys(_obj(body, where), where, required={"rules", "require_all", "lineage_gate"})
        rules = []
        for i, rule in enumerate(_list(body["rules"], f"{where}.rules")):
            rw = f"{where}.rules[{i}]"
            _keys(
                _obj(rule, rw),
                rw,
                required={"destination_prefix", "required", "approval"},
                optional={"approval_expires_s", "quiet_hours"},
            )
            if rule["approval"] not in ("required", "none"):
                raise PackageError(f"{rw}: approval must be required or none")
            expires = rule.get("approval_expires_s")
            if expires is not None:
                if not isinstance(expires, int | float) or isinstance(expires, bool) or not 0 < expires < float("inf"):
                    raise PackageError(f"{rw}.approval_expires_s: must be a positive number of seconds")
                if rule["approval"] != "required":
                    raise PackageError(f"{rw}.approval_expires_s: only a rule that requires approval has one to expire")
            rules.append(
                PolicyRule(
                    str(rule["destination_prefix"]),
                    tuple(_strs(rule["required"], f"{rw}.required")),
                    rule["approval"],
                    approval_expires_s=None if expires is None else float(expires),
                    quiet_hours=_quiet_hours(rule.get("quiet_hours"), f"{rw}.quiet_hours"),
                )
            )
        for key in ("require_all", "lineage_gate"):
            if not isinstance(body[key], bool):
                raise PackageError(f"{where}: {key} must be true or false")
        policies[revision] = Policy(revision, tuple(rules), body["require_all"], body["lineage_gate"])
    current = data["current"]
    if current not in policies:
        raise PackageError(f"policy.json: current {current!r} is not one of the revisions")
    return policies, current


_HHMM = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$")


def _quiet_hours(value: Any, where: str) -> QuietHours | None:
    if value is None:
        return None
    _keys(_obj(value, where), where, required={"start", "end"})
    minutes = []
    for key in ("start", "end"):
        match = _HHMM.match(value[key]) if isinstance(value[key], str) else None
        if match is None:
            raise PackageError(f"{where}.{key}: must be HH:MM (UTC, 00:00 to 23:59), got {value[key]!r}")
        minutes.append(int(match[1]) * 60 + int(match[2]))
    if minutes[0] == minutes[1]:
        raise PackageError(f"{where}: start and end are the same minute: no quiet hours, or all of them?")
    return QuietHours(minutes[0], minutes[1])


def _freshness(value: Any, contracts: ContractSet) -> dict[str, float]:
    """tool -> the oldest (seconds of scenario time) a fixture's recording may be when a replay serves it."""
    out = {}
    for tool, item in _obj(value, "scenario.json: freshness").items():
        where = f"scenario.json: freshness.{tool}"
        if tool not in contracts:
            raise PackageError(f"{where}: no contract for {tool!r} in this scenario")
        _keys(_obj(item, where), where, required={"max_age_s"})
        age = item["max_age_s"]
        if not isinstance(age, int | float) or isinstance(age, bool) or not 0 < age < float("inf"):
            raise PackageError(f"{where}.max_age_s: must be a positive number of seconds")
        out[tool] = float(age)
    return out


def _effects(value: Any, contracts: ContractSet) -> Iterator[EffectRoute]:
    for i, item in enumerate(_list(value, "scenario.json: effects")):
        where = f"scenario.json: effects[{i}]"
        _keys(
            _obj(item, where), where, required={"destination_prefix", "tool"}, optional={"status_tool", "status_args"}
        )
        tool = item["tool"]
        if tool not in contracts or contracts.get(tool).effect_class != "mutation":
            raise PackageError(f"{where}: {tool!r} is not a mutation contract of this scenario")
        status = item.get("status_tool")
        if status is not None and (status not in contracts or contracts.get(status).effect_class != "read"):
            raise PackageError(f"{where}: status_tool {status!r} is not a read contract of this scenario")
        yield EffectRoute(
            str(item["destination_prefix"]),
            tool,
            status,
            tuple(_strs(item.get("status_args", []), f"{where}.status_args")),
        )


def _contract_migrations(value: Any, contracts: ContractSet) -> None:
    """`scenario.json: contract_migrations`: the record of each contract migration that made this version (which
    tool, from which revision to which, on which version; the fixtures migrated and those left for review)."""
    for i, item in enumerate(_list(value, "scenario.json: contract_migrations")):
        where = f"scenario.json: contract_migrations[{i}]"
        _keys(
            _obj(item, where),
            where,
            required={"tool", "from_revision", "to_revision", "based_on", "migrated", "for_review"},
        )
        for key in ("from_revision", "to_revision"):
            if not isinstance(item[key], int) or isinstance(item[key], bool) or item[key] < 1:
                raise PackageError(f"{where}: {key} must be a positive integer")
        if item["from_revision"] >= item["to_revision"]:
            raise PackageError(f"{where}: a migration goes to a newer revision")
        if item["tool"] not in contracts:
            raise PackageError(f"{where}: no contract for {item['tool']!r} in this scenario")
        based = _obj(item["based_on"], f"{where}.based_on")
        _keys(based, f"{where}.based_on", required={"name", "version"})
        _strs(item["migrated"], f"{where}.migrated")
        _strs(item["for_review"], f"{where}.for_review")


# `refused_tools` (issue 19, seed 000 "The model could not switch modes"): tools the scenario forbids (a mode
# switch, an environment write, a configuration edit, a live retry: `tools`, a name or a prefix ending in "*").
# A call to one is refused by the world (recorded, never looked up) and the run goes on; the call after `max`
# refused ones stops the run with the invariant's id and text.
INVARIANT_CHECKS = ("no_live_effect", "max_transitions", "approval_before_effect", "refused_tools")


def _invariants(value: Any) -> Iterator[dict[str, Any]]:
    for i, item in enumerate(_list(value, "scenario.json: invariants")):
        where = f"scenario.json: invariants[{i}]"
        _keys(_obj(item, where), where, required={"id", "check", "text"}, optional={"resource_prefix", "max", "tools"})
        if item["check"] not in INVARIANT_CHECKS:
            raise PackageError(f"{where}: check must be one of {', '.join(INVARIANT_CHECKS)}")
        if item["check"] == "max_transitions" and not (
            isinstance(item.get("resource_prefix"), str) and isinstance(item.get("max"), int)
        ):
            raise PackageError(f"{where}: max_transitions needs resource_prefix and max")
        if item["check"] == "refused_tools":
            tools = _strs(item.get("tools"), f"{where}.tools")
            limit = item.get("max")
            if not tools or any(not t.rstrip("*") for t in tools):
                raise PackageError(f"{where}: refused_tools needs tools (names, or prefixes ending in *)")
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
                raise PackageError(f"{where}: refused_tools needs max, the refused calls tolerated before the stop")
        yield dict(item)


def refused_by(invariant: dict[str, Any], tool: str) -> bool:
    """Whether a `refused_tools` invariant names `tool` (exactly, or by a prefix ending in "*")."""
    return any(tool.startswith(t[:-1]) if t.endswith("*") else tool == t for t in invariant.get("tools") or ())


def _budgets(value: Any) -> dict[str, Budget]:
    out = {}
    for resource, item in _obj(value, "scenario.json: budget").items():
        where = f"scenario.json: budget.{resource}"
        if resource not in BUDGET_RESOURCES:
            raise PackageError(f"{where}: not a budget resource (one of {', '.join(BUDGET_RESOURCES)})")
        _keys(_obj(item, where), where, required={"limit"}, optional={"recovery_reserve"})
        numbers = []
        for key in ("limit", "recovery_reserve"):
            number = item.get(key, 0)
            if not isinstance(number, int | float) or isinstance(number, bool) or not 0 <= number < float("inf"):
                raise PackageError(f"{where}.{key}: must be a non-negative number")
            numbers.append(float(number))
        if numbers[1] > numbers[0]:
            raise PackageError(f"{where}: the recovery reserve ({numbers[1]:g}) exceeds the limit ({numbers[0]:g})")
        out[resource] = Budget(resource, numbers[0], numbers[1])
    return out


def _grants(value: Any, tools: Any, contracts: ContractSet) -> tuple[tuple[Grant, ...], dict[str, str]]:
    authorized = {}
    for tool, account_field in _obj(tools, "scenario.json: authorized_tools").items():
        where = f"scenario.json: authorized_tools.{tool}"
        if tool not in contracts:
            raise PackageError(f"{where}: no contract for {tool!r} in this scenario")
        if account_field not in contracts.get(tool).fields:
            raise PackageError(f"{where}: {account_field!r} is not a semantic field of {tool}'s contract")
        authorized[tool] = str(account_field)
    grants = []
    for i, item in enumerate(_list(value, "scenario.json: grants")):
        where = f"scenario.json: grants[{i}]"
        _keys(_obj(item, where), where, required={"id", "account", "tools"})
        problem = id_problem(item["id"], what="a grant id")
        if problem is not None:
            raise PackageError(f"{where}: id {problem}")
        if not isinstance(item["account"], str) or not item["account"]:
            raise PackageError(f"{where}: account must be a non-empty string (one account: scope is never ambiguous)")
        scoped = _strs(item["tools"], f"{where}.tools")
        unknown = [t for t in scoped if t not in authorized]
        if not scoped or unknown:
            raise PackageError(f"{where}: tools must name tools of authorized_tools ({unknown[:1] or 'none given'})")
        grants.append(Grant(item["id"], item["account"], tuple(scoped)))
    if len({g.id for g in grants}) != len(grants):
        raise PackageError("scenario.json: grants: two grants share an id")
    return tuple(grants), authorized


def _declared(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The end-state declaration of seed 003 ("The scenario definition grew richer"), checked: the instructions
    that apply, the path globs the agent may change, the effects it may make, the ends it may stop at. Only the
    keys the scenario gives: an undeclared check is not evaluated, never passed."""
    out: dict[str, Any] = {}
    if "instructions" in meta:
        items = _strs(meta["instructions"], "scenario.json: instructions")
        if any(not i.strip() for i in items):
            raise PackageError("scenario.json: instructions: each instruction is a non-empty string")
        out["instructions"] = list(items)
    if "file_scope" in meta:
        globs = _strs(meta["file_scope"], "scenario.json: file_scope")
        for i, glob in enumerate(globs):
            problem = glob_problem(glob)
            if problem is not None:
                raise PackageError(f"scenario.json: file_scope[{i}]: {problem}")
        out["file_scope"] = list(globs)
    if "allowed_effects" in meta:
        allowed = []
        for i, item in enumerate(_list(meta["allowed_effects"], "scenario.json: allowed_effects")):
            where = f"scenario.json: allowed_effects[{i}]"
            _keys(_obj(item, where), where, required={"destination_prefix"}, optional={"effect_class"})
            if not isinstance(item["destination_prefix"], str):
                raise PackageError(f"{where}: destination_prefix must be a string")
            if "effect_class" in item and item["effect_class"] not in ("read", "mutation"):
                raise PackageError(f"{where}: effect_class must be read or mutation")
            allowed.append(dict(item))
        out["allowed_effects"] = allowed
    if "acceptable_stop_states" in meta:
        states = []
        for i, item in enumerate(_list(meta["acceptable_stop_states"], "scenario.json: acceptable_stop_states")):
            where = f"scenario.json: acceptable_stop_states[{i}]"
            _keys(_obj(item, where), where, required={"state"}, optional={"text"})
            if item["state"] not in RUN_STATES:
                raise PackageError(f"{where}: state must be one of {', '.join(RUN_STATES)}")
            if "text" in item and not isinstance(item["text"], str):
                raise PackageError(f"{where}: text must be a string")
            states.append(dict(item))
        if len({s["state"] for s in states}) != len(states):
            raise PackageError("scenario.json: acceptable_stop_states: a state is named twice")
        out["acceptable_stop_states"] = states
    return out


def _minimal_fixtures(value: Any, held: set[str]) -> None:
    """`scenario.json: minimal_fixtures` (seed 001: a regression scenario keeps the minimal fixtures): the run it
    was made from, the fixtures kept and those left out, each with why; what it lists kept is in fixtures.json and
    what it lists left out is not."""
    if value is None:
        return
    where = "scenario.json: minimal_fixtures"
    _keys(_obj(value, where), where, required={"run", "kept", "left_out", "kept_count", "left_out_count"})
    for key in ("kept", "left_out"):
        for i, item in enumerate(_list(value[key], f"{where}.{key}")):
            at = f"{where}.{key}[{i}]"
            _keys(_obj(item, at), at, required={"fixture", "tool", "why"})
            if not all(isinstance(item[k], str) for k in ("fixture", "tool", "why")):
                raise PackageError(f"{at}: fixture, tool and why are strings")
            if (item["fixture"] in held) != (key == "kept"):
                said = "kept but not in" if key == "kept" else "left out but still in"
                raise PackageError(f"{at}: {item['fixture']} is {said} fixtures.json")
    for key in ("kept_count", "left_out_count"):
        count = value[key]
        if not isinstance(count, int) or isinstance(count, bool) or count < len(value[key.removesuffix("_count")]):
            raise PackageError(f"{where}.{key}: must count at least the fixtures listed")


def _no_endpoints(value: Any, where: str) -> None:
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        node, path = stack.pop()
        if isinstance(node, dict):
            for key, child in node.items():
                if isinstance(key, str) and key.lower() in FORBIDDEN_KEYS:
                    raise PackageError(
                        f"{path}.{key}: a package holds no endpoints, credentials or code (key {key!r} is refused)"
                    )
                stack.append((child, f"{path}.{key}"))
        elif isinstance(node, list):
            stack.extend((child, f"{path}[{i}]") for i, child in enumerate(node))


def _obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise PackageError(f"{where}: must be a JSON object")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise PackageError(f"{where}: must be a JSON list")
    return value


def _strs(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PackageError(f"{where}: must be a list of strings")
    return value


def _keys(value: dict[str, Any], where: str, *, required: set[str], optional: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    missing = sorted(required - set(value))
    if missing:
        raise PackageError(f"{where}: {missing[0]} is required")
    unknown = sorted(set(value) - required - optional)
    if unknown:
        raise PackageError(f"{where}: unknown key {unknown[0]!r}")


def _time(value: Any, where: str) -> str:
    try:
        parse_time(value)
    except (TypeError, ValueError) as exc:
        raise PackageError(f"{where}: {exc}") from None
    return value


# --- the replay package ----------------------------------------------------------------------------------------------


VARY_KEYS = ("policy", "decider", "human", "fault", "clock", "budget", "delay")


def vary_value_problem(key: str, value: str) -> str | None:
    """What is wrong with a counterfactual's value by its shape alone, whatever the scenario (a clock that is not a
    time, a budget or a delay that is not a non-negative number), in one line; None when the shape is right. The
    launch form, `replay --vary` and the replay itself ask here, so a value is refused the same way at every door
    and before a sandbox starts; what depends on the scenario (its budget resources, its mutation contracts) is
    the replay's to check."""
    head = key.split(".", 1)[0]
    if head == "clock":
        try:
            parse_time(value)
        except (TypeError, ValueError) as exc:
            reason = str(exc) if "timezone" in str(exc) else "not an ISO-8601 time"
            return f"vary clock: {value!r}: {reason} (write e.g. 2026-07-14T13:05:00Z)"
    elif head in ("budget", "delay"):
        try:
            number = float(value)
        except ValueError:
            return f"vary {key}: {value!r} is not a number"
        if not 0 <= number < float("inf"):
            return f"vary {key}: must be a non-negative number"
    return None


# What `load_scenario` checks, versioned. `build_replay` checks the scenario in full and records in replay.json
# `"scenario_checked": {"revision": CHECK_REVISION, "scenario": <the scenario package's digest>}`; a sandbox
# loading that package under the same revision skips the one check that costs most and proves least: re-
# normalizing every fixture request (see `Fixture.from_dict` for why skipping it cannot make a lookup answer
# wrongly). A package without the record, or with another revision, is checked in full (and refused if a
# fixture is not normalized); a record naming another scenario is refused. Bump this whenever what
# `load_scenario` or `Fixture.from_dict` checks changes, so packages built before are checked in full again.
CHECK_REVISION = "n17q.scenario-check/1"


@dataclass(frozen=True)
class ReplayPackage:
    package: Package
    replay_id: str
    run_id: str  # the id the replay's run will have
    mode: str
    vary: dict[str, str]
    decider: str
    launched_at: str
    scenario: ScenarioPackage | None  # None only for a reconstruction of a run that names no scenario
    source_manifest: dict[str, Any]
    source_events: bytes  # events.jsonl of the source run
    source_blobs: dict[str, bytes]
    checkpoint: str | None = None  # the source checkpoint event it branches from; None: the run's start
    # Source blobs whose bytes the console's retention sweep removed before the package was built:
    # {digest: {"class", "sensitivity", "expired_at", "removed_at", "record"}}. Their digests stay in the source
    # events; a replay that needs their bytes stops naming the digest and the class (docs/retention.md).
    expired_blobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Fixture bodies held by digest (seed 001): those carried (`fixture-bodies/sha256/<hex>`) and the deletion
    # records of those whose bytes were gone when the package was built (replay.json `expired_fixture_bodies`).
    fixture_bodies: dict[str, bytes] = field(default_factory=dict)
    expired_fixture_bodies: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return self.package.digest


# The branch basis (issue 36 point 1, docs/agents.md "Determinism"): what every value a replay generates derives from.
BASIS_FORMAT = "n17q.branch-basis/1"


def branch_basis(package: ReplayPackage) -> str:
    """The one thing every value a rerun or counterfactual generates is derived from (its event ids, execution ids,
    idempotency keys, the counterfactual's world name, synthetic tokens), with the position in the replay (each id
    kind counted from 0) and the scenario seed: the recorded run (its id and the digest of its events), the branch
    point (the checkpoint, None for the start) and what the replay varies (mode, vary, and the decider a rerun
    names). Never the replay's own id, its run id or its launch instant, never randomness or process time: two
    replays of the same branch that make the same decisions generate the same values, so what an agent sees (and
    the model requests it makes from it) is byte-identical, and fixtures authored from one replay answer the next.

    The scenario's version is deliberately not part of it, only its seed: approving a new model fixture makes a new
    scenario version, and the values the agent saw before must stay what its recorded requests carry."""
    src = package.source_manifest.get("run") or {}
    return canonical.digest_json(
        {
            "format": BASIS_FORMAT,
            "seed": package.scenario.seed if package.scenario is not None else None,
            "source": {"run": src.get("id"), "events": canonical.digest_bytes(package.source_events)},
            "checkpoint": package.checkpoint,
            "mode": package.mode,
            "vary": dict(package.vary),
            "decider": package.decider,
        }
    )


def build_replay(
    *,
    replay_id: str,
    run_id: str,
    mode: str,
    vary: Mapping[str, str],
    decider: str,
    launched_at: str,
    scenario: Package | None,
    source_manifest: Mapping[str, Any],
    source_events: bytes,
    source_blobs: Mapping[str, bytes],
    checkpoint: str | None = None,
    expired_blobs: Mapping[str, Mapping[str, Any]] | None = None,
    fixture_bodies: Mapping[str, bytes] | None = None,
    expired_fixture_bodies: Mapping[str, Mapping[str, Any]] | None = None,
) -> Package:
    """The portable replay package a worker hands to the sandbox. Checked (in full) as it will be loaded.
    `checkpoint` "start" or None: from the run's start (replay.json then says nothing, as before branching)."""
    meta: dict[str, Any] = {
        "id": replay_id,
        "run_id": run_id,
        "mode": mode,
        "vary": dict(vary),
        "decider": decider,
        "launched_at": launched_at,
    }
    if checkpoint not in (None, "start"):
        meta["checkpoint"] = checkpoint
    if expired_blobs:
        meta["expired"] = {digest: dict(entry) for digest, entry in sorted(expired_blobs.items())}
    if expired_fixture_bodies:
        meta["expired_fixture_bodies"] = {d: dict(entry) for d, entry in sorted(expired_fixture_bodies.items())}
    if scenario is not None:
        meta["scenario_checked"] = {"revision": CHECK_REVISION, "scenario": scenario.digest}
    files: dict[str, bytes] = {
        "replay.json": dump(meta),
        "source/manifest.json": dump(dict(source_manifest)),
        "source/events.jsonl": source_events,
    }
    for digest, data in source_blobs.items():
        if not canonical.is_digest(digest):
            raise PackageError(f"source blob {digest!r}: not a sha256: digest")
        files[f"source/blobs/sha256/{digest.removeprefix('sha256:')}"] = data
    for digest, data in (fixture_bodies or {}).items():
        if not canonical.is_digest(digest):
            raise PackageError(f"fixture body {digest!r}: not a sha256: digest")
        files[f"{FIXTURE_BODIES}{digest.removeprefix('sha256:')}"] = data
    if scenario is not None:
        files["scenario/package.json"] = dump(scenario.manifest)
        for name, data in scenario.files.items():
            files[f"scenario/{name}"] = data
    package = Package.build(REPLAY_FORMAT, {"replay": replay_id}, files)
    load_replay(package, full_check=True)  # what makes the scenario_checked record true
    return package


def load_replay(package: Package, *, full_check: bool = False) -> ReplayPackage:
    """A replay package, checked. Its scenario is checked in full unless replay.json records that its builder
    did so under this `CHECK_REVISION` (and `full_check` is false); see `CHECK_REVISION`."""
    meta = package.json("replay.json")
    _keys(
        _obj(meta, "replay.json"),
        "replay.json",
        required={"id", "run_id", "mode", "vary", "decider", "launched_at"},
        optional={"scenario_checked", "checkpoint", "expired", "expired_fixture_bodies"},
    )
    mode = meta["mode"]
    if mode not in MODES:
        raise PackageError(f"replay.json: mode must be one of {', '.join(MODES)}, got {mode!r}")
    checkpoint = meta.get("checkpoint")
    if checkpoint is not None:
        if not isinstance(checkpoint, str) or not checkpoint or checkpoint == "start":
            raise PackageError("replay.json: checkpoint must name a checkpoint event of the source run")
        if mode == "reconstruction":
            raise PackageError("replay.json: a reconstruction re-projects the whole run; it has no checkpoint")
    vary = _obj(meta["vary"], "replay.json: vary")
    for key, value in vary.items():
        if key.split(".", 1)[0] not in VARY_KEYS or not isinstance(value, str):
            raise PackageError(f"replay.json: vary.{key}: not a variable a counterfactual can change")
    if mode == "counterfactual" and len(vary) != 1:
        raise PackageError(f"replay.json: a counterfactual changes exactly one declared variable, not {len(vary)}")
    if mode != "counterfactual" and vary:
        raise PackageError(f"replay.json: a {mode} changes nothing; vary belongs to a counterfactual")
    _time(meta["launched_at"], "replay.json: launched_at")
    for key in ("id", "run_id", "decider"):
        if not isinstance(meta[key], str) or not meta[key]:
            raise PackageError(f"replay.json: {key} must be a non-empty string")
    checked = meta.get("scenario_checked")
    if checked is not None:
        _keys(
            _obj(checked, "replay.json: scenario_checked"),
            "replay.json: scenario_checked",
            required={"revision", "scenario"},
        )
    bodies = {
        "sha256:" + name[len(FIXTURE_BODIES) :]: data
        for name, data in package.files.items()
        if name.startswith(FIXTURE_BODIES)
    }
    body_expiries = check_body_expiries(
        meta.get("expired_fixture_bodies", {}), "replay.json: expired_fixture_bodies", carried=bodies
    )
    scenario = None
    if "scenario/package.json" in package.files:
        sub = package.subpackage("scenario", SCENARIO_FORMAT)
        if checked is not None and checked["scenario"] != sub.digest:
            raise PackageError(
                f"replay.json: scenario_checked names scenario {checked['scenario']!r}, the package holds {sub.digest}"
            )
        trusted = not full_check and checked is not None and checked["revision"] == CHECK_REVISION
        scenario = load_scenario(sub, fixtures_normalized=trusted, bodies=bodies, expired_bodies=body_expiries)
    elif checked is not None:
        raise PackageError("replay.json: scenario_checked names a scenario the package does not hold")
    elif bodies or body_expiries:
        raise PackageError(f"{FIXTURE_BODIES}: fixture bodies without a scenario")
    elif mode != "reconstruction":
        raise PackageError(f"scenario/{MANIFEST}: a {mode} needs a scenario")
    source_manifest = package.json("source/manifest.json")
    if not isinstance(source_manifest, dict) or not isinstance(source_manifest.get("run"), dict):
        raise PackageError("source/manifest.json: not a run bundle manifest")
    blobs = {}
    prefix = "source/blobs/sha256/"
    for name, data in package.files.items():
        if name.startswith(prefix):
            digest = "sha256:" + name[len(prefix) :]
            if canonical.digest_bytes(data) != digest:
                raise PackageError(f"{name}: the blob's bytes do not hash to its name")
            blobs[digest] = data
    if "source/events.jsonl" not in package.files:
        raise PackageError("source/events.jsonl: missing")
    expired = _obj(meta.get("expired", {}), "replay.json: expired")
    for digest, entry in expired.items():
        if not canonical.is_digest(digest) or digest in blobs:
            raise PackageError(f"replay.json: expired.{digest}: not a sha256: digest the package lacks")
        _keys(
            _obj(entry, f"replay.json: expired.{digest}"),
            f"replay.json: expired.{digest}",
            required={"class", "sensitivity", "expired_at", "removed_at", "record"},
        )
        if not isinstance(entry["class"], str) or not isinstance(entry["sensitivity"], str):
            raise PackageError(f"replay.json: expired.{digest}: class and sensitivity must be strings")
        _time(entry["removed_at"], f"replay.json: expired.{digest}.removed_at")
    return ReplayPackage(
        package=package,
        replay_id=meta["id"],
        run_id=meta["run_id"],
        mode=mode,
        vary=dict(vary),
        decider=meta["decider"],
        launched_at=meta["launched_at"],
        scenario=scenario,
        source_manifest=source_manifest,
        source_events=package.files["source/events.jsonl"],
        source_blobs=blobs,
        checkpoint=checkpoint,
        expired_blobs={digest: dict(entry) for digest, entry in expired.items()},
        fixture_bodies=bodies,
        expired_fixture_bodies=body_expiries,
    )
