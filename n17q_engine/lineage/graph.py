"""The lineage checker's graph (DESIGN §4): the compact records of a run's events, the id maps, the finding type.

No rule lives here. `LineageGraph.add` is called once per validated event in `seq` order and keeps only compact
records of the fields the rules read (never the event dicts, so 100,000 events stay small), plus id→seq maps and the
references nothing answered yet. The rules of each code family (`evidence`, `approvals`, `effects`, `workspaces`,
`references`, `claims`) read these records, and the state the arrival checks keep is initialized here too: the
underscored maps are the package's shared state, not an API for code outside `n17q_engine.lineage`. This module
imports none of the rule modules; `checks` (the orchestrating module, imported by the package) plugs them in through
`plug_in`: the checks run as each kind of event arrives, and the function that yields the findings whose "from" is
one event (`_findings_from`, asked by `iter_findings` and `intent_findings`).

Decisions taken where DESIGN §4 is silent that live here (the rest travel with the rules they concern; the package
docstring lists where):

- The "artifact's lineage" (LIN003, LIN008, LIN015: `_lineage`) is its workspace plus the workspaces it was derived
  from, each ancestor only up to the moment the child was derived (what the ancestor did after the fork is not the
  child's history), plus the workspaces of the admissions used for the purpose in question. The latest receipt across
  all of them wins, so a later passing rerun in the new workspace resolves an ancestor's failure.
- A receipt is "for" a purpose (`_purpose_of`) when an observation's `scope` or an admission (admitted or rejected)
  names it for that receipt, or when the purpose is one of its suites or `validation:<suite>`.
- Waivers (`_unwaived`) count only when granted before the decision (or claim) they would excuse. When a receipt's
  failing suites are known (`results.failing_suites`, or a receipt that ran a single suite), every one of them must
  be waived; when they cannot be told, any waiver naming the receipt clears it.
- `intent_findings` covers the intent, the decisions whose subject it is, its approval, its executions, its
  artifact's creation, the admissions it or those decisions use, and the observations and receipts behind them.
- A run whose mode is `reconstruction` and whose manifest names the run it `reconstructs` ({id, environment, mode})
  is judged as that run: a reconstruction re-projects recorded events through today's checks, and the recorded run's
  own approval is not foreign to its own history.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import vocabulary as v
from ..canonical import digest_json
from ..compatibility import Rule, parse_rules
from ..path_globs import PathGlobs
from ..scenario_evaluation import scope_unevaluated
from ..spill import MultiMap, SpilledIndex, SpilledMultiMap, spill_index, spill_multimap
from .codes import WARNING_CODES, claim_is_judged, unevaluated_checks

LIVE_ENVIRONMENTS = frozenset({"live", "effect-capable"})
INVALIDATING_STATES = frozenset({"superseded", "quarantined"})
# The word the OTLP and Inspect converters write for a tree their source never recorded: a tree nobody knows is no
# tree, so two of them never match (seed 000, "Unknown fixture data stayed unknown").
UNKNOWN_TREE = "unknown"
VALIDATION_PREFIX = "validation:"
# The index key under which every receipt of a workspace is filed, whatever it was for.
_ANY_PURPOSE = "*"
# How many derivations back a lineage is followed. Recovery chains are a handful deep; the bound keeps
# every rule constant-time per event even for a pathological run that derives thousands of workspaces
# from one another.
MAX_LINEAGE_DEPTH = 64


@dataclass(frozen=True, slots=True)
class Finding:
    code: str
    severity: str
    from_: str
    to: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {
            "code": self.code,
            "severity": self.severity,
            "from": self.from_,
            "to": self.to,
            "message": self.message,
        }


def _finding(code: str, from_: str, to: str, message: str) -> Finding:
    return Finding(code, "warning" if code in WARNING_CODES else "error", from_, to, message)


# Compact records: only what the rules read.


@dataclass(slots=True)
class _Workspace:
    event: str
    seq: int
    parent: str | None
    relation: str | None
    overlay: frozenset[str]
    # The nearest ancestor with a failing receipt before the fork, with that fork's seq, or None. When the
    # parent was not known yet (derived forward), the pointer cannot be made and the plain walk is used.
    failing_ancestor: tuple[str, int] | None
    parent_known: bool
    environment: str | None
    content_equal: bool  # what derived_from recorded: the copy held the parent's content when it was made


@dataclass(slots=True)
class _Receipt:
    seq: int
    workspace: str | None
    completion: str | None
    failed: int | None
    exit_code: int | None
    suites: tuple[str, ...]
    failing_suites: tuple[str, ...] | None
    pre_tree: str | None
    post_tree: str | None  # None when the receipt did not record one (an unfinished command): unknown
    command: str | None
    environment: str | None
    inputs_digest: str | None
    test_isolation: str | None

    @property
    def trees(self) -> tuple[str, ...]:
        """The known trees the command ran at (before, and after if recorded): an unknown one matches nothing."""
        return tuple(t for t in (self.pre_tree, self.post_tree) if t is not None and t != UNKNOWN_TREE)

    @property
    def incomplete(self) -> bool:
        return self.completion != "completed"

    @property
    def has_failures(self) -> bool:
        return (self.failed is not None and self.failed > 0) or bool(self.exit_code)


@dataclass(slots=True)
class _Observation:
    seq: int
    source: str | None


@dataclass(slots=True)
class _Admission:
    seq: int
    observation: str | None
    purpose: str
    artifact: str | None
    workspace: str | None
    tree: str | None
    admitted: bool
    # The compatibility record: None when none was recorded, "" when it names no rule, else the rule it cites.
    rule: str | None


@dataclass(slots=True)
class _Artifact:
    event: str
    seq: int
    workspace: str | None
    tree: str | None
    digest: str | None = None


@dataclass(slots=True)
class _Decision:
    seq: int
    subject: str | None
    inputs: tuple[str, ...]
    required: tuple[str, ...]
    outcome: str | None
    revision: str | None = None


@dataclass(slots=True)
class _Approval:
    seq: int
    subject: str | None
    digest: str | None
    decision: str | None
    origin: str | None
    run: str | None
    environment: str | None
    # Extensions (issue 34): the digest of the review object the harness showed the approver, and the approval's
    # expiry, both part of what the approval binds (n17q_engine/lineage/review.py).
    review_digest: str | None = None
    expires_at: str | None = None


@dataclass(slots=True)
class _Intent:
    seq: int
    artifact: str | None
    admissions: tuple[str, ...]
    approval: str | None
    # The effect's identity, part of the review object an approval binds (review.py): what, where, under which key,
    # and the digest of any further parameters the intent carries (None when it carries none).
    effect_class: str | None = None
    destination: str | None = None
    key: str | None = None
    namespace: str | None = None
    parameters: str | None = None


@dataclass(slots=True)
class _Claim:
    seq: int
    kind: str
    supports: tuple[str, ...]
    scope: tuple[str, ...] | None
    artifact: str | None  # the claim's own `artifact_id` (extension), if it names one


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _strs(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(item for item in value if isinstance(item, str) and item)


def _count(value: Any) -> int | None:
    """A non-bool number from a harness-written dict, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value) if value == value and abs(value) != float("inf") else None


