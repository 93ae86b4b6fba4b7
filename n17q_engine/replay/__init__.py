"""The replay loop (DESIGN §5, §6): one portable replay package in, one run bundle out.

`run_replay(package, isolation=...)` reads a `ReplayPackage` and returns a `ReplayOutput` (a manifest, the
events as JSON lines, the blobs) that imports like any run. `sandbox_main` is the same thing as the sandbox
child's entry point (`n17q_engine.replay:sandbox_main`): the package arrives in wire form on stdin, the
output leaves on stdout. Nothing here reads process time, randomness, the environment (except the isolation
level the launcher wrote), the network or a database, so one package gives byte-identical logs.

Modes:

- `reconstruction` (exact): the source run's events re-projected, in order and unchanged (ids, times,
  origins), after a `replay.scope` note. No model, no tools, no world. The manifest names the run it
  `reconstructs`, so today's lineage checks judge the events as the run that recorded them.
- `rerun` (comparable) and `counterfactual` (experiment): a decider (`deciders.py`) proposes steps; the
  engine performs them against the scenario's contracts, fixtures, simulated world and policy. A
  counterfactual changes exactly one declared variable (`replay.json` `vary`) and runs in a child world.

What the engine does with a step, and the decisions behind it:

- **Tool calls** go through the scenario's contract (normalized, digested) and the fixture registry, with the
  world as it is now and the call's workspace visible as the pseudo-resource `call.workspace:<id>` (at that
  workspace's revision), so a fixture can select "this command in workspace two at overlay revision 2". An
  unknown tool, a request the contract refuses, a contract revision other than the recorded one,
  no match, or more than one match: `fixture.missing` / `fixture.ambiguous` with scenario, tool, contract
  revision, request digest, world revision and the latest checkpoint, then `run.state incomplete_test_world`.
  Never a placeholder, never a nearby fixture, never a live call: there is no live client to call.
- **Excluded tools** (the scenario version names them with reasons) are the declared scope, not a missing
  fixture: the call to an excluded read is recorded, its result says `outcome: unknown`, `evaluated: false`,
  `excluded {tool, reason}`, and the replay goes on. A call to an excluded mutation (or an excluded tool without a
  contract) stops the run as a missing fixture does (`fixture.missing` with `excluded {tool, reason}`, then
  `incomplete_test_world`): the world after it is not known. Observations, admissions and claims resting on an
  excluded read's result carry `unevaluated`; the scope note names the tool as uncovered.
- **Results** are labelled `origin: fixture`; a `produces: receipt` contract yields a `command.receipt` whose
  trees and environment come from the simulated workspace, not from the fixture. A fixture's `elapsed_s`
  advances the clock before the receipt; `termination_unknown` marks the workspace `uncertain`.
- **World transitions** of a mutation fixture change the simulated world and are recorded as
  `world.transition` (op create when it starts from absent, delete when its change is null, else update).
  A scenario (or counterfactual) `delay` holds them until scenario time passes (a provider's visibility
  window). A transition on `workspace:<id>` is also the `workspace.changed` of that workspace.
- **Effects**: the policy of the scenario (or the varied revision) judges an intent: approval required and
  none simulated → `needs_approval`; required purposes without admitted evidence for the artifact → `deny`;
  otherwise `allow`. Historical approvals are emitted as `approval.recorded` with `origin: historical` and
  the source run's identity, subject the replay's proposal, and are never authority. When the scenario says
  `approvals: simulated`, a recorded human decision is replayed as an `approval.recorded` with `origin:
  simulated`, binding the replay's own evidence set. The **final gate**, inside the activation step, builds
  the lineage graph of everything so far plus the approval, decision and intent about to be written and asks
  `intent_findings`; any error-severity finding turns the step into a `deny` naming the codes, and the intent
  is never written. An allowed intent gets the replay namespace `replay:<world>`, an idempotency key derived
  from the seed and the historical key (never the live key), and `historical_intent` naming the source.
- **Executions** go through the destination's mutation contract and fixture on connection
  `fixture:<tool>`. Fault stages (a scenario fault, a counterfactual `fault`, or a fixture's own
  `fault_stage`) apply once per request: `before_send` fails with no world change; `after_acceptance` and
  `before_receipt` mutate the world and lose the response; `after_world_mutation` and `during_response`
  mutate it with an unknown outcome; `after_local_commit` acknowledges and then interrupts the run. A second
  execution of an intent whose effect already happened is `rejected` (the simulated provider knows the key):
  at most one consequence per intent by construction.
- **Races** (seed 000, "Concurrency was recorded as behavior"; `concurrency.py`, docs/concurrency.md): when the
  scenario declares a race on the tool an effect executes through, the intent's first execution is carried out as
  the race's deliveries of the same request, following the declared schedule step by step (run a delivery to its
  barrier, run another, release the held one). Acceptance writes the provider's ledger entry keyed by the
  delivery's effect identity (`SimulatedWorld.accept_effect`): an identity already held is deduplicated (the
  delivery's execution is `rejected`), a new one is committed through the fixture that answers the world as it is
  at that moment. Every step taken is a `schedule.step` event: the schedule actually followed is evidence.
- **Time**: the logical clock starts at the scenario's `clock_start` (or the varied `clock`) and moves only
  by `clock.advanced`: to the recorded time of the step a decider replays (shifted with the clock), by a
  fixture's elapsed time, by a decider's wait, and at the end to let scheduled transitions settle. `at.wall`
  of every event is the launch instant from the package: the engine reads no clock, and the elapsed wall
  time is measured by the launcher and stored beside the run, so the log itself stays deterministic.
- **Ids** of replay events are derived from the scenario seed and the replay id (`IdSource`); attempt,
  workspace and artifact ids keep their recorded names so the comparison can pair them.
- **The scope note** (`replay.scope`, first event) is computed from the manifest alone: scenario version,
  scope, fixture world and its digest, recording dates, synthetic fixtures, and what is uncovered (declared,
  excluded tools with reasons, contracts without a fixture).
- **Invariants** declared by the scenario are checked on the log at the end and reported on the final
  `run.state` (`invariants`); a violated one makes a run that otherwise completed `failed`.

Issue 19 (additive; docs/decisions.md "Issue 19 — budgets, hostile text, synthetic tokens"):

- **Budgets** are cumulative across attempts: every `budget.charged` adds to one running total per resource,
  whichever attempt it is in. The replay's own work is charged too (`origin: replay`, `cause` the event that
  did it): a turn for each proposal a decider makes of its own, and a rerun command's `elapsed_s` as compute,
  so a counterfactual's extra validation has a price. A charge made in an attempt started to recover from
  another (`parent_attempt_id`) is a recovery (`recovery: true`). Against the scenario's `budget` (or a
  counterfactual's `budget.<resource>`): spending past the limit stops the run; ordinary (not recovery) spending
  that would dig into the declared recovery reserve stops it too, each with the numbers and the charge that did
  it. The final `run.state` carries `budget` {resource: spent, replay_own, recovery, limit, recovery_reserve}.
- **Refused tools**: a `refused_tools` invariant names tools no replay may use (a mode switch, an environment
  or configuration write, a live retry). A call to one is answered by the world with `outcome: denied` and
  `refused` {invariant, reason, attempt}, never looked up and never performed; the call after the tolerated
  `max` stops the run `failed`, naming the invariant. There is nothing else to refuse: no action carries an
  environment, a mode, an isolation level or a connection, and the View has no setter (tests prove both).
- **Synthetic tokens**: the scenario's `grants` are issued to each replay as synthetic tokens
  (`world.synthetic_token`, derived from seed, replay and grant). A call to a tool of `authorized_tools` carries
  `authorization` {decision, grant, account, scope, synthetic, token_fingerprint}: the scope identity is
  evidence, the material is not recorded. A call on an account no grant covers is denied by the world
  (`tool.result outcome: denied`, no fixture consulted, no world change), and the replay goes on.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

from .. import canonical
from ..bundle import MAX_TITLE_CHARS, title_problem
from ..concurrency import Race, identity_for
from ..contracts import Contract, ContractError
from ..deciders import (
    DECIDERS,
    DENIAL_LIMIT,
    HUMAN_CHOICES,
    REASON_CHARS,
    Action,
    Activate,
    Admit,
    CallTool,
    Charge,
    Checkpoint,
    Claim,
    CreateArtifact,
    CreateWorkspace,
    Decide,
    Decider,
    EndAttempt,
    Execute,
    HumanInput,
    Observe,
    Propose,
    RecordedApproval,
    SourceRun,
    StartAttempt,
    Stop,
    Supersede,
    Wait,
    Waive,
    recorded,
)
from ..fixtures import Ambiguous, ContractMismatch, Fixture, Hit, Miss
from ..package import (
    REPLAY_FORMAT,
    Fault,
    Package,
    PackageError,
    Policy,
    ReplayPackage,
    ScenarioPackage,
    check_fault,
    load_replay,
    refused_by,
)
from ..vocabulary import BUNDLE_FORMAT, references
from ..world import (
    IdSource,
    LogicalClock,
    SimulatedWorld,
    WorldError,
    effect_resource,
    iso,
    namespace_for,
    parse_time,
    synthetic_token,
)

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
TRUTH = {"reconstruction": "exact", "rerun": "comparable", "counterfactual": "experiment"}
ISOLATION_ENV = "N17Q_SANDBOX_ISOLATION"
# Progress lines for a watching console: `sandbox_main` sets this to write one `replay.progress` line on the
# sandbox's stderr event channel every PROGRESS_EVERY steps. Counting steps, not reading a clock, keeps the log
# byte-identical; nothing in the run depends on whether anyone is listening.
PROGRESS: Any = None
PROGRESS_EVERY = 64


class ReplayError(ValueError):
    """A replay that cannot start (a bad package or variation). Never raised mid-run: a run stops with a state."""


# The sandbox's output on stdout: a header line, then the bytes it announces, unescaped and unencoded.
#   n17q.replay-output/2\n
#   {"blobs":[[digest,size],...],"events":size,"manifest":{...}}\n   (canonical JSON, blobs sorted by digest)
#   <events.jsonl><blob><blob>...
# (The first form was one JSON object holding the log as a JSON string and each blob in base64: the log was
# escaped by the engine and unescaped by the worker, 30% more bytes through the pipe.)
OUTPUT_MAGIC = b"n17q.replay-output/2\n"


@dataclass(frozen=True)
class ReplayOutput:
    manifest: dict[str, Any]
    events: bytes  # events.jsonl
    blobs: dict[str, bytes]

    def to_wire(self) -> bytes:
        blobs = sorted(self.blobs.items())
        header = {"manifest": self.manifest, "events": len(self.events), "blobs": [[d, len(b)] for d, b in blobs]}
        return b"".join([OUTPUT_MAGIC, canonical.canonical_json(header), b"\n", self.events, *(b for _d, b in blobs)])

    @classmethod
    def from_wire(cls, data: bytes) -> ReplayOutput:
        """The output of a sandbox, checked: sizes add up exactly and every blob hashes to its digest."""
        view = memoryview(data)
        try:
            if not data.startswith(OUTPUT_MAGIC):
                raise ValueError(f"it does not start with {OUTPUT_MAGIC!r}")
            end = data.index(b"\n", len(OUTPUT_MAGIC))
            header = json.loads(view[len(OUTPUT_MAGIC) : end].tobytes())
            manifest, size, listed = header["manifest"], header["events"], header["blobs"]
            if not isinstance(manifest, dict) or not isinstance(size, int) or not isinstance(listed, list):
                raise ValueError("the header is not {manifest, events, blobs}")
            offset = end + 1
            events = view[offset : offset + size].tobytes()
            offset += size
            blobs = {}
            for digest, length in listed:
                blob = view[offset : offset + length].tobytes()
                offset += length
                if len(blob) != length or canonical.digest_bytes(blob) != digest:
                    raise ValueError(f"blob {digest}: its bytes do not hash to it")
                blobs[digest] = blob
            if len(events) != size or offset != len(data):
                raise ValueError(f"{len(data)} bytes, the header accounts for {offset}")
        except (ValueError, KeyError, TypeError) as exc:
            raise ReplayError(f"the sandbox's output is not a replay output: {exc}") from None
        return cls(manifest, events, blobs)

    def write_bundle(self, directory: Path) -> Path:
        """Write as a run bundle directory (manifest.json, events.jsonl, blobs/sha256/<hex>)."""
        root = Path(directory)
        (root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
        for digest, data in self.blobs.items():
            (root / "blobs" / "sha256" / digest.removeprefix("sha256:")).write_bytes(data)
        (root / "events.jsonl").write_bytes(self.events)
        (root / "manifest.json").write_bytes(canonical.canonical_json(self.manifest))
        return root


def sandbox_main(payload: bytes) -> bytes:
    """The sandbox entry: a replay package in wire form on stdin, a `ReplayOutput` on stdout."""
    global PROGRESS
    # The child runs this one replay and exits, under the sandbox's memory limit. The engine makes no reference
    # cycles worth collecting (reference counting frees what it drops), so the cyclic collector would only walk
    # the ever larger log, fixtures and source run again and again: about a tenth of a large replay's time.
    gc.disable()
    isolation = os.environ.get(ISOLATION_ENV, "degraded")
    PROGRESS = _progress_line
    package = Package.from_wire(payload, REPLAY_FORMAT)
    return run_replay(load_replay(package), isolation=isolation).to_wire()


def _progress_line(events: int, logical: str, checkpoint: str | None) -> None:
    line = {"event": "replay.progress", "events": events, "logical": logical, "checkpoint": checkpoint}
    os.write(2, (json.dumps(line) + "\n").encode("utf-8"))


def run_replay(package: ReplayPackage, *, isolation: str) -> ReplayOutput:
    if isolation not in ("netns", "degraded"):
        raise ReplayError(f"isolation must be netns or degraded, got {isolation!r}")
    # The source events are an imported run's (the importer validated every field), pinned by the package's
    # digest: their shape is checked here, and a field the engine needs and does not find is a ReplayError.
    try:
        source = SourceRun.parse(package.source_manifest, package.source_events, validate=False)
        if package.mode == "reconstruction":
            return _Reconstruction(package, source, isolation).run()
        return _Engine(package, source, isolation).run()
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, ReplayError):
            raise
        raise ReplayError(f"the source run in the package is malformed: {type(exc).__name__}: {exc}") from None


# --- the log -----------------------------------------------------------------------------------------------------


class _Log:
    """The events of a replay, each encoded once, as it is appended, into the line the output will hold."""

    def __init__(self, ids: IdSource, wall: str) -> None:
        self.ids = ids
        self.wall = wall
        self.events: list[dict[str, Any]] = []
        self.lines: list[str] = []  # canonical JSON of each event, newline included; encoded to UTF-8 once
        self.blobs: dict[str, bytes] = {}
        self.blob_meta: dict[str, dict[str, Any]] = {}
        self.by_id: dict[str, dict[str, Any]] = {}
        self.last: dict[str, dict[str, Any]] = {}
        self._id_kinds: dict[str, str] = {}

    def new_id(self, kind: str) -> str:
        id_kind = self._id_kinds.get(kind)
        if id_kind is None:
            id_kind = self._id_kinds[kind] = kind.replace(".", "_")
        return self.ids.next(id_kind)

    def append(self, event: dict[str, Any]) -> str:
        event_id, kind = event["id"], event["kind"]
        event["seq"] = len(self.events) + 1
        self.events.append(event)
        self.lines.append(canonical.canonical_line(event))
        self.by_id[event_id] = event
        self.last[kind] = event
        return event_id

    def emit(self, kind: str, logical: str, attempt: str | None, *, event_id: str | None = None, **fields: Any) -> str:
        return self.add(kind, logical, attempt, event_id, fields)

    def add(self, kind: str, logical: str, attempt: str | None, event_id: str | None, fields: dict[str, Any]) -> str:
        """Append an event made of `fields` (the dict becomes the event: callers pass a dict of their own)."""
        if not event_id:
            event_id = self.new_id(kind)
        fields["id"] = event_id
        fields["kind"] = kind
        fields["at"] = {"logical": logical, "wall": self.wall}
        fields["attempt"] = attempt
        events = self.events
        fields["seq"] = len(events) + 1  # `append`, inlined: this runs once per event
        events.append(fields)
        self.lines.append(canonical.canonical_line(fields))
        self.by_id[event_id] = fields
        self.last[kind] = fields
        return event_id

    def blob(self, data: bytes, media_type: str, role: str) -> str:
        digest = canonical.digest_bytes(data)
        self.blobs[digest] = data
        if digest not in self.blob_meta:
            self.blob_meta[digest] = {
                "media_type": media_type,
                "size": len(data),
                "role": role,
                "retention": "standard",
            }
        return digest

    def jsonl(self) -> bytes:
        return "".join(self.lines).encode("utf-8")

    def rewrite(self, event: dict[str, Any]) -> None:
        """Encode an event again after its fields were completed (the scope note's segment, once restored)."""
        self.lines[event["seq"] - 1] = canonical.canonical_line(event)


def _run_meta(package: ReplayPackage, source: SourceRun, **fields: Any) -> dict[str, Any]:
    src = source.run
    meta = {
        "id": package.run_id,
        "task": src.get("task"),
        "model": src.get("model"),
        "policy_revision": src.get("policy_revision"),
        "created_at": package.launched_at,
        "parent_run": src.get("id"),
        **fields,
    }
    title = _replay_title(src.get("title"), str(fields.get("mode") or package.mode))
    if title:
        meta["title"] = title
    rules = src.get("compatibility_rules")
    if rules is not None:
        # The recorded admissions cite the rules the recorded run's policy declared: a replay judges them by those
        # (n17q_engine/compatibility.py), never by none (which would turn a declared reuse into LIN001).
        meta["compatibility_rules"] = rules
    return meta


def _replay_title(source_title: Any, mode: str) -> str:
    """The source's title with the replay's mode after it (DESIGN §10: a run's name everywhere), shortened to fit;
    "" when the source has no title a bundle could carry."""
    if not isinstance(source_title, str) or not source_title.strip() or title_problem(source_title):
        return ""
    suffix = f" (replay: {mode})"
    head = source_title.strip()
    if len(head) + len(suffix) > MAX_TITLE_CHARS:
        head = head[: MAX_TITLE_CHARS - len(suffix) - 1].rstrip() + "\u2026"
    return head + suffix


def _expired_text(entry: Mapping[str, Any]) -> str:
    """How a replay names material the console's retention sweep removed (the package's `expired` entry)."""
    sensitivity = f", sensitivity {entry['sensitivity']}" if entry.get("sensitivity") else ""
    return (
        f"expired under retention class {entry['class']!r}{sensitivity}: removed at {entry['removed_at']} "
        f"(deletion record {entry['record']}); the digest stays, the bytes are gone"
    )


# --- reconstruction --------------------------------------------------------------------------------------------------


class _Reconstruction:
    def __init__(self, package: ReplayPackage, source: SourceRun, isolation: str) -> None:
        self.package, self.source, self.isolation = package, source, isolation

    def run(self) -> ReplayOutput:
        pkg, src = self.package, self.source
        run = src.run
        ids = IdSource(pkg.scenario.seed if pkg.scenario else pkg.replay_id, pkg.replay_id)
        log = _Log(ids, pkg.launched_at)
        taken = set(src.by_id)
        scope_id = log.new_id("replay.scope")
        while scope_id in taken:  # never collide with a recorded id
            scope_id = log.new_id("replay.scope")
        first = src.events[0]["at"]["logical"] if src.events else pkg.launched_at
        last = src.events[-1]["at"]["logical"] if src.events else pkg.launched_at
        missing_blobs = sorted(d for d in src.manifest.get("blobs", {}) if d not in pkg.source_blobs)
        uncovered = [
            f"blob {d}: {_expired_text(pkg.expired_blobs[d])}"
            if d in pkg.expired_blobs
            else f"blob {d}: not carried by the package (expired or withheld)"
            for d in missing_blobs
        ]
        log.emit(
            "replay.scope",
            first,
            None,
            event_id=scope_id,
            scenario=run.get("scenario") or {},
            scope="reconstruction",
            recorded_between=[first, last],
            synthetic=[],
            uncovered=uncovered,
            isolation=self.isolation,
            mode="reconstruction",
            truth="exact",
            reconstructs=run.get("id"),
            package=pkg.digest,
        )
        for event in src.events:
            copy = dict(event)
            log.append(copy)
        blobs = {}
        meta = {}
        for digest, entry in src.manifest.get("blobs", {}).items():
            if digest in pkg.source_blobs:
                blobs[digest] = pkg.source_blobs[digest]
                meta[digest] = entry
            elif digest in pkg.expired_blobs:
                # Still listed, so the recorded events that name it import unchanged; no bytes, and the record why.
                meta[digest] = {**entry, "expired": dict(pkg.expired_blobs[digest])}
        manifest = {
            "format": BUNDLE_FORMAT,
            "run": _run_meta(
                pkg,
                src,
                environment="sandbox",
                mode="reconstruction",
                scenario=run.get("scenario"),
                isolation=self.isolation,
                reconstructs={"id": run.get("id"), "environment": run.get("environment"), "mode": run.get("mode")},
                replay={"id": pkg.replay_id, "decider": None, "vary": {}, "package": pkg.digest},
            ),
            "blobs": meta,
        }
        return ReplayOutput(manifest, log.jsonl(), blobs)


# --- rerun and counterfactual ---------------------------------------------------------------------------------------


class _Stopped(Exception):
    pass


class _CallView:
    """The world as a fixture lookup sees it for one call: the world plus the call's workspace."""

    def __init__(self, world: SimulatedWorld, workspace: str | None) -> None:
        self._world, self._workspace = world, workspace

    @property
    def revision(self) -> int:
        return self._world.revision

    def get(self, resource: str) -> tuple[int, Any] | None:
        if resource.startswith("call.workspace:"):
            ws = resource[len("call.workspace:") :]
            return self._world.get(f"workspace:{ws}") if ws == self._workspace else None
        return self._world.get(resource)


class _Engine:
    def __init__(self, package: ReplayPackage, source: SourceRun, isolation: str) -> None:
        assert package.scenario is not None
        self.package, self.source, self.isolation = package, source, isolation
        sc: ScenarioPackage = package.scenario
        self.sc = sc
        vary = package.vary
        self.decider: Decider = self._decider(vary.get("decider", package.decider))
        # What the counterfactual's variable sets, held apart: a replay from the start applies it at once; a
        # branch restores the history before its checkpoint as a rerun would (the scenario's policy, faults,
        # delays, clock and declared budget; the recorded human decisions) and applies it at the checkpoint.
        self.varied_policy: Policy = self._policy(vary.get("policy"))
        self.varied_faults: list[Fault] = list(sc.faults)
        if "fault" in vary:
            tool, _, stage = vary["fault"].partition(":")
            try:
                self.varied_faults.append(check_fault(sc.contracts, {"tool": tool, "stage": stage}, "vary fault"))
            except PackageError as exc:
                raise ReplayError(str(exc)) from None
            race = sc.race_for(tool)
            if race is not None:
                raise ReplayError(
                    f"vary fault: {tool} races in {race.id!r}; its deliveries' stages come from the declared schedule"
                )
        self.varied_delays = dict(sc.delays)
        self.varied_limits: dict[str, float] = {r: b.limit for r, b in sc.budgets.items()}
        self.varied_human: str | None = None
        self.varied_choice: dict[str, str] | None = None
        self.branch_index = self._branch(package.checkpoint)
        for key, value in vary.items():
            head, _, rest = key.partition(".")
            if head == "delay":
                if rest not in sc.contracts or sc.contracts.get(rest).effect_class != "mutation":
                    raise ReplayError(f"vary delay.{rest}: not a mutation contract of the scenario")
                self.varied_delays[rest] = _number(value, key)
            elif head == "budget":
                if rest not in ("tokens", "turns", "compute_s", "artifacts"):
                    raise ReplayError(f"vary budget.{rest}: not a budget resource")
                self.varied_limits[rest] = _number(value, key)
            elif key == "human":
                if value not in ("approved", "rejected"):
                    raise ReplayError("vary human: approved or rejected")
                self.varied_human = value
            elif head == "human":
                self.varied_choice = self._human_choice(rest, value)
            elif head == "clock":
                try:
                    parse_time(value)
                except (TypeError, ValueError) as exc:
                    raise ReplayError(f"vary clock: {exc}") from None
        # What applies now: the baseline until a branch's checkpoint (`_enter_segment`).
        self.policy: Policy = self._policy(None)
        self.faults: list[Fault] = list(sc.faults)
        self.delays = dict(sc.delays)
        self.budget_limits: dict[str, float] = {r: b.limit for r, b in sc.budgets.items()}
        self.reserve: dict[str, float] = {r: b.recovery_reserve for r, b in sc.budgets.items()}
        self.human_override: str | None = None
        self.human_choice: dict[str, str] | None = None
        self.shift = timedelta(0)
        start = sc.clock_start
        if self.branch_index is None:
            start = vary.get("clock", sc.clock_start)
            self.shift = parse_time(start) - parse_time(sc.clock_start)
        self.clock = LogicalClock(parse_time(start))
        self._now_at, self._now_s = self.clock.now, iso(self.clock.now)
        self._paced: str | None = None
        self._task_id = (source.run.get("task") or {}).get("id")

        world = SimulatedWorld.from_snapshot(sc.world)
        if package.mode == "counterfactual":
            world = world.child(f"{world.name}.cf-{canonical.digest_json(package.replay_id)[7:15]}")
        self.world = world
        self.namespace = namespace_for(world.name)
        self.ids = IdSource(sc.seed, package.replay_id)
        self.log = _Log(self.ids, package.launched_at)
        self.map: dict[str, str] = {}  # source id -> replay id
        self.objects: set[str] = set()
        self.attempt: str | None = None
        self.open_attempts: list[str] = []
        self.stopped = False
        self.final: tuple[str, str] | None = None
        self.checkpoint_id: str | None = None
        self.seen_since_proposal: list[str] = []
        self.artifacts: dict[str, dict[str, Any]] = {}
        self.admissions: dict[str, dict[str, Any]] = {}
        self.intents: dict[str, dict[str, Any]] = {}  # replay intent id -> intent event + args
        self.intent_of: dict[str, str] = {}  # source (or decider) intent ref -> replay intent id
        self.execs: dict[str, list[dict[str, Any]]] = {}
        self.effect_done: set[str] = set()
        self.raced: set[str] = set()  # the declared races already followed (each once per replay)
        self.approved: dict[str, tuple[str, str]] = {}  # source intent -> (decision, actor role)
        self.fired: set[tuple[str, str | None, str]] = set()
        self.spent: dict[str, float] = {}  # cumulative across every attempt of the run
        self.own_spent: dict[str, float] = {}  # of which the replay's own work (origin replay)
        self.recovery_spent: dict[str, float] = {}  # of which spent in recovery attempts
        self.recovery_attempts: set[str] = set()  # attempts started to recover from another (a parent attempt)
        # refused_tools invariants, and the calls each refused so far
        self.refusals = [inv for inv in sc.invariants if inv["check"] == "refused_tools"]
        self.refused: dict[str, list[str]] = {}
        self.missing: list[dict[str, Any]] = []
        # replay event id -> the excluded tool it stands for: results not evaluated, and what rests on them
        self.unevaluated: dict[str, str] = {}
        # intent ref (source id, or a decider's own name) -> the run.state of its latest denial not since undone
        self.denials: dict[str, dict[str, Any]] = {}
        self.denied = 0
        self.segment: dict[str, Any] = {}  # the scope note's `segment`, filled as the branch is restored
        self.scope_event: dict[str, Any] | None = None
        if self.branch_index is None:
            self._enter_segment()

    # ------------------------------------------------------------------ set-up

    @staticmethod
    def _decider(name: str) -> Decider:
        decider = DECIDERS.get(name)
        if decider is None:
            raise ReplayError(f"unknown decider {name!r} (known: {', '.join(sorted(DECIDERS))})")
        return decider

    def _branch(self, checkpoint: str | None) -> int | None:
        """The index in the source's events of the checkpoint a branch starts from (None: the run's start)."""
        if checkpoint is None:
            return None
        event = self.source.by_id.get(checkpoint)
        if event is None or event["kind"] != "checkpoint":
            held = [e["id"] for e in self.source.events if e["kind"] == "checkpoint"]
            raise ReplayError(
                f"checkpoint {checkpoint!r}: run {self.source.run.get('id')} holds no checkpoint event by that id "
                f"(it holds: start{''.join(', ' + h for h in held[:20])})"
            )
        return next(i for i, e in enumerate(self.source.events) if e is event)

    def _human_choice(self, event_id: str, choice: str) -> dict[str, str]:
        """A counterfactual `human.<event id>=<choice>`, checked against the recording: the input, its choice,
        and the recorded approval that input led to (which the choice decides)."""
        src = self.source
        event = src.by_id.get(event_id)
        if event is None or event["kind"] != "human.input":
            raise ReplayError(f"vary human.{event_id}: run {src.run.get('id')} holds no human input by that id")
        if choice not in HUMAN_CHOICES:
            raise ReplayError(f"vary human.{event_id}: the choice is one of {', '.join(HUMAN_CHOICES)}, not {choice!r}")
        if choice == event["action"]:
            raise ReplayError(f"vary human.{event_id}: the recorded choice was already {choice!r}: nothing changes")
        at = next(i for i, e in enumerate(src.events) if e is event)
        if self.branch_index is not None and at <= self.branch_index:
            raise ReplayError(
                f"vary human.{event_id}: the input comes before checkpoint {src.events[self.branch_index]['id']}, "
                "whose history the branch restores as recorded; choose an input after it"
            )
        for later in src.events[at + 1 :]:
            if (
                later["kind"] == "approval.recorded"
                and later.get("actor_role") == event.get("actor_role")
                and later.get("subject") in src.effect_proposal
            ):
                return {"input": event_id, "choice": choice, "approval": later["id"], "decision": HUMAN_CHOICES[choice]}
        raise ReplayError(
            f"vary human.{event_id}: no approval of an effect by the {event.get('actor_role')} follows it in the "
            "recording, so the choice would decide nothing the engine replays"
        )

    def _enter_segment(self) -> None:
        """The declared variable takes effect: at once from the start, at the checkpoint for a branch."""
        self.policy = self.varied_policy
        self.faults = list(self.varied_faults)
        self.delays = dict(self.varied_delays)
        self.budget_limits = dict(self.varied_limits)
        self.human_override = self.varied_human
        self.human_choice = self.varied_choice
        clock = self.package.vary.get("clock")
        if self.branch_index is not None and clock is not None:
            # The segment resumes at the varied instant; the recorded steps after the checkpoint keep their
            # spacing from it. The clock never moves back: an earlier instant leaves it where it was restored.
            recorded_at = parse_time(self.source.events[self.branch_index]["at"]["logical"])
            self.shift = parse_time(clock) - recorded_at
            self.advance_to(parse_time(clock), None, "the counterfactual's clock at the branch checkpoint")
        for resource, limit in sorted(self.budget_limits.items()):
            if self.spent.get(resource, 0) > limit:
                self.stop(
                    "stopped",
                    f"budget exhausted at the checkpoint: {resource} {self.spent[resource]:g} > {limit:g} "
                    "spent in the restored history",
                )

    def _policy(self, revision: str | None) -> Policy:
        revision = revision or self.sc.current_policy
        policy = self.sc.policies.get(revision)
        if policy is None:
            known = ", ".join(sorted(self.sc.policies))
            raise ReplayError(f"policy revision {revision!r} is not in the scenario (it holds {known})")
        return policy

    # ------------------------------------------------------------------ the View deciders read

    def resolve(self, ref: str | None) -> str | None:
        if ref is None:
            return None
        return self.map.get(ref, ref)

    def last(self, kind: str) -> dict[str, Any] | None:
        return self.log.last.get(kind)

    def event(self, event_id: str | None) -> dict[str, Any] | None:
        return self.log.by_id.get(event_id) if event_id else None

    def artifact(self, artifact_id: str | None) -> dict[str, Any] | None:
        return self.artifacts.get(artifact_id) if artifact_id else None

    def admissions_for(self, artifact_id: str) -> list[str]:
        return [
            a["id"] for a in self.admissions.values() if a["artifact_id"] == artifact_id and a["decision"] == "admitted"
        ]

    def has_admitted(self, purpose: str, artifact_id: str) -> bool:
        return any(self.admissions[a]["purpose"] == purpose for a in self.admissions_for(artifact_id))

    def required_for(self, destination: str) -> tuple[str, ...]:
        rule = self.policy.rule_for(destination)
        return rule.required if rule else ()

    def status_route(self, destination: str) -> tuple[str, tuple[str, ...]] | None:
        route = self.sc.route_for(destination)
        if route is None or route.status_tool is None:
            return None
        return route.status_tool, route.status_args

    def executions(self, intent_ref: str) -> list[dict[str, Any]]:
        intent = self.intent_of.get(intent_ref, intent_ref)
        return list(self.execs.get(intent, []))

    def denial(self, intent_ref: str) -> dict[str, Any] | None:
        return self.denials.get(intent_ref)

    # ------------------------------------------------------------------ emitting

    @property
    def now(self) -> str:
        moment = self.clock.now
        if moment is not self._now_at:  # formatted once per clock move (a new object), not once per event
            self._now_at, self._now_s = moment, iso(moment)
        return self._now_s

    def emit(self, kind: str, *, ref: Any = None, event_id: Any = None, **fields: Any) -> str:
        new = self.log.add(kind, self.now, self.attempt, event_id, fields)
        if ref is not None:
            self.map[ref] = new
        return new

    def _rs(self, refs: list[str]) -> list[str]:
        return [self.map.get(r, r) for r in refs]

    def advance_to(self, moment: Any, cause: str | None, reason: str) -> None:
        if moment <= self.clock.now:
            return
        body = self.clock.advance(moment, cause)
        self.emit("clock.advanced", **{"from": body["from"], "to": body["to"], "cause": cause}, reason=reason)
        self._settle_due()

    def _settle_due(self) -> None:
        try:
            applied = self.world.due(self.clock.now)
        except WorldError as exc:
            self.stop("failed", f"a scheduled world transition was refused: {exc}")
        for t in applied:
            self._world_event(t, t.get("cause"))

    def _world_event(self, t: dict[str, Any], cause: str | None) -> None:
        self.emit(
            "world.transition",
            resource=t["resource"],
            revision_before=t["revision_before"],
            revision_after=t["revision_after"],
            change=t["change"],
            cause=cause,
        )
        resource = t["resource"]
        if resource.startswith("workspace:") and t["change"]["op"] != "delete":
            state = t["change"]["state"]
            self.emit(
                "workspace.changed",
                workspace_id=resource[len("workspace:") :],
                overlay_revision=t["revision_after"],
                tree_digest=state.get("tree_digest") if isinstance(state, dict) else None,
                cause=cause,
            )

    def pace(self, action: Action) -> None:
        if action.at is None:
            return
        if action.at == self._paced:  # most steps of a recording share their neighbour's time
            return
        self._paced = action.at
        try:
            target = parse_time(action.at) + self.shift
        except (TypeError, ValueError):
            return
        self.advance_to(target, None, "recorded timing of the replayed step")

    def stop(self, state: str, reason: str) -> NoReturn:
        self.stopped = True
        self.final = (state, reason)
        raise _Stopped()

    # ------------------------------------------------------------------ the run

    def run(self) -> ReplayOutput:
        self._scope_note()
        self._checkpoint(None)
        progress = PROGRESS
        if progress is not None:
            progress(len(self.log.events), self.now, self.checkpoint_id)
        actions = None
        step = 0
        try:
            if self.branch_index is not None:
                step = self._restore(progress)
                self._enter_segment()
            history = self.source.events[: self.branch_index + 1] if self.branch_index is not None else []
            segment = replace(self.source, events=self.source.events[len(history) :], history=history)
            actions = self.decider.actions(segment, self)
            for action in actions:
                step += 1
                self.pace(action)
                self.perform(action)
                if progress is not None and step % PROGRESS_EVERY == 0:
                    progress(len(self.log.events), self.now, self.checkpoint_id)
            self._settle_all()
        except _Stopped:
            pass
        finally:
            if actions is not None:
                actions.close()
        self._finish()
        return self._output()

    def _restore(self, progress: Any) -> int:
        """Rebuild the world, workspaces, clock and budget at the branch checkpoint by performing the recorded
        decisions up to it against the fixtures, exactly as a rerun would. A history that cannot be re-run (a
        fixture it needs is missing, say) stops the replay there, in the state that says why (DESIGN §5: a
        missing fixture is `incomplete_test_world`, with its record), and the scope note says the checkpoint was
        not restored. Returns the number of steps performed."""
        assert self.branch_index is not None
        checkpoint = self.source.events[self.branch_index]
        history = self.source.events[: self.branch_index + 1]
        steps = recorded(replace(self.source, events=history), self)
        step = 0
        written = len(self.log.events)
        try:
            for action in steps:
                step += 1
                self.pace(action)
                self.perform(action)
                if progress is not None and step % PROGRESS_EVERY == 0:
                    progress(len(self.log.events), self.now, self.checkpoint_id)
        except _Stopped:
            state, reason = self.final or ("stopped", "the restoration stopped")
            self.final = (
                state,
                f"checkpoint {checkpoint['id']} could not be restored (its recorded history re-run against the "
                f"fixtures stopped): {reason}",
            )
            self.segment.update(restored=None, not_restored=self.final[1])
            self._rewrite_scope()
            raise
        finally:
            steps.close()
        branch = self.log.by_id.get(self.map.get(checkpoint["id"], ""))
        if branch is None:  # the recorded decider always performs the checkpoint it ends on
            self.stop("failed", f"checkpoint {checkpoint['id']} was not reached while restoring its history")
        restored = {
            "checkpoint": branch["id"],
            "world_revision": branch["world_revision"],
            "workspaces": dict(branch["workspaces"]),
            "clock": branch["clock"],
            "budget": dict(sorted(self.spent.items())),
            "events": len(self.log.events) - written,
        }
        recorded_at = self.segment["recorded"]
        differs = []
        for key in ("world_revision", "workspaces", "clock", "budget"):
            if recorded_at.get(key) != restored[key]:
                differs.append(
                    f"{key}: recorded {canonical.canonical_json(recorded_at.get(key)).decode()}, restored "
                    f"{canonical.canonical_json(restored[key]).decode()}"
                )
        self.segment.update(restored=restored, differs=differs)
        self._rewrite_scope()
        return step

    def _rewrite_scope(self) -> None:
        if self.scope_event is not None:
            self.scope_event["segment"] = dict(self.segment)
            self.log.rewrite(self.scope_event)

    def _scope_note(self) -> None:
        sc = self.sc
        uncovered = list(sc.uncovered)
        for item in sc.excluded_tools:
            uncovered.append(f"{item['tool']}: excluded: {item['reason']}")
        with_fixtures = {f.tool for f in sc.fixtures}
        for contract in sc.contracts:
            if contract.tool not in with_fixtures and sc.excluded(contract.tool) is None:
                uncovered.append(f"{contract.tool} revision {contract.revision}: no fixture in this scenario version")
        self.emit(
            "replay.scope",
            scenario=sc.ref,
            scope=sc.scope,
            recorded_between=sc.recorded_between,
            synthetic=sorted(f.id for f in sc.fixtures if f.provenance.synthetic),
            uncovered=uncovered,
            isolation=self.isolation,
            mode=self.package.mode,
            truth=TRUTH[self.package.mode],
            fixture_world={
                "name": self.world.name,
                "parent": self.world.parent,
                "snapshot": canonical.digest_json(sc.world),
            },
            decider=self.decider.name,
            vary=dict(self.package.vary),
            policy_revision=self.varied_policy.revision,
            package=self.package.digest,
            scenario_digest=sc.digest,
            segment=self._segment_note(),
            **self._issue19_scope(),
        )
        self.scope_event = self.log.by_id[self.log.events[-1]["id"]]

    def _issue19_scope(self) -> dict[str, Any]:
        """The scope note's additive fields: the declared budget, and the synthetic credentials issued (their
        scope identity and fingerprint, never the token)."""
        sc = self.sc
        out: dict[str, Any] = {}
        if sc.budgets:
            out["budget"] = {
                r: {"limit": b.limit, "recovery_reserve": b.recovery_reserve} for r, b in sorted(sc.budgets.items())
            }
        if sc.grants:
            out["credentials"] = [
                {
                    "grant": g.id,
                    "account": g.account,
                    "tools": list(g.tools),
                    "synthetic": True,
                    "token_fingerprint": self._fingerprint(g.id),
                }
                for g in sc.grants
            ]
        return out

    def _fingerprint(self, grant: str) -> str:
        return canonical.digest_bytes(synthetic_token(self.sc.seed, self.package.replay_id, grant).encode("utf-8"))

    def _segment_note(self) -> dict[str, Any]:
        """What the replay evaluates: from which checkpoint, and what the history before it holds (as recorded;
        `restored` is added once the engine has rebuilt it)."""
        if self.branch_index is None:
            self.segment = {
                "from_checkpoint": "start",
                "evaluated": f"the whole run, decided by {self.decider.name} from the scenario's start",
            }
            return dict(self.segment)
        src = self.source
        checkpoint = src.events[self.branch_index]
        before = src.events[self.branch_index - 1] if self.branch_index > 0 else None
        spent: dict[str, float] = {}
        for e in src.events[: self.branch_index]:
            if e["kind"] == "budget.charged":
                spent[e["resource"]] = spent.get(e["resource"], 0) + e["amount"]
        self.segment = {
            "from_checkpoint": checkpoint["id"],
            "recorded": {
                "world_revision": checkpoint.get("world_revision"),
                "workspaces": dict(checkpoint.get("workspaces") or {}),
                "clock": checkpoint.get("clock"),
                "budget": dict(sorted(spent.items())),
                "before": {"event": before["id"], "kind": before["kind"]} if before else None,
            },
            "history_events": self.branch_index + 1,
            "evaluated": (
                f"from checkpoint {checkpoint['id']} to the end, decided by {self.decider.name}; the history "
                "before it is the recording's, re-run with its recorded decisions to restore the world, and is "
                "not evaluated"
            ),
            "variable_from": "the checkpoint",
            "restored": None,
        }
        return dict(self.segment)

    def _checkpoint(self, ref: str | None) -> None:
        workspaces = {}
        for resource in self.world.resources():
            if resource.startswith("workspace:"):
                held = self.world.get(resource)
                if held and isinstance(held[1], dict):
                    workspaces[resource[len("workspace:") :]] = held[1].get("tree_digest")
        self.checkpoint_id = self.emit(
            "checkpoint", ref=ref, world_revision=self.world.revision, workspaces=workspaces, clock=self.now
        )

    def perform(self, a: Action) -> None:
        handler = _HANDLERS.get(type(a))
        if handler is None:
            raise ReplayError(f"the engine cannot perform {type(a).__name__}")
        handler(self, a)
        if self.stopped:
            raise _Stopped()

    def _settle_all(self) -> None:
        pending = self.world.pending()
        if pending:
            last = max(parse_time(p["at"]) for p in pending)
            self.advance_to(last, None, "scheduled transitions settle before the replay ends")

    def _finish(self) -> None:
        invariants = self._invariants()
        broken = [i for i in invariants if not i["held"]]
        state, reason = self.final or ("completed", f"{self.decider.name} decisions exhausted")
        if broken and state == "completed":
            state = "failed"
            reason = "invariant violated: " + "; ".join(f"{i['id']}: {i['detail']}" for i in broken)
        for attempt in reversed(self.open_attempts):
            self.attempt = attempt
            self.emit("attempt.ended", outcome=f"{state}: {reason}")
        self.open_attempts = []
        extra: dict[str, Any] = {}
        budget = self._budget_record()
        if budget:
            extra["budget"] = budget
        self.emit("run.state", state=state, reason=reason, invariants=invariants, missing=self.missing, **extra)

    def _budget_record(self) -> dict[str, Any]:
        out = {}
        for resource in sorted(set(self.spent) | set(self.budget_limits)):
            out[resource] = {
                "spent": self.spent.get(resource, 0),
                "replay_own": self.own_spent.get(resource, 0),
                "recovery": self.recovery_spent.get(resource, 0),
                "limit": self.budget_limits.get(resource),
                "recovery_reserve": self.reserve.get(resource, 0) if resource in self.budget_limits else None,
            }
        return out

    def _invariants(self) -> list[dict[str, Any]]:
        out = []
        events = self.log.events
        for inv in self.sc.invariants:
            check = inv["check"]
            if check == "no_live_effect":
                bad = [
                    e["id"]
                    for e in events
                    if (e["kind"] == "effect.intent" and e["namespace"] == "live")
                    or (e["kind"] == "effect.execution" and not str(e["connection"]).startswith("fixture:"))
                ]
                detail = (
                    f"live effects: {', '.join(bad)}" if bad else "no intent in the live namespace, no live connection"
                )
            elif check == "max_transitions":
                hits = [
                    e["id"]
                    for e in events
                    if e["kind"] == "world.transition" and e["resource"].startswith(inv["resource_prefix"])
                ]
                bad = hits if len(hits) > inv["max"] else []
                detail = f"{len(hits)} transitions on {inv['resource_prefix']}* (at most {inv['max']})"
            elif check == "refused_tools":
                calls = self.refused.get(inv["id"], [])
                bad = calls if len(calls) > inv["max"] else []
                detail = (
                    f"{len(calls)} refused call{'s' if len(calls) != 1 else ''} to {', '.join(inv['tools'])} "
                    f"(at most {inv['max']} tolerated before the run stops)"
                    + (f": {', '.join(calls)}" if calls else "")
                )
            else:  # approval_before_effect
                bad = []
                for e in events:
                    if e["kind"] != "effect.execution":
                        continue
                    intent = self.log.by_id.get(e["intent_id"]) or {}
                    approval = self.log.by_id.get(intent.get("approval_id") or "")
                    rule = self.policy.rule_for(intent.get("destination", ""))
                    needs = rule is None or rule.approval == "required"
                    if needs and (approval is None or approval["seq"] > e["seq"] or approval["origin"] == "historical"):
                        bad.append(e["id"])
                detail = (
                    f"executions without a prior approval of this run: {', '.join(bad)}"
                    if bad
                    else "every execution approved first"
                )
            out.append({"id": inv["id"], "text": inv["text"], "held": not bad, "detail": detail})
        return out

    def _output(self) -> ReplayOutput:
        pkg, src = self.package, self.source
        model = dict(self.decider.model) if self.decider.model else src.run.get("model")
        manifest = {
            "format": BUNDLE_FORMAT,
            "run": {
                **_run_meta(
                    pkg,
                    src,
                    environment="fixture",
                    mode=pkg.mode,
                    scenario=self.sc.ref,
                    isolation=self.isolation,
                    replay={
                        "id": pkg.replay_id,
                        "decider": self.decider.name,
                        "vary": dict(pkg.vary),
                        "package": pkg.digest,
                        "world": self.world.name,
                    },
                ),
                "model": model,
                "policy_revision": self.policy.revision,
            },
            "blobs": self.log.blob_meta,
        }
        return ReplayOutput(manifest, self.log.jsonl(), dict(self.log.blobs))

    # ------------------------------------------------------------------ steps

    def _start_attempt(self, a: StartAttempt) -> None:
        self.attempt = a.attempt
        if a.parent is not None:
            self.recovery_attempts.add(a.attempt)
        self.open_attempts.append(a.attempt)
        self.objects.add(a.attempt)
        self.seen_since_proposal = []
        self.emit("attempt.started", ref=a.ref, number=a.number, reason=a.reason, parent_attempt_id=a.parent)

    def _end_attempt(self, a: EndAttempt) -> None:
        if self.attempt in self.open_attempts:
            self.open_attempts.remove(self.attempt)
        self.emit("attempt.ended", ref=a.ref, outcome=a.outcome, recorded_outcome=True)

    def _create_workspace(self, a: CreateWorkspace) -> None:
        snap = self.sc.workspaces.get(a.workspace)
        if snap is None:
            self._missing_world(f"workspace snapshot {a.workspace} is not in the scenario", a.workspace)
        try:
            t = self.world.apply(
                {
                    "resource": f"workspace:{a.workspace}",
                    "revision_before": None,
                    "revision_after": snap["overlay_revision"],
                    "change": {
                        "op": "create",
                        "state": {
                            "tree_digest": snap["tree_digest"],
                            "environment_revision": snap["environment_revision"],
                        },
                    },
                },
                None,
            )
        except WorldError as exc:
            self.stop("failed", f"workspace {a.workspace} could not be created: {exc}")
        fields: dict[str, Any] = {
            "workspace_id": a.workspace,
            "base_digest": snap["base_digest"],
            "overlay_digest": snap["overlay_digest"],
            "environment_revision": snap["environment_revision"],
            "derived_from": snap.get("derived_from"),
        }
        if "overlay_files" in snap:
            fields["overlay_files"] = snap["overlay_files"]
        self.objects.add(a.workspace)
        self.emit("workspace.created", ref=a.ref, **fields, world_revision=t["revision_after"])

    def _propose(self, a: Propose) -> None:
        context = canonical.digest_json(
            {
                "task": self._task_id,
                "attempt": self.attempt,
                "seen": self.seen_since_proposal,
            }
        )
        self.seen_since_proposal = []
        fields: dict[str, Any] = {"context_digest": context, "proposal": a.proposal, "accepted": a.accepted}
        fields["origin"] = "recorded" if a.ref is not None else f"scripted:{self.decider.name}"
        if a.recorded_context:
            fields["recorded_context_digest"] = a.recorded_context
        proposal = self.emit("model.proposal", ref=a.ref, **fields)
        if a.ref is None:  # the decider's own turn: the recording's turns are charged by its own budget events
            self._spend("turns", 1, origin="replay", cause=proposal, what=f"the decider's own proposal {proposal}")

    # tool calls

    def _call(self, a: CallTool) -> None:
        sc = self.sc
        proposal = self.resolve(a.proposal)
        workspace = a.workspace
        if self.refusals:
            for inv in self.refusals:
                if refused_by(inv, a.tool):
                    self._refused_call(a, proposal, inv)
                    return
        reason = sc.excluded(a.tool)
        if reason is not None:
            self._excluded_call(a, proposal, reason)
            return
        if a.tool not in sc.contracts:
            self._missing_call(
                a, None, canonical.digest_json(a.args), f"unknown tool: the scenario has no contract for {a.tool}"
            )
        contract: Contract = sc.contracts.get(a.tool)
        if a.recorded_revision is not None and a.recorded_revision != contract.revision:
            self._missing_call(
                a,
                contract,
                canonical.digest_json(a.args),
                f"contract mismatch: the recorded call used {a.tool} revision {a.recorded_revision}, the scenario pins "
                f"revision {contract.revision}",
                recorded_revisions=[a.recorded_revision],
            )
        try:
            normalized, digest = contract.digest(a.args)
        except ContractError as exc:
            self._missing_call(
                a,
                contract,
                canonical.digest_json(a.args),
                f"request does not fit {a.tool} revision {contract.revision}: {exc}",
            )
        if workspace is not None and self.world.get(f"workspace:{workspace}") is None:
            self._missing_call(a, contract, digest, f"workspace {workspace} does not exist in the fixture world")
        authorization = self._authorize(a.tool, normalized) if a.tool in sc.authorized_tools else None
        call = self.emit(
            "tool.call",
            ref=a.ref,
            tool=a.tool,
            contract_revision=contract.revision,
            request=normalized,
            request_digest=digest,
            proposal_id=proposal,
            workspace_id=workspace,
            **({"authorization": authorization} if authorization is not None else {}),
        )
        if authorization is not None and authorization["decision"] == "denied":
            # The world refuses it as a provider would: no fixture consulted, no world change; the decider sees it.
            res = self._emit_denied(a, call, authorization=authorization)
            self.seen_since_proposal.append(res)
            return
        result = sc.registry.lookup(a.tool, contract.revision, digest, _CallView(self.world, workspace))
        if not isinstance(result, Hit):
            self._lookup_failed(result, call)
        fixture = result.fixture
        stage = self._fault(fixture, digest)
        mutated = False
        if stage != "before_send" and fixture.transition is not None:
            mutated = self._mutate(fixture, call, a.tool)
        outcome = fixture.response.outcome
        if stage in ("after_acceptance", "before_receipt"):
            outcome = "timeout"
        elif stage in ("after_world_mutation", "during_response"):
            outcome = "unknown"
        elif stage == "before_send":
            outcome = "error"
        recorded_result = self.source.result_of.get(a.ref) if a.ref is not None else None
        if contract.produces == "receipt" and stage is None:
            self._receipt(fixture, call, workspace, recorded_result)
            elapsed = fixture.response.body.get("elapsed_s") if isinstance(fixture.response.body, dict) else None
            if a.ref is None and isinstance(elapsed, int | float) and not isinstance(elapsed, bool) and elapsed > 0:
                # the decider's own command (a rerun validation): its compute is the replay's, and it is charged
                receipt = self.log.last["command.receipt"]["id"]
                self._spend("compute_s", elapsed, origin="replay", cause=receipt, what=f"the rerun {receipt}")
        else:
            body = fixture.response.body if stage in (None, "after_local_commit") else None
            blob = self.log.blob(canonical.canonical_json(body), JSON, "tool-output") if body is not None else None
            extra: dict[str, Any] = {"fixture": fixture.id}
            if stage is not None:
                extra["fault_stage"] = stage
                extra["world_mutated"] = mutated
            res = self.emit(
                "tool.result",
                ref=recorded_result,
                call_id=call,
                origin="fixture",
                outcome=outcome,
                blob=blob,
                absent=dict(fixture.response.absent),
                **extra,
            )
            self.seen_since_proposal.append(blob or res)
        if stage == "after_local_commit":
            self.stop(
                "interrupted", f"fault after_local_commit injected on {a.tool}: the harness stopped after committing"
            )

    def _emit_denied(self, a: CallTool, call: str, **why: Any) -> str:
        """A call the world refuses as a provider would (outside every grant, or a tool the scenario forbids): a
        `denied` result, no fixture consulted, no body; `why` says which refusal it was."""
        return self.emit(
            "tool.result",
            ref=self.source.result_of.get(a.ref) if a.ref is not None else None,
            call_id=call,
            origin="fixture",
            outcome="denied",
            blob=None,
            absent={"body": "not_applicable"},
            **why,
        )

    def _refused_call(self, a: CallTool, proposal: str | None, inv: dict[str, Any]) -> None:
        """A call to a tool a `refused_tools` invariant names: recorded and refused by the world, never looked up.

        Whatever text asked for it (a fixture's body, a workspace file), the call reaches nothing: the scenario has
        no contract to perform it, the engine no live client. Repeated attempts stop the run: the one after the
        invariant's `max` ends it `failed`, naming the invariant and every refused call."""
        calls = self.refused.setdefault(inv["id"], [])
        contract = self.sc.contracts.get(a.tool) if a.tool in self.sc.contracts else None
        workspace = a.workspace if a.workspace in self.objects else None
        call = self.emit(
            "tool.call",
            ref=a.ref,
            tool=a.tool,
            contract_revision=contract.revision if contract is not None else (a.recorded_revision or 0),
            request=a.args,
            request_digest=canonical.digest_json(a.args),
            proposal_id=proposal,
            workspace_id=workspace,
        )
        calls.append(call)
        res = self._emit_denied(
            a,
            call,
            refused={"invariant": inv["id"], "reason": inv["text"], "attempt": len(calls), "tolerated": inv["max"]},
        )
        self.seen_since_proposal.append(res)
        if len(calls) > inv["max"]:
            self.stop(
                "failed",
                _bounded(
                    f"invariant {inv['id']} ({inv['text']}): {len(calls)} refused calls to tools the scenario "
                    f"forbids ({', '.join(inv['tools'])}), at most {inv['max']} tolerated; the last: {a.tool} "
                    f"({call}); refused: {', '.join(calls)}"
                ),
            )

    def _authorize(self, tool: str, normalized: Any) -> dict[str, Any]:
        """The world's answer to a call that needs authorization: which synthetic grant covers it, or why none."""
        field = self.sc.authorized_tools[tool]
        account = normalized.get(field) if isinstance(normalized, dict) else None
        for grant in self.sc.grants:
            if tool in grant.tools and grant.account == account:
                return {
                    "decision": "allowed",
                    "grant": grant.id,
                    "account": account,
                    "scope": {"account": grant.account, "tools": list(grant.tools)},
                    "synthetic": True,
                    "token_fingerprint": self._fingerprint(grant.id),
                }
        held = [{"grant": g.id, "account": g.account, "tools": list(g.tools)} for g in self.sc.grants]
        return {
            "decision": "denied",
            "account": account,
            "synthetic": True,
            "grants_held": held,
            "reason": f"no synthetic grant of this replay authorizes {tool} on account {account!r} "
            f"(held: {', '.join(f'{g.id} for {g.account}' for g in self.sc.grants) or 'none'})",
        }

    def _excluded_call(self, a: CallTool, proposal: str | None, reason: str) -> None:
        """A call to a tool the scenario version excludes: recorded, not evaluated, and the replay goes on.

        The exclusion is the scenario's declared scope (DESIGN §5: "excluded tools with reasons"), not a hole in
        the test world, so it is no `fixture.missing`. The result says nothing about the world: outcome
        `unknown`, no blob, the body `not_applicable`, origin `fixture` (the scenario answered, by excluding), and
        `excluded` carries the reason. No fixture is consulted and no world state changes, so whatever the source
        run learned from this tool is not reproduced; what rests on it is marked unevaluated (see `_claim`).
        """
        contract = self.sc.contracts.get(a.tool) if a.tool in self.sc.contracts else None
        request: Any = a.args
        digest = canonical.digest_json(a.args)
        if contract is not None:
            # an excluded tool's request is not checked: nothing is looked up with it
            with contextlib.suppress(ContractError):
                request, digest = contract.digest(a.args)
        if contract is None or contract.effect_class != "read":
            # A mutation the scenario cannot model (or a tool whose effect class it does not know): going on would
            # let the run continue as if the world had changed, or as if it had not, and neither is known. The run
            # stops here, precisely, through the missing-fixture path (seed 000, "Missing mutations were treated
            # most strictly": an incomplete simulation admits what it cannot evaluate).
            what = "a mutation" if contract is not None else "a tool of unknown effect class"
            self._missing_call(
                a,
                contract,
                digest,
                f"excluded: {a.tool} is {what} this scenario version excludes ({reason}): the world after it cannot "
                "be evaluated",
                excluded={"tool": a.tool, "reason": reason},
            )
        revision = contract.revision if contract is not None else (a.recorded_revision or 0)
        call = self.emit(
            "tool.call",
            ref=a.ref,
            tool=a.tool,
            contract_revision=revision,
            request=request,
            request_digest=digest,
            proposal_id=proposal,
            workspace_id=a.workspace,
        )
        recorded_result = self.source.result_of.get(a.ref) if a.ref is not None else None
        res = self.emit(
            "tool.result",
            ref=recorded_result,
            call_id=call,
            origin="fixture",
            outcome="unknown",
            blob=None,
            absent={"body": "not_applicable"},
            excluded={"tool": a.tool, "reason": reason},
            evaluated=False,
        )
        self.unevaluated[call] = a.tool
        self.unevaluated[res] = a.tool
        self.seen_since_proposal.append(res)

    def _receipt(self, fixture: Fixture, call: str, workspace: str | None, recorded: str | None) -> None:
        body = fixture.response.body if isinstance(fixture.response.body, dict) else {}
        if workspace is None:
            self.stop("failed", f"fixture {fixture.id} answers with a command receipt but the call names no workspace")
        held = self.world.get(f"workspace:{workspace}")
        state = held[1] if held else {}
        elapsed = body.get("elapsed_s")
        if isinstance(elapsed, int | float) and elapsed > 0:
            self.advance_to(self.clock.now + timedelta(seconds=elapsed), call, f"{fixture.id} ran for {elapsed} s")
        output = body.get("output")
        output_blob = self.log.blob(output.encode("utf-8"), TEXT, "command-output") if isinstance(output, str) else None
        receipt = self.emit(
            "command.receipt",
            ref=recorded,
            call_id=call,
            workspace_id=workspace,
            command=body.get("command", ""),
            suites=list(body.get("suites", [])),
            pre_tree=state.get("tree_digest"),
            post_tree=state.get("tree_digest"),
            environment_revision=state.get("environment_revision"),
            completion=body.get("completion", "completed"),
            exit_code=body.get("exit_code"),
            results=body.get("results", {}),
            output_blob=output_blob,
            fixture=fixture.id,
            origin="fixture",
        )
        self.seen_since_proposal.append(output_blob or receipt)
        if body.get("completion") == "termination_unknown":
            self.emit("workspace.lifecycle", workspace_id=workspace, state="uncertain", cause=receipt)

    def _fault(self, fixture: Fixture, digest: str) -> str | None:
        stage = fixture.fault_stage
        for fault in self.faults:
            if fault.tool == fixture.tool and fault.request_digest in (None, digest):
                stage = fault.stage
        if stage is None:
            return None
        key = (fixture.tool, digest, stage)
        if key in self.fired:  # a fault happens once; the retry meets the world as the fault left it
            return None
        self.fired.add(key)
        return stage

    def _mutate(self, fixture: Fixture, cause: str, tool: str) -> bool:
        t = fixture.transition
        assert t is not None
        op = "create" if t.revision_before is None else ("delete" if t.change is None else "update")
        transition = {
            "resource": t.resource,
            "revision_before": t.revision_before,
            "revision_after": t.revision_after,
            "change": {"op": op, "state": t.change},
        }
        delay = self.delays.get(tool, 0.0)
        try:
            if delay > 0:
                self.world.schedule(self.clock.now + timedelta(seconds=delay), transition, cause)
                return True
            applied = self.world.apply(transition, cause)
        except WorldError as exc:
            self._missing_world(f"fixture {fixture.id}'s transition does not fit the world: {exc}", t.resource)
        self._world_event(applied, cause)
        return True

    def _missing_call(self, a: CallTool, contract: Contract | None, digest: str, reason: str, **extra: Any) -> NoReturn:
        record = {
            "scenario": self.sc.ref,
            "tool": a.tool,
            "contract_revision": contract.revision if contract else (a.recorded_revision or 0),
            "request_digest": digest,
            "world_revision": self.world.revision,
            "checkpoint_id": self.checkpoint_id,
            "reason": reason,
            "proposal_id": self.resolve(a.proposal),
            **extra,
        }
        self._record_missing("fixture.missing", record)

    def _lookup_failed(self, result: Miss | Ambiguous | ContractMismatch, call: str) -> NoReturn:
        record = result.record(scenario=self.sc.ref, checkpoint_id=self.checkpoint_id)
        kind = record.pop("kind")
        record["call_id"] = call
        if isinstance(result, Miss) and not any(f.tool == result.tool for f in self.sc.fixtures):
            record["reason"] = (
                f"unrecorded: the scenario has a contract for {result.tool} revision {result.contract_revision} and no "
                "fixture for it at all (this request was never recorded)"
            )
        self._record_missing(kind, record)

    def _missing_world(self, reason: str, resource: str) -> NoReturn:
        record = {
            "scenario": self.sc.ref,
            "tool": "world",
            "contract_revision": 0,
            "request_digest": canonical.digest_json({"resource": resource}),
            "world_revision": self.world.revision,
            "checkpoint_id": self.checkpoint_id,
            "reason": reason,
        }
        self._record_missing("fixture.missing", record)

    def _record_missing(self, kind: str, record: dict[str, Any]) -> NoReturn:
        event_id = self.emit(kind, **record)
        self.missing.append({"event": event_id, "kind": kind, **record})
        what = "ambiguous fixtures" if kind == "fixture.ambiguous" else "missing fixture"
        self.stop(
            "incomplete_test_world",
            f"{what} for {record['tool']} revision {record['contract_revision']} "
            f"(request {record['request_digest']}, world revision {record['world_revision']}): {record['reason']}",
        )

    # artifacts and evidence

    def _create_artifact(self, a: CreateArtifact) -> None:
        tree = None
        if a.workspace is not None:
            held = self.world.get(f"workspace:{a.workspace}")
            if held is None:
                self._missing_world(
                    f"artifact {a.artifact} is built in workspace {a.workspace}, which does not exist", a.workspace
                )
            tree = held[1].get("tree_digest")
        data = self.package.source_blobs.get(a.blob)
        if data is None and a.blob in self.package.expired_blobs:
            # Expired material stops the replay precisely, like a missing fixture: never a stand-in for the bytes.
            self._missing_world(
                f"the bytes of artifact {a.artifact} ({a.blob}) {_expired_text(self.package.expired_blobs[a.blob])}",
                a.blob,
            )
        if data is None:
            self._missing_world(f"the bytes of artifact {a.artifact} ({a.blob}) are not in the package", a.blob)
        self.log.blob(data, a.media_type, a.role)
        self.objects.add(a.artifact)
        fields = {
            "artifact_id": a.artifact,
            "digest": a.blob,
            "media_type": a.media_type,
            "size": len(data),
            "role": a.role,
            "workspace_id": a.workspace,
            "tree_digest": tree,
            "files": a.files,
        }
        self.artifacts[a.artifact] = dict(fields)
        self.emit("artifact.created", ref=a.ref, **fields)

    def _observe(self, a: Observe) -> None:
        source_id = self.resolve(a.source)
        source = self.log.by_id.get(source_id or "")
        if source is None:
            self.stop("stopped", f"the replayed step observes {a.source}, which this replay never produced")
        workspace = source.get("workspace_id")
        tree = source.get("post_tree") if source["kind"] == "command.receipt" else None
        if source["kind"] == "tool.result":
            call = self.log.by_id.get(source.get("call_id") or "") or {}
            workspace = call.get("workspace_id")
            if workspace is not None:
                held = self.world.get(f"workspace:{workspace}")
                tree = held[1].get("tree_digest") if held else None
        observed = self.emit(
            "evidence.observed", ref=a.ref, source=source_id, workspace_id=workspace, tree_digest=tree, scope=a.scope
        )
        if source["id"] in self.unevaluated:
            self.unevaluated[observed] = self.unevaluated[source["id"]]

    def _admit(self, a: Admit) -> None:
        observation = self.log.by_id.get(self.resolve(a.observation) or "")
        if observation is None or observation["kind"] != "evidence.observed":
            self.stop("stopped", f"the replayed admission uses {a.observation}, which this replay never observed")
        fields = {
            "observation_id": observation["id"],
            "purpose": a.purpose,
            "artifact_id": a.artifact,
            "workspace_id": observation["workspace_id"],
            "tree_digest": observation["tree_digest"],
            "policy_revision": self.policy.revision,
            "decision": a.decision,
            "compatibility": a.compatibility,
            "rationale": a.rationale,
        }
        event_id = self.emit("evidence.admitted", ref=a.ref, **fields)
        self.admissions[event_id] = {"id": event_id, **fields}
        if observation["id"] in self.unevaluated:
            self.unevaluated[event_id] = self.unevaluated[observation["id"]]

    def _supersede(self, a: Supersede) -> None:
        self.emit("evidence.superseded", ref=a.ref, admission_id=self.resolve(a.admission), cause=self.resolve(a.cause))

    def _waive(self, a: Waive) -> None:
        self.emit(
            "waiver.granted",
            ref=a.ref,
            failure=self.resolve(a.failure),
            suite=a.suite,
            actor_role=a.actor_role,
            rationale=a.rationale,
            origin="recorded",
        )

    def _human(self, a: HumanInput) -> None:
        visible = [self.map.get(v, v) for v in a.visible if v in self.map or v in self.objects]
        unmapped = [v for v in a.visible if v not in self.map and v not in self.objects]
        fields: dict[str, Any] = {"action": a.action, "note": a.note, "origin": "recorded"}
        choice = self.human_choice
        if choice is not None and a.ref == choice["input"]:
            # The one variable of this counterfactual: the human chose otherwise. The note was the recorded
            # human's words about the recorded choice, so it is not carried over.
            fields = {
                "action": choice["choice"],
                "note": None,
                "origin": "varied",
                "recorded_action": a.action,
                "decides": f"the {a.actor_role}'s approval {choice['approval']}: {choice['decision']}",
            }
        self.emit(
            "human.input",
            ref=a.ref,
            actor_role=a.actor_role,
            visible_ids=visible,
            unmapped_visible=unmapped,
            **fields,
        )

    def _recorded_approval(self, a: RecordedApproval) -> None:
        e = a.event
        decision = e["decision"]
        chosen = decision
        if a.intent is not None and e["origin"] in ("human", "simulated") and decision in ("approved", "rejected"):
            chosen = self.human_override or decision
            if self.human_choice is not None and a.ref == self.human_choice["approval"]:
                chosen = self.human_choice["decision"]
            self.approved[a.intent] = (chosen, e["actor_role"])
        proposal = self.source.effect_proposal.get(a.intent or "")
        self.emit(
            "approval.recorded",
            ref=a.ref,
            subject=self.resolve(proposal) if proposal else self.resolve(e["subject"]),
            evidence_set_digest=e["evidence_set_digest"],
            decision=decision,
            actor_role=e["actor_role"],
            origin="historical",
            run=e["run"],
            environment=e["environment"],
            historical_event=e["id"],
            historical_origin=e["origin"],
            historical_subject=e["subject"],
            authority="none: historical approvals are read-only evidence in a replay",
            **({"decided_in_replay": chosen} if chosen != decision else {}),
        )

    # policy and effects

    def _evaluate(
        self, destination: str, artifact: str | None, admissions: list[str], intent_ref: str
    ) -> tuple[str, list[str], list[str], tuple[str, str] | None]:
        """(outcome, required, reasons, simulated approval (decision, role) or None)."""
        policy = self.policy
        rule = policy.rule_for(destination)
        if rule is None:
            return "deny", [], [f"{policy.revision} has no rule for destination {destination}: refused"], None
        admitted = {
            self.admissions[a]["purpose"]
            for a in admissions
            if a in self.admissions
            and self.admissions[a]["decision"] == "admitted"
            and self.admissions[a]["artifact_id"] == artifact
        }
        missing = [p for p in rule.required if p not in admitted]
        approval = None
        if rule.approval == "required":
            recorded = self.approved.get(intent_ref)
            if self.sc.approvals == "simulated" and recorded is not None:
                approval = recorded
            if approval is None or approval[0] != "approved":
                why = (
                    f"the reviewer's recorded decision was {approval[0]}"
                    if approval
                    else "a reviewer's approval is required and none has been given in this run yet"
                )
                return (
                    "needs_approval",
                    list(rule.required),
                    [why] + [f"{p}: no admitted evidence" for p in missing],
                    approval,
                )
        if missing and (policy.require_all or len(missing) == len(rule.required)):
            return "deny", list(rule.required), [f"{p}: no admitted evidence for {artifact}" for p in missing], approval
        reasons = [f"{p} admitted for {artifact}" for p in rule.required if p in admitted]
        if approval is not None:
            reasons.append(f"simulated approval replaying the recorded decision of the {approval[1]}")
        return "allow", list(rule.required), reasons or ["no evidence required"], approval

    def _decide(self, a: Decide) -> None:
        intent = self.source.by_id.get(a.intent) or {}
        admissions = self._rs(a.admissions)
        outcome, required, reasons, _approval = self._evaluate(
            intent.get("destination", ""), intent.get("artifact_id"), admissions, a.intent
        )
        if outcome == "allow":
            return  # the activation step records the allow together with the intent it allows
        proposal = self.source.effect_proposal.get(a.intent)
        self.emit(
            "policy.decision",
            ref=a.ref,
            policy_revision=self.policy.revision,
            subject=self.resolve(proposal) if proposal else self.map.get(a.intent, a.intent),
            input_ids=[x for x in admissions if x in self.admissions],
            required=required,
            outcome=outcome,
            reasons=reasons,
        )

    def _activate(self, a: Activate) -> None:
        proposal = self.resolve(a.proposal)
        admissions = [x for x in self._rs(a.admissions) if x in self.admissions]
        outcome, required, reasons, approval = self._evaluate(a.destination, a.artifact, admissions, a.intent)
        decision_fields = {"policy_revision": self.policy.revision, "input_ids": admissions, "required": required}
        if outcome != "allow":
            decision = self.emit(
                "policy.decision", subject=proposal or a.intent, outcome=outcome, reasons=reasons, **decision_fields
            )
            what = (
                f"{self.policy.revision} holds the intent for {a.destination} for an approval"
                if outcome == "needs_approval"
                else f"{self.policy.revision} denied the intent for {a.destination}"
            )
            self._return_to_planning(a, decision, outcome, None, what, reasons)
            return
        intent_id = self.log.new_id("effect.intent")
        prospective: list[dict[str, Any]] = []
        approval_id = None
        if approval is not None:
            approval_id = self.log.new_id("approval.recorded")
            prospective.append(
                self._draft(
                    "approval.recorded",
                    approval_id,
                    subject=intent_id,
                    evidence_set_digest=canonical.evidence_set_digest(admissions),
                    decision="approved",
                    actor_role=approval[1],
                    origin="simulated",
                    run=self.package.run_id,
                    environment="fixture",
                    basis="the recorded decision of the human, replayed; proves a branch, not consent",
                )
            )
        decision_id = self.log.new_id("policy.decision")
        prospective.append(
            self._draft(
                "policy.decision", decision_id, subject=intent_id, outcome="allow", reasons=reasons, **decision_fields
            )
        )
        key = (
            self.ids.replay_key(a.historical_key, self.world.name) if a.historical_key else self.ids.next("effect_key")
        )
        key = key if key.startswith("replay:") else f"{self.namespace}:{key}"
        prospective.append(
            self._draft(
                "effect.intent",
                intent_id,
                effect_class=a.effect_class,
                destination=a.destination,
                artifact_id=a.artifact,
                admission_ids=admissions,
                approval_id=approval_id,
                idempotency_key=key,
                namespace=self.namespace,
                historical_intent=a.intent if a.ref is not None else None,
            )
        )
        if self.policy.lineage_gate:
            blocking = self._gate(prospective, intent_id)
            if blocking:
                decision = self.emit(
                    "policy.decision",
                    subject=proposal or a.intent,
                    outcome="deny",
                    reasons=[f"{f.code}: {f.message}" for f in blocking],
                    gate="lineage",
                    **decision_fields,
                )
                codes = sorted({f.code for f in blocking})
                self._return_to_planning(
                    a,
                    decision,
                    "deny",
                    "lineage",
                    f"the final gate of {self.policy.revision} denied the intent for {a.destination}",
                    codes,
                )
                return
        for event in prospective:
            event["at"]["logical"] = self.now
            self.log.append(event)
        self.denials.pop(a.intent, None)  # asked again and allowed: the denial no longer stands
        self.map[a.intent] = intent_id
        if a.ref is not None:
            self.map[a.ref] = intent_id
        self.intent_of[a.intent] = intent_id
        self.intents[intent_id] = {"args": a.args, "destination": a.destination}

    def _return_to_planning(
        self, a: Activate, decision: str, outcome: str, gate: str | None, what: str, why: list[str]
    ) -> None:
        """A denied effect does not end the run: the decider is told the bounded reason (a `run.state running`
        it reads through `View.denial`) and asked what next. See deciders.py, "Denied effects"."""
        self.denied += 1
        artifact = a.artifact
        missing = [p for p in self.required_for(a.destination) if not (artifact and self.has_admitted(p, artifact))]
        reason = f"returned to planning: {what} ({'; '.join(why)})"
        if len(reason) > REASON_CHARS:
            reason = reason[: REASON_CHARS - 1].rstrip() + "\u2026"
        event_id = self.emit(
            "run.state",
            state="running",
            reason=reason,
            returned_to="planning",
            decision_id=decision,
            denied_intent=a.intent,
            destination=a.destination,
            outcome=outcome,
            gate=gate,
            missing_purposes=missing,
            denials=self.denied,
        )
        self.denials[a.intent] = self.log.by_id[event_id]
        if self.denied >= DENIAL_LIMIT:
            self.stop("stopped", f"denied {self.denied} times in one run (the limit); the last: {reason}")

    def _draft(self, kind: str, event_id: str, **fields: Any) -> dict[str, Any]:
        return {
            "seq": 0,
            "id": event_id,
            "kind": kind,
            "at": {"logical": self.now, "wall": self.log.wall},
            "attempt": self.attempt,
            **fields,
        }

    def _gate(self, prospective: list[dict[str, Any]], intent_id: str) -> list[Any]:
        from ..lineage import LineageGraph  # only a gated activation needs it: not imported by every sandbox child

        graph = LineageGraph(self._manifest_run())
        for seq, event in enumerate([*self.log.events, *prospective], start=1):
            graph.add({**event, "seq": seq}, references=references(event))
        return [f for f in graph.intent_findings(intent_id) if f.severity == "error"]

    def _manifest_run(self) -> dict[str, Any]:
        run = {"id": self.package.run_id, "environment": "fixture", "mode": self.package.mode}
        rules = self.source.run.get("compatibility_rules")
        if rules is not None:
            run["compatibility_rules"] = rules  # as the replay's manifest says (`_run_meta`)
        return run

    def _execute(self, a: Execute) -> None:
        intent_id = self.intent_of.get(a.intent) or self.map.get(a.intent)
        intent = self.log.by_id.get(intent_id or "")
        if intent is None or intent["kind"] != "effect.intent":
            return  # the recorded execution belongs to an intent this replay never activated
        info = self.intents[intent["id"]]
        route = self.sc.route_for(intent["destination"])
        attempts = self.execs.setdefault(intent["id"], [])
        attempt_no = len(attempts) + 1
        connection = f"fixture:{route.tool}" if route else "fixture:none"
        if intent["id"] in self.effect_done:
            ev = self.emit(
                "effect.execution",
                ref=a.ref,
                intent_id=intent["id"],
                attempt_no=attempt_no,
                stage="before_send",
                outcome="rejected",
                connection=connection,
                reason="the simulated provider already holds an effect for idempotency key "
                f"{intent['idempotency_key']}",
            )
            attempts.append(self.log.by_id[ev])
            return
        if route is None:
            self._missing_world(
                f"the scenario routes no contract for effects on {intent['destination']}", intent["destination"]
            )
        contract = self.sc.contracts.get(route.tool)
        excluded = self.sc.excluded(route.tool)
        if excluded is not None:
            # The effect's tool is excluded: the scenario cannot model its consequence, so the run stops here, as
            # a call to an excluded mutation does (`_excluded_call`), naming the exclusion rather than a bare miss.
            request_digest = canonical.digest_json(info["args"])
            with contextlib.suppress(ContractError):
                request_digest = contract.digest(info["args"])[1]
            self._missing_call(
                CallTool(a.ref, None, route.tool, info["args"], None, None),
                contract,
                request_digest,
                f"excluded: {route.tool} is a mutation this scenario version excludes ({excluded}): the effect's "
                "consequence cannot be evaluated",
                excluded={"tool": route.tool, "reason": excluded},
                intent_id=intent["id"],
            )
        try:
            _normalized, digest = contract.digest(info["args"])
        except ContractError as exc:
            self._missing_call(
                CallTool(a.ref, None, route.tool, info["args"], None, None),
                contract,
                canonical.digest_json(info["args"]),
                f"the effect's request does not fit {route.tool} revision {contract.revision}: {exc}",
            )
        race = self.sc.race_for(route.tool)
        if race is not None and race.id not in self.raced:
            self.raced.add(race.id)
            self._race(race, intent, contract, digest, connection, a.ref)
            return
        result = self.sc.registry.lookup(route.tool, contract.revision, digest, self.world)
        if not isinstance(result, Hit):
            record = result.record(scenario=self.sc.ref, checkpoint_id=self.checkpoint_id)
            kind = record.pop("kind")
            record["intent_id"] = intent["id"]
            self._record_missing(kind, record)
        fixture = result.fixture
        stage = self._fault(fixture, digest)
        outcome = {
            None: "acknowledged",
            "before_send": "failed",
            "after_acceptance": "lost_response",
            "before_receipt": "lost_response",
            "after_world_mutation": "unknown",
            "during_response": "unknown",
            "after_local_commit": "acknowledged",
        }[stage]
        ev = self.emit(
            "effect.execution",
            ref=a.ref,
            intent_id=intent["id"],
            attempt_no=attempt_no,
            stage=stage or "completed",
            outcome=outcome,
            connection=connection,
            fixture=fixture.id,
            idempotency_key=intent["idempotency_key"],
        )
        attempts.append(self.log.by_id[ev])
        if stage != "before_send":
            self.effect_done.add(intent["id"])
            if fixture.transition is not None:
                self._mutate(fixture, ev, route.tool)
        if stage == "after_local_commit":
            self.stop(
                "interrupted",
                f"fault after_local_commit injected on {route.tool}: the harness stopped after committing",
            )

    def _race(
        self, race: Race, intent: dict[str, Any], contract: Contract, digest: str, connection: str, ref: str | None
    ) -> None:
        """The intent's first execution as the race's deliveries, in the declared order (see the module docstring).

        Each delivery goes accept -> commit -> acknowledge and stops at its barrier until a `release` step; the
        world it commits into is the world at that moment, so a delivery committed second meets what the first
        left (and needs a fixture for that state, or the run stops as `incomplete_test_world`, naming the race).
        """
        tool, key, intent_id = race.tool, intent["idempotency_key"], intent["id"]
        attempts = self.execs.setdefault(intent_id, [])
        numbers = {d.name: len(attempts) + 1 + i for i, d in enumerate(race.deliveries)}
        held: dict[str, str] = {}  # delivery -> the phase it resumes at
        answered: dict[str, str] = {}  # delivery -> the fixture that answered its commit

        def step(index: int, kind: str, name: str, **fields: Any) -> str:
            return self.emit(
                "schedule.step",
                race=race.id,
                index=index,
                step=kind,
                delivery=name,
                intent_id=intent_id,
                effect_identity=identity_for(race, key, name),
                world_revision=self.world.revision,
                **fields,
            )

        def executed(name: str, **fields: Any) -> None:
            ev = self.emit(
                "effect.execution",
                ref=ref if name == race.deliveries[0].name else None,
                intent_id=intent_id,
                attempt_no=numbers[name],
                stage="completed",
                connection=connection,
                idempotency_key=key,
                race=race.id,
                delivery=name,
                effect_identity=identity_for(race, key, name),
                **fields,
            )
            attempts.append(self.log.by_id[ev])

        def proceed(index: int, name: str, phase: str) -> None:
            barrier = race.delivery(name).barrier
            identity = identity_for(race, key, name)
            if phase == "accept":
                if self.world.get(effect_resource(tool, identity)) is not None:
                    why = f"the simulated provider already holds an effect for identity {identity}"
                    step(index, "deduplicate", name, reason=why)
                    executed(name, outcome="rejected", reason=why)
                    return
                accepted = step(index, "accept", name)
                state = {"delivery": name, "request_digest": digest, "identity": identity}
                try:
                    t = self.world.accept_effect(tool, identity, state, accepted)
                except WorldError as exc:
                    self.stop("failed", f"race {race.id}: the provider's ledger refused delivery {name}: {exc}")
                assert t is not None  # the identity was not held a line ago
                self._world_event(t, accepted)
                self.effect_done.add(intent_id)
                if barrier == "after_acceptance":
                    step(index, "hold", name, barrier=barrier)
                    held[name] = "commit"
                    return
                phase = "commit"
            if phase == "commit":
                result = self.sc.registry.lookup(tool, contract.revision, digest, self.world)
                if not isinstance(result, Hit):
                    record = result.record(scenario=self.sc.ref, checkpoint_id=self.checkpoint_id)
                    kind = record.pop("kind")
                    record.update(intent_id=intent_id, race=race.id, delivery=name)
                    self._record_missing(kind, record)
                answered[name] = result.fixture.id
                committed = step(index, "commit", name, fixture=result.fixture.id)
                if result.fixture.transition is not None:
                    self._mutate(result.fixture, committed, tool)
                if barrier == "after_world_mutation":
                    step(index, "hold", name, barrier=barrier)
                    held[name] = "acknowledge"
                    return
            executed(name, outcome="acknowledged", fixture=answered[name])

        for index, entry in enumerate(race.schedule):
            name = entry.delivery
            if entry.op == "run":
                step(index, "run", name)
                proceed(index, name, "accept")
            elif name in held:
                step(index, "release", name, barrier=race.delivery(name).barrier)
                proceed(index, name, held.pop(name))
            else:
                step(index, "skip", name, reason=f"not held: {name} ended at acceptance, before its barrier")

    # account and the rest

    def _claim(self, a: Claim) -> None:
        supports = [self.map[s] for s in a.supports if s in self.map] + [s for s in a.supports if s in self.log.by_id]
        unmapped = [s for s in a.supports if s not in self.map and s not in self.log.by_id]
        fields: dict[str, Any] = {"text": a.text, "claim_kind": a.kind, "supports": supports}
        if a.scope is not None:
            fields["scope"] = a.scope
        if a.artifact is not None and a.artifact in self.objects:
            fields["artifact_id"] = a.artifact  # replay artifacts keep their recorded ids; one never built is not named
        fields["origin"] = "recorded" if a.ref is not None else f"scripted:{self.decider.name}"
        if unmapped:
            fields["unsupported_in_replay"] = unmapped
        excluded = sorted({self.unevaluated[s] for s in supports if s in self.unevaluated})
        if excluded:
            # A claim resting on an excluded tool's answer is neither supported nor contradicted by this replay.
            fields["unevaluated"] = {
                "tools": excluded,
                "supports": [s for s in supports if s in self.unevaluated],
                "reason": "rests on the answer of an excluded tool, which this scenario version does not evaluate",
            }
        self.emit("account.claim", ref=a.ref, **fields)

    def _charge(self, a: Charge) -> None:
        self._spend(a.resource, a.amount, origin="recorded", ref=a.ref, what=f"the recorded charge {a.ref}")

    def _spend(
        self, resource: str, amount: float, *, origin: str, what: str, ref: Any = None, cause: Any = None
    ) -> None:
        """One charge, added to the run's cumulative total and checked against the limit and the recovery reserve.

        The charge is written before the check: the work it pays for has happened, and the stop names it."""
        recovery = self.attempt in self.recovery_attempts
        spent = self.spent[resource] = self.spent.get(resource, 0) + amount
        if origin == "replay":
            self.own_spent[resource] = self.own_spent.get(resource, 0) + amount
        if recovery:
            self.recovery_spent[resource] = self.recovery_spent.get(resource, 0) + amount
        fields: dict[str, Any] = {"resource": resource, "amount": amount, "origin": origin, "recovery": recovery}
        if cause is not None:
            fields["cause"] = cause
        fields["spent_total"] = spent
        self.emit("budget.charged", ref=ref, **fields)
        limit = self.budget_limits.get(resource)
        if limit is None:
            return
        where = f"{what} in attempt {self.attempt}" if self.attempt else what
        if spent > limit:
            self.stop(
                "stopped",
                f"budget exhausted: {resource} {spent:g} > {limit:g} (cumulative across attempts; {amount:g} for "
                f"{where})",
            )
        reserve = self.reserve.get(resource, 0)
        if reserve and not recovery and spent > limit - reserve:
            self.stop(
                "stopped",
                f"budget reserve: {resource} {spent:g} spent would dig into the recovery reserve of {reserve:g} "
                f"(limit {limit:g}; ordinary work may spend {limit - reserve:g}); {amount:g} for {where}, which is "
                "not a recovery",
            )

    def _checkpoint_action(self, a: Checkpoint) -> None:
        self._checkpoint(a.ref)

    def _wait(self, a: Wait) -> None:
        self.advance_to(self.clock.now + timedelta(seconds=a.seconds), None, a.reason)

    def _stop(self, a: Stop) -> NoReturn:
        self.stop(a.state, a.reason)


def _bounded(text: str) -> str:
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1].rstrip() + "\u2026"


def _number(value: str, key: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ReplayError(f"vary {key}: {value!r} is not a number") from None
    if number < 0 or number != number or number in (float("inf"),):
        raise ReplayError(f"vary {key}: must be a non-negative number")
    return number


_HANDLERS: dict[type, Any] = {
    StartAttempt: _Engine._start_attempt,
    EndAttempt: _Engine._end_attempt,
    CreateWorkspace: _Engine._create_workspace,
    Propose: _Engine._propose,
    CallTool: _Engine._call,
    CreateArtifact: _Engine._create_artifact,
    Observe: _Engine._observe,
    Admit: _Engine._admit,
    Supersede: _Engine._supersede,
    Waive: _Engine._waive,
    HumanInput: _Engine._human,
    RecordedApproval: _Engine._recorded_approval,
    Decide: _Engine._decide,
    Activate: _Engine._activate,
    Execute: _Engine._execute,
    Claim: _Engine._claim,
    Charge: _Engine._charge,
    Checkpoint: _Engine._checkpoint_action,
    Wait: _Engine._wait,
    Stop: _Engine._stop,
}


def iter_output_events(output: ReplayOutput) -> Iterator[dict[str, Any]]:
    for line in output.events.splitlines():
        yield json.loads(line)