def _path(value: str) -> str:
    return value[2:] if value.startswith("./") else value


# LIN017's default test paths (seed 003, "Repository tests were inside the writable workspace"): test folders, test
# files by the common naming conventions, and the test runner's configuration that decides what runs.
DEFAULT_TEST_PATHS = (
    "tests/**",
    "test/**",
    "**/tests/**",
    "**/test/**",
    "**/test_*.py",
    "**/*_test.py",
    "**/conftest.py",
    "**/*_test.go",
    "**/*.test.js",
    "**/*.test.ts",
    "**/*.spec.js",
    "**/*.spec.ts",
    "pytest.ini",
    "tox.ini",
)


def _test_scope(run: dict) -> tuple[tuple[str, ...], bool]:
    """The run's test path globs and whether its task requires changing tests: the task's word first, then the
    scenario's, then the defaults (a `test_paths` list, even empty, replaces them)."""
    paths: tuple[str, ...] | None = None
    required = False
    for holder in (run.get("scenario"), run.get("task")):  # the task, read last, overrides the scenario
        if not isinstance(holder, dict):
            continue
        if isinstance(holder.get("test_paths"), list):
            paths = _strs(holder.get("test_paths"))
        if isinstance(holder.get("requires_test_changes"), bool):
            required = holder["requires_test_changes"]
    return (DEFAULT_TEST_PATHS if paths is None else paths), required


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _join(items: Iterable[str]) -> str:
    return ", ".join(items)


# What an effect.intent says that is not a further parameter of its effect: the envelope, DESIGN §3's fields, and a
# converted event's provenance (n17q_engine.formats). Anything else a harness adds is a parameter the approval binds.
_INTENT_NAMED = frozenset(
    {
        *v.ENVELOPE,
        *v.KINDS["effect.intent"],
        "otlp",
        "inspect",
    }
)

# How often (in events added) the growing containers are asked whether they should move to disk.
_SPILL_CHECK_EVERY = 10_000


class LineageGraph:
    """The run's evidence graph, built one validated event at a time (see the module docstring)."""

    def __init__(self, run: dict) -> None:
        run = run if isinstance(run, dict) else {}
        # The compatibility rules the run's policy declares (n17q_engine/compatibility.py). A reconstruction's
        # manifest carries the recorded run's rules, so they are read before it is judged as that run.
        self.rules: dict[str, Rule] = parse_rules(run.get("compatibility_rules"))
        # A reconstruction re-projects another run's recorded events: the run-relative rules (whose approval,
        # which environment, live or not) judge them as the run that recorded them, not as the viewer.
        # The policy revision in force before any decision names one (the review object an approval binds, review.py).
        self.policy_revision: str | None = _str(run.get("policy_revision"))
        # LIN017 (workspaces.py): the paths that are the repository's tests, and whether the task asks for them to
        # change (`run.task.test_paths` / `run.task.requires_test_changes`, else the scenario's; the defaults
        # otherwise). Read from the viewing run: a reconstruction's task is the recorded run's task.
        self.test_paths, self.tests_required = _test_scope(run)
        # The same few files are named again and again (every artifact, every change): each matched once.
        self.test_globs = PathGlobs(self.test_paths)
        subject = run.get("reconstructs")
        if run.get("mode") == "reconstruction" and isinstance(subject, dict):
            run = subject
        self.run_id: str | None = _str(run.get("id"))
        self.environment: str | None = _str(run.get("environment"))
        self.mode: str | None = _str(run.get("mode"))
        # Fail closed: a run that does not say it is a recorded live run is treated as a replay.
        self.live = self.environment in LIVE_ENVIRONMENTS and self.mode == "recorded"

        # The three containers that grow with every event (a hostile bundle can make each one hold an entry per
        # event) move to disk past spill.SPILL_AFTER entries: the checker's memory stays bounded (issue 20).
        self._seq: dict[str, int] | SpilledIndex = {}
        self._objects: set[str] = set()
        # References nothing answered when their event arrived: from event id -> [(field path, target)].
        self._unresolved: MultiMap | SpilledMultiMap = MultiMap()
        # Findings decided on arrival, by the id of their "from" event.
        self._found: MultiMap | SpilledMultiMap = MultiMap()

        self._workspaces: dict[str, _Workspace] = {}
        self._dead: dict[str, list[tuple[int, str, str]]] = {}  # ws -> [(seq, event, state)]
        self._changes: dict[str, list[tuple[int, str, str]]] = {}  # ws -> [(seq, event, tree)]
        # The arrival checks' own state (workspaces.py: LIN009, LIN010; effects.py: LIN012 below).
        self._uncertain: dict[str, tuple[str, int, str]] = {}  # ws -> (event, seq, why)
        # LIN009 findings since the workspace became uncertain: ws -> [(event, its call or cause)], so that the
        # cleanup's own receipt, call and changes can be taken back when a lifecycle names the cleanup receipt.
        self._reused: dict[str, list[tuple[str, str | None]]] = {}
        self._awaiting_overlay: dict[str, list[tuple[str, tuple[str, ...]]]] = {}  # ws -> [(artifact event, files)]

        self._receipts: dict[str, _Receipt] = {}
        self._failing: dict[str, list[tuple[int, str]]] = {}  # ws -> [(seq, receipt)] with failures
        # ws -> [(seq, receipt)] with failures or an unfinished completion: what may contradict a claim (LIN015).
        self._unsettled: dict[str, list[tuple[int, str]]] = {}
        # (workspace, purpose or suite) -> sorted [(seq, receipt)]; purpose "*" files every receipt.
        self._by_purpose: dict[tuple[str, str], list[tuple[int, str]]] = {}
        self._purposes: dict[str, set[str]] = {}  # receipt (or not-yet-seen source) id -> purposes
        self._obs_purposes: dict[str, set[str]] = {}  # observation id not yet seen -> purposes
        self._observations: dict[str, _Observation] = {}
        self._admissions: dict[str, _Admission] = {}
        self._superseded: dict[str, list[tuple[int, str]]] = {}  # admission -> [(seq, event)]
        self._waivers: dict[str, list[tuple[int, str]]] = {}  # receipt -> [(seq, suite)]
        self._artifacts: dict[str, _Artifact] = {}
        self._decisions: dict[str, _Decision] = {}
        self._decisions_on: dict[str, list[str]] = {}  # subject -> decision ids
        self._requirements: list[tuple[int, str]] = []  # [(seq, decision)] with a non-empty required
        self._approvals: dict[str, _Approval] = {}
        self._intents: dict[str, _Intent] = {}
        self._first_key: dict[str, str] = {}  # idempotency key -> its first intent (LIN012, effects.py)
        self._executions: dict[str, list[str]] = {}  # intent -> execution ids
        self._first_executed_at: dict[str, str] = {}  # intent -> its first execution's logical time (LIN004: expiry)
        self._first_ack: dict[str, str] = {}  # intent -> its first acknowledged execution (LIN012, effects.py)
        self._claims: dict[str, _Claim] = {}
        # Claims a replay left unevaluated (they rest on an excluded tool): claim id -> the tools.
        self._unevaluated_claims: dict[str, tuple[str, ...]] = {}
        self._kinds: dict[str, int] = {}  # kind -> events of it: what the checks had to judge
        # A replay's scope note (its id, scope and segment): what a narrow scope cannot support (scope_unevaluated).
        self._scope_note: dict[str, Any] | None = None
        # Whether events came in increasing seq (the bundle reader's rule): `iter_findings` then walks `_seq` as is.
        self._in_order = True
        self._last_seq = 0
        # Indexes derived at findings time, valid while no event is added (`_added` counts them).
        self._added = 0
        self._memo_store: dict[str, Any] = {}
        self._memo_at = -1

    # ------------------------------------------------------------------ building

    def add(self, event: dict, *, references: list[tuple[str, str]] | None = None) -> None:
        """Take the next event in seq order. `references` may pass `vocabulary.references(event)` when the
        caller has already computed it (the importer does, for its edges)."""
        event_id = event["id"]
        seq = event["seq"]
        self._added += 1
        kind = event["kind"]
        self._kinds[kind] = self._kinds.get(kind, 0) + 1
        # Whether the id was already added, told by the index's size (one lookup, where `in` and then the
        # assignment made two: on disk, past spill.SPILL_AFTER events, each is a query).
        before = len(self._seq)
        self._seq[event_id] = seq
        if before and (seq <= self._last_seq or len(self._seq) == before):
            self._in_order = False
        self._last_seq = seq
        if self._added % _SPILL_CHECK_EVERY == 0:
            self._spill()
        introduced = v.introduced_object(event)
        if introduced is not None:
            self._objects.add(introduced[1])
        known, objects = self._seq, self._objects
        for path, target in v.references(event) if references is None else references:
            # Objects first: a set in memory, and what most references name (every event's attempt, the
            # workspace it acts on), where the event index may be on disk (a query per miss).
            if target not in objects and target not in known:
                self._unresolved.add(event_id, (path, target))
        for handler in _HANDLERS.get(kind, ()):
            handler(self, event_id, seq, event)
        if kind == "replay.scope" and self._scope_note is None:
            self._scope_note = {"id": event_id, "scope": event.get("scope"), "segment": event.get("segment")}

    def _spill(self) -> None:
        self._seq = spill_index(self._seq)
        self._unresolved = spill_multimap(self._unresolved)
        self._found = spill_multimap(self._found)

    def seq_of(self, event_id: str) -> int | None:
        """The seq of an event added under this id, or None."""
        return self._seq.get(event_id)

    def unresolved_references(self) -> Iterator[tuple[str, str, str]]:
        """Every (event id, field path, target) whose target nothing answered when the event arrived, in the order
        the events came: what an importer writes as forward or dangling edges once the run is complete."""
        for event_id in self._unresolved:
            for path, target in self._unresolved.get(event_id, ()):
                yield event_id, path, target

    def _emit(self, finding: Finding) -> None:
        self._found.add(finding.from_, finding)

    # What each kind records. The arrival checks of the rule modules run after these, on the records just made
    # (`plug_in`).

    def _add_workspace(self, event_id: str, seq: int, event: dict) -> None:
        workspace = _str(event.get("workspace_id"))
        if workspace is None:
            return
        derived = event.get("derived_from")
        parent = relation = None
        if isinstance(derived, dict):
            parent, relation = _str(derived.get("workspace_id")), _str(derived.get("relation"))
        overlay = frozenset(_path(p) for p in _strs(event.get("overlay_files")))
        # Receipts arrive in seq order, so every receipt of the parent seen now predates the fork and none
        # seen later does: the pointer is final when it is made.
        failing_ancestor: tuple[str, int] | None = None
        known = None
        if parent is not None and parent != workspace:
            known = self._workspaces.get(parent)
            if known is not None:
                failing_ancestor = (parent, seq) if self._failing.get(parent) else known.failing_ancestor
        self._workspaces[workspace] = _Workspace(
            event_id,
            seq,
            parent,
            relation,
            overlay,
            failing_ancestor,
            parent is None or known is not None,
            _str(event.get("environment_revision")),
            isinstance(derived, dict) and derived.get("content_equal") is True,
        )

    def _add_change(self, event_id: str, seq: int, event: dict) -> None:
        workspace = _str(event.get("workspace_id"))
        if workspace is None:
            return
        self._changes.setdefault(workspace, []).append((seq, event_id, _str(event.get("tree_digest")) or ""))

    def _add_lifecycle(self, event_id: str, seq: int, event: dict) -> None:
        workspace = _str(event.get("workspace_id"))
        if workspace is None:
            return
        state = event.get("state")
        if state in INVALIDATING_STATES:
            self._dead.setdefault(workspace, []).append((seq, event_id, state))

    def _add_artifact(self, event_id: str, seq: int, event: dict) -> None:
        artifact = _str(event.get("artifact_id"))
        workspace = _str(event.get("workspace_id"))
        if artifact is not None:
            self._artifacts[artifact] = _Artifact(
                event_id, seq, workspace, _str(event.get("tree_digest")), _str(event.get("digest"))
            )

    def _add_receipt(self, event_id: str, seq: int, event: dict) -> None:
        workspace = _str(event.get("workspace_id"))
        results = event.get("results")
        results = results if isinstance(results, dict) else {}
        exit_code = event.get("exit_code")
        suites = _strs(event.get("suites"))
        failing: tuple[str, ...] | None = None
        if isinstance(results.get("failing_suites"), list):
            failing = _strs(results["failing_suites"])
        elif len(suites) == 1:
            failing = suites
        receipt = _Receipt(
            seq,
            workspace,
            _str(event.get("completion")),
            _count(results.get("failed")),
            exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None,
            suites,
            failing,
            _str(event.get("pre_tree")),
            _str(event.get("post_tree")),
            _str(event.get("command")),
            _str(event.get("environment_revision")),
            _str(event.get("inputs_digest")),
            _str(event.get("test_isolation")),
        )
        self._receipts[event_id] = receipt
        if workspace is not None:
            self._file(workspace, _ANY_PURPOSE, seq, event_id)
            if receipt.has_failures:
                self._failing.setdefault(workspace, []).append((seq, event_id))
            if receipt.has_failures or receipt.incomplete:
                self._unsettled.setdefault(workspace, []).append((seq, event_id))
        for suite in suites:
            self._purpose_of(event_id, suite)
            self._purpose_of(event_id, VALIDATION_PREFIX + suite)
        # Observations or admissions that named this receipt before it arrived.
        for purpose in self._obs_purposes.pop(event_id, ()):
            self._purpose_of(event_id, purpose)
        if workspace is not None:
            for purpose in self._purposes.get(event_id, ()):
                self._file(workspace, purpose, seq, event_id)

    def _file(self, workspace: str, purpose: str, seq: int, receipt: str) -> None:
        entries = self._by_purpose.setdefault((workspace, purpose), [])
        if not entries or entries[-1][0] < seq:
            entries.append((seq, receipt))
        else:
            insort(entries, (seq, receipt))

    def _purpose_of(self, source: str, purpose: str) -> None:
        """Record that `source` (a receipt, or an id that may turn out to be one) is for `purpose`."""
        purposes = self._purposes.setdefault(source, set())
        if purpose in purposes:
            return
        purposes.add(purpose)
        receipt = self._receipts.get(source)
        if receipt is not None and receipt.workspace is not None:
            self._file(receipt.workspace, purpose, receipt.seq, source)

    def _add_observation(self, event_id: str, seq: int, event: dict) -> None:
        source = _str(event.get("source"))
        self._observations[event_id] = _Observation(seq, source)
        scope = event.get("scope")
        purposes = set((scope,) if isinstance(scope, str) and scope else _strs(scope))
        purposes.update(self._obs_purposes.pop(event_id, ()))
        if source is not None:
            for purpose in purposes:
                self._purpose_of(source, purpose)

    def _add_admission(self, event_id: str, seq: int, event: dict) -> None:
        observation = _str(event.get("observation_id"))
        purpose = _str(event.get("purpose")) or ""
        compatibility = event.get("compatibility")
        rule = (_str(compatibility.get("rule")) or "") if isinstance(compatibility, dict) else None
        self._admissions[event_id] = _Admission(
            seq,
            observation,
            purpose,
            _str(event.get("artifact_id")),
            _str(event.get("workspace_id")),
            _str(event.get("tree_digest")),
            event.get("decision") == "admitted",
            rule,
        )
        if observation is None or not purpose:
            return
        seen = self._observations.get(observation)
        if seen is not None:
            if seen.source is not None:
                self._purpose_of(seen.source, purpose)
        elif observation in self._receipts:
            # Lenient: an admission that points straight at the receipt it admits.
            self._purpose_of(observation, purpose)
        else:
            self._obs_purposes.setdefault(observation, set()).add(purpose)

    def _add_superseded(self, event_id: str, seq: int, event: dict) -> None:
        admission = _str(event.get("admission_id"))
        if admission is not None:
            self._superseded.setdefault(admission, []).append((seq, event_id))

    def _add_waiver(self, event_id: str, seq: int, event: dict) -> None:
        failure = _str(event.get("failure"))
        if failure is not None:
            self._waivers.setdefault(failure, []).append((seq, event.get("suite") or ""))

    def _add_decision(self, event_id: str, seq: int, event: dict) -> None:
        subject = _str(event.get("subject"))
        required = tuple(_unique(_strs(event.get("required"))))
        self._decisions[event_id] = _Decision(
            seq,
            subject,
            _strs(event.get("input_ids")),
            required,
            _str(event.get("outcome")),
            _str(event.get("policy_revision")),
        )
        if subject is not None:
            self._decisions_on.setdefault(subject, []).append(event_id)
        if required:
            self._requirements.append((seq, event_id))

    def _add_approval(self, event_id: str, seq: int, event: dict) -> None:
        self._approvals[event_id] = _Approval(
            seq,
            _str(event.get("subject")),
            _str(event.get("evidence_set_digest")),
            _str(event.get("decision")),
            _str(event.get("origin")),
            _str(event.get("run")),
            _str(event.get("environment")),
            _str(event.get("review_digest")),
            _str(event.get("expires_at")),
        )

    def _add_intent(self, event_id: str, seq: int, event: dict) -> None:
        extra = {k: value for k, value in event.items() if k not in _INTENT_NAMED}
        self._intents[event_id] = _Intent(
            seq,
            _str(event.get("artifact_id")),
            _strs(event.get("admission_ids")),
            _str(event.get("approval_id")),
            _str(event.get("effect_class")),
            _str(event.get("destination")),
            _str(event.get("idempotency_key")),
            _str(event.get("namespace")),
            digest_json(extra) if extra else None,
        )

    def _add_execution(self, event_id: str, seq: int, event: dict) -> None:
        intent = _str(event.get("intent_id"))
        if intent is not None:
            self._executions.setdefault(intent, []).append(event_id)
            at = event.get("at")
            logical = _str(at.get("logical")) if isinstance(at, dict) else None
            if logical is not None:
                self._first_executed_at.setdefault(intent, logical)

    def _add_claim(self, event_id: str, seq: int, event: dict) -> None:
        if not claim_is_judged(event):
            self._kinds["account.claim"] -= 1  # not an input of LIN008
            unevaluated = event.get("unevaluated")
            if isinstance(unevaluated, dict) and event.get("claim_kind") in ("validation", "completion"):
                self._unevaluated_claims[event_id] = _strs(unevaluated.get("tools")) or ("an excluded tool",)
            return
        kind = str(event["claim_kind"])  # judged claims are validation or completion claims
        scope = event.get("scope")
        self._claims[event_id] = _Claim(
            seq,
            kind,
            _strs(event.get("supports")),
            _strs(scope) if isinstance(scope, list) else None,
            _str(event.get("artifact_id")),
        )

    # ------------------------------------------------------------------ asking

    def findings(self) -> list[Finding]:
        """Every finding of the run, ordered by the seq of its "from" event, then code, then "to"."""
        return list(self.iter_findings())

    def iter_findings(self) -> Iterator[Finding]:
        """The findings of `findings()`, in the same order, one "from" event at a time: a run whose every event
        carries a dangling reference is never held as a list of findings (the importer writes them in batches).

        Every finding `_findings_from(event)` yields starts at that event, so the run's order is the sources'
        order by seq with each source's own findings sorted. The sources are walked in the order they were added
        (seq order, which the bundle reader enforces) without building a list of them; a graph fed out of order
        or an id twice (a test's hand-made events) falls back to sorting its findings as one list."""
        seq = self._seq
        groups = (self._decisions, self._intents, self._admissions, self._claims, self._found, self._unresolved)

        def is_source(event_id: str) -> bool:
            return any(event_id in group for group in groups)

        def one(event_id: str) -> list[Finding]:
            return sorted(self._findings_from(event_id), key=lambda f: (f.code, f.to, f.message))

        # Sources that are not events of the run (seq -1 in `findings()`'s order): findings taken on arrival
        # about an id nothing added. Rare, few, and first.
        # (`_unresolved` is keyed by events added, never outside ones.)
        outside = [e for group in groups[:-1] for e in group if e not in seq]
        if outside:
            yield from self._sorted(f for e in dict.fromkeys(outside) for f in self._findings_from(e))
        if not self._in_order:
            yield from self._sorted(f for e in seq if is_source(e) for f in self._findings_from(e))
            return
        if all(isinstance(group, dict) for group in groups):
            # Every source is listed in memory (nothing spilled): the sources that are events of the run, in seq order,
            # which for events added in seq order is the order a walk of every event meets them, without that walk.
            held: dict[str, int] = {}
            for group in groups:
                for event_id in group:
                    if event_id not in held:
                        at = seq.get(event_id)
                        if at is not None:
                            held[event_id] = at
            for event_id in sorted(held, key=held.__getitem__):
                yield from one(event_id)
            return
        for event_id in seq:
            if is_source(event_id):
                yield from one(event_id)

    def unevaluated(self) -> list[dict[str, Any]]:
        """The checks that had nothing to judge in this run: see `unevaluated_checks`."""
        without: list[str] = []
        split: dict[str, list[tuple[str, str]]] = {}
        for claim_id, claim in self._claims.items():
            if self._claim_artifacts(claim):
                continue
            spots = self._claim_spots(claim)
            if not spots:
                without.append(claim_id)
            elif len(spots) > 1:
                split[claim_id] = spots
        # Seed 000: what the replay's declared scope (adapter, segment) cannot support is not evaluated either.
        return scope_unevaluated(
            unevaluated_checks(self._kinds, self._unevaluated_claims, without, split), self._scope_note
        )

    def intent_findings(self, intent_id: str) -> list[Finding]:
        """The findings about one effect.intent: what the final policy gate must see before activating it."""
        intent = self._intents.get(intent_id)
        if intent is None:
            return []
        related: dict[str, None] = {intent_id: None}
        decisions = self._decisions_on.get(intent_id, [])
        related.update(dict.fromkeys(decisions))
        if intent.approval is not None:
            related[intent.approval] = None
        related.update(dict.fromkeys(self._executions.get(intent_id, ())))
        artifact = self._artifacts.get(intent.artifact) if intent.artifact is not None else None
        if artifact is not None:
            related[artifact.event] = None
        used = list(intent.admissions)
        for decision_id in decisions:
            used.extend(self._decisions[decision_id].inputs)
        for item in used:
            if item in self._approvals:
                related[item] = None
            admission = self._admissions.get(item)
            if admission is None:
                continue
            related[item] = None
            if admission.observation is not None:
                related[admission.observation] = None
                observation = self._observations.get(admission.observation)
                if observation is not None and observation.source is not None:
                    related[observation.source] = None
        return self._sorted(f for event_id in related for f in self._findings_from(event_id))

    def _sorted(self, found: Iterable[Finding]) -> list[Finding]:
        seq = self._seq
        return sorted(found, key=lambda f: (seq.get(f.from_, -1), f.code, f.to, f.message))

    def _findings_from(self, event_id: str) -> Iterator[Finding]:
        """The findings whose "from" is `event_id`: those decided on arrival, the dangling references, and the rules
        resolved for a decision, intent, admission or claim (n17q_engine/lineage/checks.py, `findings_from`)."""
        return _findings_from(self, event_id)

    # ------------------------------------------------------------------ what the rules of several families read

    def _source_receipt(self, admission: _Admission) -> str | None:
        observation = admission.observation
        if observation is None:
            return None
        if observation in self._receipts:
            return observation
        seen = self._observations.get(observation)
        if seen is not None and seen.source in self._receipts:
            return seen.source
        return None

    def _subject_artifact(self, subject: str | None) -> tuple[str | None, _Intent | None]:
        """The artifact a decision's subject stands for, and the intent if the subject is one."""
        if subject is None:
            return None, None
        intent = self._intents.get(subject)
        if intent is not None:
            return intent.artifact, intent
        if subject in self._artifacts:
            return subject, None
        return None, None

    def _lineage(self, workspace: str | None, cap: int) -> Iterator[tuple[str, int]]:
        """The workspace and its ancestors, each with the seq before which its history is the child's.

        An ancestor's history counts only up to the derivation of its child: what it did after the fork
        happened to another line.
        """
        seen: set[str] = set()
        while workspace is not None and workspace not in seen and len(seen) < MAX_LINEAGE_DEPTH:
            seen.add(workspace)
            yield workspace, cap
            ws = self._workspaces.get(workspace)
            if ws is None:
                return
            cap = min(cap, ws.seq)
            workspace = ws.parent

    def _failing_lineage(self, workspace: str | None, cap: int) -> Iterator[tuple[str, int]]:
        """Like `_lineage`, but only the workspace itself and the ancestors with failing receipts."""
        seen: set[str] = set()
        while workspace is not None and workspace not in seen and len(seen) < MAX_LINEAGE_DEPTH:
            seen.add(workspace)
            yield workspace, cap
            ws = self._workspaces.get(workspace)
            if ws is None:
                return
            if not ws.parent_known:
                yield from self._lineage(ws.parent, min(cap, ws.seq))
                return
            if ws.failing_ancestor is None:
                return
            workspace, fork = ws.failing_ancestor
            cap = min(cap, fork)

    def _unwaived(self, receipt_id: str, receipt: _Receipt, before: int) -> tuple[str, ...] | None:
        """The failing suites no waiver granted before `before` covers; None when the failure is waived."""
        waived = {suite for seq, suite in self._waivers.get(receipt_id, ()) if seq < before}
        if receipt.failing_suites is None or not receipt.failing_suites:
            return None if waived else receipt.suites
        missing = tuple(s for s in receipt.failing_suites if s not in waived)
        return missing or None

    def _failure_text(self, receipt_id: str, receipt: _Receipt) -> str:
        parts = []
        if receipt.failed:
            parts.append(f"{receipt.failed} failed")
        if receipt.exit_code:
            parts.append(f"exit code {receipt.exit_code}")
        parts.append(f"completion {receipt.completion}")
        return f"receipt {receipt_id} in workspace {receipt.workspace} ({', '.join(parts)})"

    def _claim_receipts(self, claim: _Claim) -> dict[str, set[str]]:
        """The receipts behind a claim's supports (a receipt, an admission's or an observation's source), each with
        the purposes an admission cited it for."""
        supported: dict[str, set[str]] = {}
        for support in claim.supports:
            receipt_id, purpose = None, None
            if support in self._receipts:
                receipt_id = support
            elif support in self._admissions:
                admission = self._admissions[support]
                receipt_id, purpose = self._source_receipt(admission), admission.purpose
            elif support in self._observations:
                source = self._observations[support].source
                receipt_id = source if source in self._receipts else None
            if receipt_id is not None:
                cited = supported.setdefault(receipt_id, set())
                if purpose:
                    cited.add(purpose)
        return supported

    def _claim_spots(self, claim: _Claim) -> list[tuple[str, str]]:
        """Where a claim that names no artifact speaks for: the distinct (workspace, tree) of the receipts behind its
        supports, a receipt's tree being the last it recorded (after, else before). A receipt with no workspace or
        no known tree says nothing about where; more than one spot is a disagreement the caller reports."""
        spots: list[tuple[str, str]] = []
        for receipt_id in self._claim_receipts(claim):
            receipt = self._receipts[receipt_id]
            trees = receipt.trees
            if receipt.workspace is not None and trees:
                spots.append((receipt.workspace, trees[-1]))
        return list(dict.fromkeys(spots))

    def _claim_artifacts(self, claim: _Claim) -> list[str]:
        """The artifacts a claim speaks for: its own `artifact_id`, and those of the admissions it cites."""
        found = [claim.artifact] if claim.artifact is not None else []
        for support in claim.supports:
            admission = self._admissions.get(support)
            if admission is not None and admission.artifact is not None:
                found.append(admission.artifact)
        return _unique(found)

    # Derived indexes (claims.py builds them), built on demand and kept until the next `add`.

    def _memo(self) -> dict[str, Any]:
        if self._memo_at != self._added:
            self._memo_store, self._memo_at = {}, self._added
        return self._memo_store


Handler = Callable[[LineageGraph, str, int, dict[str, Any]], None]
FindingsFrom = Callable[[LineageGraph, str], Iterator[Finding]]

# What each kind records. Plain functions, so a graph holds no bound methods of itself (no reference cycle: a replay's
# final gate builds one per activation in a sandbox child that runs without the cyclic GC).
_RECORDERS: dict[str, Handler] = {
    "workspace.created": LineageGraph._add_workspace,
    "workspace.changed": LineageGraph._add_change,
    "workspace.lifecycle": LineageGraph._add_lifecycle,
    "artifact.created": LineageGraph._add_artifact,
    "command.receipt": LineageGraph._add_receipt,
    "evidence.observed": LineageGraph._add_observation,
    "evidence.admitted": LineageGraph._add_admission,
    "evidence.superseded": LineageGraph._add_superseded,
    "waiver.granted": LineageGraph._add_waiver,
    "policy.decision": LineageGraph._add_decision,
    "approval.recorded": LineageGraph._add_approval,
    "effect.intent": LineageGraph._add_intent,
    "effect.execution": LineageGraph._add_execution,
    "account.claim": LineageGraph._add_claim,
}
# What `add` runs per kind: the recorder, then the arrival checks `plug_in` gave (plain functions too).
_HANDLERS: dict[str, tuple[Handler, ...]] = {kind: (recorder,) for kind, recorder in _RECORDERS.items()}


def _unplugged(graph: LineageGraph, event_id: str) -> Iterator[Finding]:
    raise RuntimeError("the lineage rules are not plugged in: import n17q_engine.lineage, whose checks module does it")


_findings_from: FindingsFrom = _unplugged


def plug_in(arrival: Mapping[str, Sequence[Handler]], findings_from: FindingsFrom) -> None:
    """Give the graph its rules (called once, by n17q_engine/lineage/checks.py, when the package is imported):
    `arrival`, per kind, the checks decided as events arrive, run in order after the kind's recorder; `findings_from`,
    the findings whose "from" is one event (what `_findings_from` answers)."""
    global _findings_from
    _HANDLERS.clear()
    for kind in dict.fromkeys([*_RECORDERS, *arrival]):
        recorder = _RECORDERS.get(kind)
        _HANDLERS[kind] = (*((recorder,) if recorder is not None else ()), *arrival.get(kind, ()))
    _findings_from = findings_from
