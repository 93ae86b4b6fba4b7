"""The lineage checker (DESIGN §4): which edges of a run's evidence graph are broken, and why.

An external effect may reference an artifact only when every required validation receipt was produced on
that artifact's workspace and tree (or an explicitly recorded compatible ancestor), no later workspace
event invalidated it, failures are resolved or waived, policy allows it, and approval binds the exact
evidence set. Each code below is one way that sentence can be false; a finding names both ends of the
broken edge and says, in one sentence, what a reviewer should do.

Shape of the work: `LineageGraph.add` is called once per validated event in `seq` order and keeps only
compact records of the fields the rules read (never the event dicts, so 100,000 events stay small), plus
id→seq maps and the references nothing answered yet. Rules that only need the past (LIN007, LIN009,
LIN010, LIN012, LIN014) are decided as events arrive; the rest are resolved when findings are asked for,
because a bundle may refer forward (DESIGN §3 imports such references and reports the dangling ones).
Every resolved rule is computed per "from" event, so `intent_findings` (the final policy gate's question,
asked before activating one intent) looks only at that intent's neighbourhood instead of the whole run.

Decisions taken where DESIGN §4 is silent (the project docs should cite this list):

- A `policy.decision` whose outcome is `deny` authorizes nothing, so the evidence and approvals it cites
  are not checked as authority (LIN001, LIN005, LIN006): the corrected gate of seed 003, denying because
  workspace one's receipt does not fit workspace two's artifact, must not itself be a finding.
- LIN001 compares the artifact's (workspace, tree) with the admission's and also with the receipt behind
  it (its workspace, and its pre- or post-run tree): an admission that merely *says* workspace two while
  its receipt ran in workspace one is the seed-003 failure in disguise. A `compatibility` record counts
  only when it cites a rule the run's policy declares (`run.compatibility_rules`, compatibility.py) and the
  recorded facts satisfy every part of it: the receipt's trees against the artifact's (and, for
  `content_equal_ancestor`, the derivations between their workspaces), the environment revision of the
  artifact's workspace, the receipt's command, `inputs_digest` and `test_isolation`. Otherwise LIN001 stands
  and names the rule and each failing part; a run that declares no rules cannot have one honoured (fail
  closed). A null post-run tree, or the converters' `unknown`, is a tree nobody knows and matches nothing.
  Evidence bound to no workspace at all (both null, e.g. a docs lookup) and artifacts built outside any
  workspace are out of LIN001's reach.
- The "artifact's lineage" (LIN003, LIN008) is its workspace plus the workspaces it was derived from,
  each ancestor only up to the moment the child was derived (what the ancestor did after the fork is not
  the child's history), plus the workspaces of the admissions used for the purpose in question. The
  latest receipt across all of them wins, so a later passing rerun in the new workspace resolves an
  ancestor's failure.
- A receipt is "for" a purpose when an observation's `scope` or an admission (admitted or rejected)
  names it for that receipt, or when the purpose is one of its suites or `validation:<suite>`.
- Waivers count only when granted before the decision (or claim) they would excuse. When a receipt's
  failing suites are known (`results.failing_suites`, or a receipt that ran a single suite), every one of
  them must be waived; when they cannot be told, any waiver naming the receipt clears it.
- LIN006 for an admission whose compatibility rule holds for the artifact in question: only invalidations
  after the admission count, because such an admission is a deliberate re-use decision taken knowing the
  ancestor was superseded. A rule that does not hold forgives nothing.
  Without compatibility, a superseded or quarantined workspace taints the admission whenever it happened.
- LIN008 with no `scope` on the claim takes the `required` list of the latest decision before the claim
  that has one (a later decision about a docs lookup with `required: []` does not erase the gate's
  requirement). A supported receipt that reports failures is itself a contradiction. A waived failure,
  or one followed by a passing rerun of the same purpose or suite on the lineage, no longer contradicts.
- LIN015 (extension): a judged claim speaks for the artifacts it names (`artifact_id`) and those of the
  admissions among its supports. A receipt on such an artifact's lineage (as above, up to the claim) that
  failed or did not complete, for the claim's scope (its purposes or suites meet the scope; with no scope,
  any receipt that speaks for a purpose or suite), contradicts it unless the claim cites it (then LIN008
  judges it as a support, and a receipt LIN008 already reported is not reported twice), a waiver covers it,
  or a completed passing rerun of the same purpose followed it on that lineage. A claim that names no
  artifact is listed under `unevaluated()` for LIN015, never passed.
- LIN009: an `evidence.observed` reading a record made before the workspace became uncertain (the
  timed-out receipt's partial output, kept for diagnosis) is not reuse of the environment.
- `intent_findings` covers the intent, the decisions whose subject it is, its approval, its executions,
  its artifact's creation, the admissions it or those decisions use, and the observations and receipts
  behind them.
- `unevaluated()` (DESIGN §10) names the codes whose inputs the run does not hold (REQUIRED_INPUTS): a run
  without workspaces cannot have LIN009 findings, and that is not the same as passing LIN009. A claim a replay
  marked `unevaluated` (it rests on a tool the scenario excludes) is neither supported nor contradicted: LIN008
  skips it and `unevaluated()` names it.
- A run whose mode is `reconstruction` and whose manifest names the run it `reconstructs` ({id,
  environment, mode}) is judged as that run: a reconstruction re-projects recorded events through today's
  checks, and the recorded run's own approval is not foreign to its own history.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from . import vocabulary as v
from .canonical import evidence_set_digest
from .compatibility import Rule, parse_rules
from .spill import MultiMap, SpilledIndex, SpilledMultiMap, spill_index, spill_multimap

CODES: dict[str, str] = {
    "LIN001": "evidence from another lineage",
    "LIN002": "partial evidence used as completed",
    "LIN003": "unresolved failure",
    "LIN004": "approval does not bind the evidence",
    "LIN005": "foreign approval",
    "LIN006": "stale evidence",
    "LIN007": "replay effect outside its namespace",
    "LIN008": "unsupported claim",
    "LIN009": "uncertain workspace reused",
    "LIN010": "inherited edit absorbed",
    "LIN011": "dangling reference",
    "LIN012": "duplicate consequence",
    "LIN013": "required evidence missing",
    # Extension (seed 000): a replay whose fixture adapter fetched from the present on a miss.
    "LIN014": "live observation in a non-live run",
    # Extension (seed 003): a claim that leaves out the failed or unfinished receipt on its artifact's lineage.
    "LIN015": "claim contradicted on the artifact lineage",
}

# What each finding means, for the glossary page and wherever a code is shown (a finding names its own ends).
EXPLANATIONS: dict[str, str] = {
    "LIN001": "An admission used by a decision or an intent was made in a workspace, or on a tree, other than the "
    "artifact's, and no compatibility rule the run's policy declares holds for it: a test receipt from one workspace "
    "is authorizing an artifact from another. A cited rule counts only when the recorded facts satisfy every part "
    "it constrains (tree, environment, command, inputs, test isolation); the finding names the part that failed.",
    "LIN002": "The admitted source is a receipt whose completion is not completed (partial, cancelled, "
    "interrupted, unknown), used for a validation purpose as if the run had finished.",
    "LIN003": "An intent was allowed while the latest receipt for a required purpose on the artifact's lineage "
    "had failures, and no waiver covers them.",
    "LIN004": "The approval's evidence-set digest differs from the intent's, or it approves another subject: what "
    "was approved is not what is being done.",
    "LIN005": "An approval from another run or environment (a historical approval in a replay) is used as "
    "authority here.",
    "LIN006": "An admission is used after its workspace was superseded or quarantined, or its tree changed.",
    "LIN007": "An intent in a run that is not live has namespace live, or was executed on a live connection: "
    "a replay reached the outside world.",
    "LIN008": "A validation or completion claim whose supports are not completed receipts covering the required "
    "scope, or that a failed receipt contradicts.",
    "LIN009": "A workspace left uncertain (or with a termination of unknown outcome) is used later without a "
    "cleanup receipt.",
    "LIN010": "An artifact includes files of its workspace's initial overlay: an edit inherited from before the "
    "attempt is presented as the attempt's work.",
    "LIN011": "An event refers to an id the run does not hold (a warning: an export may have left it out).",
    "LIN012": "More than one acknowledged execution for one intent, or two intents for one idempotency key: the "
    "consequence happened twice.",
    "LIN013": "A decision allowed an intent although a purpose in its required list has no admitted evidence "
    "for the intent's artifact.",
    "LIN014": "A tool result with origin live in a run that is not live: a replay fetched from the present "
    "instead of stopping on a missing fixture.",
    "LIN015": "A validation or completion claim about an artifact leaves out a failed or unfinished receipt for the "
    "claimed scope on that artifact's lineage (neither cited, waived nor followed by a passing rerun): the account "
    "reads green while the artifact's own history says otherwise.",
}

# A dangling reference is worth investigating but may be an export that left something out; every
# other finding is a broken authority edge.
WARNING_CODES = frozenset({"LIN011"})

# What each code reads (DESIGN §10, "unevaluated"): per code, groups of event kinds; the run must hold at least one
# event of every group for the check to have had anything to judge. LIN011 reads every reference: always evaluated.
REQUIRED_INPUTS: dict[str, tuple[tuple[str, ...], ...]] = {
    "LIN001": (("evidence.admitted",), ("policy.decision", "effect.intent"), ("artifact.created",)),
    "LIN002": (("evidence.admitted",), ("command.receipt",)),
    "LIN003": (("effect.intent",), ("policy.decision",), ("command.receipt",)),
    "LIN004": (("approval.recorded",), ("effect.intent",)),
    "LIN005": (("approval.recorded",),),
    "LIN006": (("evidence.admitted",), ("workspace.created",)),
    "LIN007": (("effect.intent", "effect.execution"),),
    "LIN008": (("account.claim",),),
    "LIN009": (("workspace.created",),),
    "LIN010": (("artifact.created",), ("workspace.created",)),
    "LIN012": (("effect.intent", "effect.execution"),),
    "LIN013": (("policy.decision",), ("effect.intent",)),
    "LIN014": (("tool.result",),),
    "LIN015": (("account.claim",), ("artifact.created",), ("command.receipt",)),
}
_INPUT_WORDS = {
    "evidence.admitted": "evidence admissions",
    "policy.decision": "policy decisions",
    "effect.intent": "effect intents",
    "effect.execution": "effect executions",
    "artifact.created": "artifacts",
    "command.receipt": "command receipts",
    "approval.recorded": "approvals",
    "workspace.created": "workspaces",
    "account.claim": "validation or completion claims",
    "tool.result": "tool results",
}

LIVE_ENVIRONMENTS = frozenset({"live", "effect-capable"})
# Connections an effect of a non-live run may use: anything else is assumed to reach the real world.
CONTAINED_CONNECTIONS = ("fixture:", "sim:", "replay:")
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


@dataclass(slots=True)
class _Decision:
    seq: int
    subject: str | None
    inputs: tuple[str, ...]
    required: tuple[str, ...]
    outcome: str | None


@dataclass(slots=True)
class _Approval:
    seq: int
    subject: str | None
    digest: str | None
    decision: str | None
    origin: str | None
    run: str | None
    environment: str | None


@dataclass(slots=True)
class _Intent:
    seq: int
    artifact: str | None
    admissions: tuple[str, ...]
    approval: str | None


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


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _join(items: Iterable[str]) -> str:
    return ", ".join(items)


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
        self._first_key: dict[str, str] = {}
        self._executions: dict[str, list[str]] = {}  # intent -> execution ids
        self._first_ack: dict[str, str] = {}
        self._claims: dict[str, _Claim] = {}
        # Claims a replay left unevaluated (they rest on an excluded tool): claim id -> the tools.
        self._unevaluated_claims: dict[str, tuple[str, ...]] = {}
        self._kinds: dict[str, int] = {}  # kind -> events of it: what the checks had to judge
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
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, event_id, seq, event)

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

    def _use_workspace(
        self, event_id: str, workspace: str | None, what: str, *, source_seq: int | None = None, link: str | None = None
    ) -> None:
        if workspace is None:
            return
        marked = self._uncertain.get(workspace)
        if marked is None:
            return
        cause, cause_seq, why = marked
        if source_seq is not None and source_seq <= cause_seq:
            return
        self._emit(
            _finding(
                "LIN009",
                event_id,
                cause,
                f"{what} {event_id} uses workspace {workspace} after {cause} left it {why}, with no cleanup receipt "
                f"recorded in between; quarantine and clean it up, or continue in a fresh workspace.",
            )
        )
        self._reused.setdefault(workspace, []).append((event_id, link))

    def _cleaned(self, workspace: str, cleanup: str) -> None:
        """A cleanup receipt clears the workspace; the cleanup's own work on it was not reuse."""
        self._uncertain.pop(workspace, None)
        reused = self._reused.pop(workspace, [])
        links = dict(reused)
        exempt = {cleanup}
        call = links.get(cleanup)
        if call is not None:
            exempt.add(call)  # the call that ran the cleanup command
        for event_id, link in reused:
            if event_id in exempt or link == cleanup:
                kept = [f for f in self._found.get(event_id, ()) if f.code != "LIN009"]
                if kept:
                    self._found[event_id] = kept
                else:
                    self._found.pop(event_id, None)

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
        if relation == "copy" and parent is not None:
            marked = self._uncertain.get(parent)
            if marked is not None:
                self._emit(
                    _finding(
                        "LIN009",
                        event_id,
                        marked[0],
                        f"Workspace {workspace} ({event_id}) was copied from workspace {parent} after {marked[0]} "
                        f"left it {marked[2]}, with no cleanup receipt in between; reconstruct it from a clean "
                        "snapshot instead.",
                    )
                )
        for artifact_event, files in self._awaiting_overlay.pop(workspace, ()):
            self._check_overlay(artifact_event, workspace, files)

    def _add_change(self, event_id: str, seq: int, event: dict) -> None:
        workspace = _str(event.get("workspace_id"))
        if workspace is None:
            return
        self._use_workspace(event_id, workspace, "Change", link=_str(event.get("cause")))
        self._changes.setdefault(workspace, []).append((seq, event_id, _str(event.get("tree_digest")) or ""))

    def _add_lifecycle(self, event_id: str, seq: int, event: dict) -> None:
        workspace = _str(event.get("workspace_id"))
        if workspace is None:
            return
        state = event.get("state")
        if state in INVALIDATING_STATES:
            self._dead.setdefault(workspace, []).append((seq, event_id, state))
        cleanup = _str(event.get("cleanup_receipt_id"))
        if cleanup is not None:
            self._cleaned(workspace, cleanup)
        if state == "uncertain":
            self._uncertain.setdefault(workspace, (event_id, seq, "uncertain"))

    def _add_artifact(self, event_id: str, seq: int, event: dict) -> None:
        artifact = _str(event.get("artifact_id"))
        workspace = _str(event.get("workspace_id"))
        if artifact is not None:
            self._artifacts[artifact] = _Artifact(event_id, seq, workspace, _str(event.get("tree_digest")))
        self._use_workspace(event_id, workspace, "Artifact")
        if workspace is None:
            return
        files = tuple(_path(p) for p in _strs(event.get("files")))
        if workspace in self._workspaces:
            self._check_overlay(event_id, workspace, files)
        elif files:
            self._awaiting_overlay.setdefault(workspace, []).append((event_id, files))

    def _check_overlay(self, artifact_event: str, workspace: str, files: tuple[str, ...]) -> None:
        ws = self._workspaces[workspace]
        absorbed = _unique(p for p in files if p in ws.overlay)
        if absorbed:
            self._emit(
                _finding(
                    "LIN010",
                    artifact_event,
                    ws.event,
                    f"Artifact {artifact_event} includes {_join(absorbed)}, which workspace {workspace}'s initial "
                    f"overlay already changed (an inherited edit the agent does not own); drop it from the artifact.",
                )
            )

    def _add_tool_call(self, event_id: str, seq: int, event: dict) -> None:
        self._use_workspace(event_id, _str(event.get("workspace_id")), "Tool call")

    def _add_tool_result(self, event_id: str, seq: int, event: dict) -> None:
        if event.get("origin") == "live" and not self.live:
            call = _str(event.get("call_id")) or event_id
            self._emit(
                _finding(
                    "LIN014",
                    event_id,
                    call,
                    f"Result {event_id} of call {call} came from a live source in a {self.mode} run in environment "
                    f"{self.environment}: a replay must answer from fixtures and stop on a miss.",
                )
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
        self._use_workspace(event_id, workspace, "Receipt", link=_str(event.get("call_id")))
        self._receipts[event_id] = receipt
        if workspace is not None:
            self._file(workspace, _ANY_PURPOSE, seq, event_id)
            if receipt.has_failures:
                self._failing.setdefault(workspace, []).append((seq, event_id))
            if receipt.has_failures or receipt.incomplete:
                self._unsettled.setdefault(workspace, []).append((seq, event_id))
            if receipt.completion == "termination_unknown":
                self._uncertain.setdefault(workspace, (event_id, seq, "with an unknown termination"))
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
        source_seq = self._seq.get(source) if source is not None else None
        self._use_workspace(
            event_id,
            _str(event.get("workspace_id")),
            "Observation",
            source_seq=source_seq if source_seq is not None and source_seq < seq else None,
        )
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
            seq, subject, _strs(event.get("input_ids")), required, _str(event.get("outcome"))
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
        )

    def _add_intent(self, event_id: str, seq: int, event: dict) -> None:
        self._intents[event_id] = _Intent(
            seq, _str(event.get("artifact_id")), _strs(event.get("admission_ids")), _str(event.get("approval_id"))
        )
        if event.get("namespace") == "live" and not self.live:
            self._emit(
                _finding(
                    "LIN007",
                    event_id,
                    event_id,
                    f"Intent {event_id} targets the live namespace in a {self.mode} run in environment "
                    f"{self.environment}; effects of a non-live run must stay in a replay:<world> namespace.",
                )
            )
        key = event.get("idempotency_key")
        if isinstance(key, str):
            first = self._first_key.setdefault(key, event_id)
            if first != event_id:
                self._emit(
                    _finding(
                        "LIN012",
                        event_id,
                        first,
                        f"Intent {event_id} reuses idempotency key {key} of intent {first}: one key must name one "
                        f"consequence, so retry the first intent instead of declaring a second.",
                    )
                )

    def _add_execution(self, event_id: str, seq: int, event: dict) -> None:
        intent = _str(event.get("intent_id"))
        if intent is not None:
            self._executions.setdefault(intent, []).append(event_id)
        connection = event.get("connection")
        if not self.live and isinstance(connection, str) and not connection.startswith(CONTAINED_CONNECTIONS):
            self._emit(
                _finding(
                    "LIN007",
                    event_id,
                    intent or event_id,
                    f"Execution {event_id} of intent {intent} went out on connection {connection}, which is not a "
                    f"fixture:, sim: or replay: connection, in a {self.mode} run in environment {self.environment}.",
                )
            )
        if intent is not None and event.get("outcome") == "acknowledged":
            first = self._first_ack.setdefault(intent, event_id)
            if first != event_id:
                self._emit(
                    _finding(
                        "LIN012",
                        event_id,
                        first,
                        f"Execution {event_id} is a second acknowledged execution of intent {intent} (the first was "
                        f"{first}): the consequence happened twice.",
                    )
                )

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
        for event_id in seq:
            if is_source(event_id):
                yield from one(event_id)

    def unevaluated(self) -> list[dict[str, Any]]:
        """The checks that had nothing to judge in this run: see `unevaluated_checks`."""
        without = [claim_id for claim_id, claim in self._claims.items() if not self._claim_artifacts(claim)]
        return unevaluated_checks(self._kinds, self._unevaluated_claims, without)

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
        yield from self._found.get(event_id, ())
        for path, target in self._unresolved.get(event_id, ()):
            if target not in self._objects and target not in self._seq:
                yield _finding(
                    "LIN011",
                    event_id,
                    target,
                    f"Event {event_id} refers at {path} to {target}, which this run does not hold; find the "
                    f"missing event or treat the edge as broken.",
                )
        decision = self._decisions.get(event_id)
        if decision is not None:
            yield from self._check_decision(event_id, decision)
            return
        intent = self._intents.get(event_id)
        if intent is not None:
            yield from self._check_intent(event_id, intent)
            return
        admission = self._admissions.get(event_id)
        if admission is not None:
            yield from self._check_admission(event_id, admission)
            return
        claim = self._claims.get(event_id)
        if claim is not None:
            yield from self._check_claim(event_id, claim)

    # ------------------------------------------------------------------ resolved rules

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

    def _check_admission(self, admission_id: str, admission: _Admission) -> Iterator[Finding]:
        if not (admission.admitted and admission.purpose.startswith(VALIDATION_PREFIX)):
            return
        receipt_id = self._source_receipt(admission)
        if receipt_id is None:
            return
        receipt = self._receipts[receipt_id]
        if receipt.completion != "completed":
            yield _finding(
                "LIN002",
                admission_id,
                receipt_id,
                f"Admission {admission_id} counts receipt {receipt_id} (completion {receipt.completion}, "
                f"workspace {receipt.workspace}) as completed evidence for {admission.purpose}; rerun the "
                f"suite to completion or admit the output for diagnosis only.",
            )

    def _check_decision(self, decision_id: str, decision: _Decision) -> Iterator[Finding]:
        if decision.outcome == "deny":
            return
        artifact_id, intent = self._subject_artifact(decision.subject)
        artifact = self._artifacts.get(artifact_id) if artifact_id is not None else None
        what = f"Decision {decision_id}"
        for input_id in _unique(decision.inputs):
            admission = self._admissions.get(input_id)
            if admission is not None:
                unmet = self._rule_unmet(admission, artifact_id, artifact)
                if artifact is not None:
                    yield from self._check_lineage(what, decision_id, input_id, admission, artifact_id, artifact, unmet)
                yield from self._check_fresh(what, decision_id, decision.seq, input_id, admission, unmet is None)
            approval = self._approvals.get(input_id)
            if approval is not None:
                yield from self._check_foreign(what, decision_id, input_id, approval)
        if decision.outcome != "allow" or artifact_id is None:
            return
        subject = decision.subject or artifact_id
        used = [
            self._admissions[a]
            for a in _unique(decision.inputs + (intent.admissions if intent else ()))
            if a in self._admissions
        ]
        for purpose in decision.required:
            if not any(a.admitted and a.purpose == purpose and a.artifact == artifact_id for a in used):
                yield _finding(
                    "LIN013",
                    decision_id,
                    subject,
                    f"Decision {decision_id} allowed {subject} without any admitted {purpose} evidence for "
                    f"artifact {artifact_id}; admit a receipt for that purpose from the artifact's own workspace "
                    f"and tree, or deny.",
                )
            if artifact is not None:
                yield from self._check_failures(decision_id, decision, subject, artifact_id, artifact, purpose, used)

    def _check_intent(self, intent_id: str, intent: _Intent) -> Iterator[Finding]:
        artifact = self._artifacts.get(intent.artifact) if intent.artifact is not None else None
        what = f"Intent {intent_id}"
        for admission_id in _unique(intent.admissions):
            admission = self._admissions.get(admission_id)
            if admission is None:
                continue
            unmet = self._rule_unmet(admission, intent.artifact, artifact)
            if artifact is not None:
                yield from self._check_lineage(
                    what, intent_id, admission_id, admission, intent.artifact, artifact, unmet
                )
            yield from self._check_fresh(what, intent_id, intent.seq, admission_id, admission, unmet is None)
        approval_id = intent.approval
        if approval_id is None or (approval_id not in self._approvals and approval_id not in self._seq):
            return  # no approval claimed, or a dangling one (LIN011)
        approval = self._approvals.get(approval_id)
        if approval is None:
            yield _finding(
                "LIN004",
                intent_id,
                approval_id,
                f"Intent {intent_id} names {approval_id} as its approval, but that event is not an "
                f"approval.recorded; record an approval of the intent's exact evidence set.",
            )
            return
        if approval.decision == "rejected":
            yield _finding(
                "LIN004",
                intent_id,
                approval_id,
                f"Intent {intent_id} names approval {approval_id}, which rejected it, as its authority; "
                f"an approval that says no cannot release the effect.",
            )
        if approval.subject != intent_id:
            yield _finding(
                "LIN004",
                intent_id,
                approval_id,
                f"Approval {approval_id} approves {approval.subject}, not intent {intent_id}; record an approval "
                f"whose subject is {intent_id}.",
            )
        expected = evidence_set_digest(intent.admissions)
        if approval.digest != expected:
            yield _finding(
                "LIN004",
                intent_id,
                approval_id,
                f"Approval {approval_id} binds evidence set {approval.digest}, but intent {intent_id}'s "
                f"admissions [{_join(sorted(intent.admissions))}] hash to {expected}; the reviewer approved "
                f"different evidence, so ask for a new approval.",
            )
        yield from self._check_foreign(what, intent_id, approval_id, approval)

    def _check_lineage(
        self,
        what: str,
        user: str,
        admission_id: str,
        admission: _Admission,
        artifact_id: str | None,
        artifact: _Artifact,
        unmet: str | None,
    ) -> Iterator[Finding]:
        """LIN001. `unmet` is `_rule_unmet`'s answer: None when a cited compatibility rule holds."""
        if unmet is None or (artifact.workspace is None and artifact.tree is None):
            return
        built = f"artifact {artifact_id} was built in workspace {artifact.workspace} at tree {artifact.tree}"
        reason = unmet
        if admission.rule:
            advice = "rerun the validation there, or cite a declared rule whose recorded facts hold"
        else:
            advice = "rerun the validation there or record the compatibility rule that makes the evidence reusable"
        if (admission.workspace is not None or admission.tree is not None) and (
            admission.workspace != artifact.workspace or admission.tree != artifact.tree
        ):
            if admission.tree == artifact.tree:
                # Seed 003: byte equality at one snapshot hid a different evidence history.
                built = (
                    f"artifact {artifact_id} was built in workspace {artifact.workspace}: the same tree under a "
                    f"new workspace identity, with its own history"
                )
            yield _finding(
                "LIN001",
                user,
                admission_id,
                f"{what} relies on admission {admission_id} ({admission.purpose or 'no purpose'}) from workspace "
                f"{admission.workspace} at tree {admission.tree}, but {built}, and {reason}; {advice}.",
            )
            return
        receipt_id = self._source_receipt(admission)
        if receipt_id is None:
            return
        receipt = self._receipts[receipt_id]
        if receipt.workspace != artifact.workspace or artifact.tree not in receipt.trees:
            yield _finding(
                "LIN001",
                user,
                admission_id,
                f"{what} relies on admission {admission_id} ({admission.purpose or 'no purpose'}), whose receipt "
                f"{receipt_id} ran in workspace {receipt.workspace} at tree {receipt.pre_tree}, but {built}, and "
                f"{reason}; {advice}.",
            )

    def _rule_unmet(self, admission: _Admission, artifact_id: str | None, artifact: _Artifact | None) -> str | None:
        """Why the admission's compatibility record does not make it evidence for the artifact (LIN001's reason, naming
        the rule and each failing part), or None when it cites a rule the run declares whose facts all hold.

        Fail closed: no record, a record naming no rule, a rule the policy does not declare, no command receipt
        behind the admission, or an artifact whose facts are not recorded all leave the rule unmet."""
        if admission.rule is None:
            return "no compatibility rule is recorded"
        if not admission.rule:
            return "its compatibility record names no rule"
        name = admission.rule
        rule = self.rules.get(name)
        if rule is None:
            declared = _join(sorted(self.rules)) if self.rules else None
            said = f"it declares only {declared}" if declared else "it declares no compatibility rules"
            return f"the cited compatibility rule {name} is not declared by the run's policy ({said})"
        receipt_id = self._source_receipt(admission)
        if receipt_id is None:
            return (
                f"compatibility rule {name} cannot be checked: the admitted evidence is not a command receipt this "
                "run holds"
            )
        if artifact is None:
            return f"compatibility rule {name} cannot be checked: artifact {artifact_id} is not recorded"
        receipt = self._receipts[receipt_id]
        parts = [self._tree_unmet(rule, receipt_id, receipt, artifact_id, artifact)]
        if rule.environment == "same":
            ws = self._workspaces.get(artifact.workspace) if artifact.workspace is not None else None
            if ws is None or ws.environment is None:
                parts.append(
                    f"environment: workspace {artifact.workspace}'s environment revision is not recorded, so "
                    f"receipt {receipt_id}'s ({receipt.environment}) cannot be shown to be the same"
                )
            elif receipt.environment != ws.environment:
                parts.append(
                    f"environment: receipt {receipt_id} ran in environment {receipt.environment}, workspace "
                    f"{artifact.workspace} has {ws.environment}"
                )
        for part, accepted, recorded, word in (
            ("command", rule.command, receipt.command, "command"),
            ("inputs", rule.inputs, receipt.inputs_digest, "inputs_digest"),
            ("test isolation", rule.test_isolation, receipt.test_isolation, "test_isolation"),
        ):
            if accepted is None:
                continue
            if recorded is None:
                parts.append(f"{part}: receipt {receipt_id} records no {word}")
            elif recorded not in accepted:
                parts.append(f"{part}: receipt {receipt_id} has {word} {recorded!r}, which the rule does not accept")
        failed = [p for p in parts if p]
        if not failed:
            return None
        return f"the cited compatibility rule {name} does not hold ({'; '.join(failed)})"

    def _tree_unmet(
        self, rule: Rule, receipt_id: str, receipt: _Receipt, artifact_id: str | None, artifact: _Artifact
    ) -> str:
        """The tree part of a rule: "" when it holds, else why not."""
        if artifact.tree is None or artifact.tree == UNKNOWN_TREE:
            return f"tree: artifact {artifact_id}'s tree is not recorded"
        if artifact.tree not in receipt.trees:
            ran = _join(_unique(receipt.trees)) or "an unknown tree"
            return f"tree: receipt {receipt_id} ran at {ran}, artifact {artifact_id} is at {artifact.tree}"
        if rule.tree != "content_equal_ancestor":
            return ""
        # The receipt's workspace must be the artifact's, or an ancestor on its recorded derivations, each one
        # content-equal, and the receipt must be part of the history the artifact's workspace inherited.
        workspace = artifact.workspace
        seen: set[str] = set()
        cap = artifact.seq
        while workspace is not None and workspace not in seen and len(seen) < MAX_LINEAGE_DEPTH:
            seen.add(workspace)
            if workspace == receipt.workspace:
                if receipt.seq < cap:
                    return ""
                return (
                    f"tree: receipt {receipt_id} ran in workspace {workspace} after workspace "
                    f"{artifact.workspace}'s line was derived from it"
                )
            ws = self._workspaces.get(workspace)
            if ws is None or ws.parent is None:
                break
            if not ws.content_equal:
                return (
                    f"tree: workspace {workspace} was derived from {ws.parent} without content_equal recorded, so "
                    f"receipt {receipt_id}'s workspace {receipt.workspace} is no content-equal ancestor of "
                    f"artifact {artifact_id}'s"
                )
            cap = min(cap, ws.seq)
            workspace = ws.parent
        return (
            f"tree: receipt {receipt_id}'s workspace {receipt.workspace} is no recorded ancestor of workspace "
            f"{artifact.workspace}, where artifact {artifact_id} was built"
        )

    def _check_fresh(
        self, what: str, user: str, used_at: int, admission_id: str, admission: _Admission, compatible: bool
    ) -> Iterator[Finding]:
        """LIN006: the earliest event before `used_at` that invalidated the admission, if any. `compatible`: the
        admission cites a compatibility rule that holds for the artifact in question (`_rule_unmet`)."""
        causes: list[tuple[int, str, str]] = []
        for seq, event_id in self._superseded.get(admission_id, ()):
            if seq < used_at:
                causes.append((seq, event_id, f"{event_id} superseded it"))
                break
        workspace = admission.workspace
        if workspace is not None:
            dead = self._dead.get(workspace, ())
            start = bisect_right(dead, (admission.seq, "\uffff")) if compatible else 0
            for seq, event_id, state in dead[start:]:
                if seq < used_at:
                    causes.append((seq, event_id, f"{event_id} marked workspace {workspace} {state}"))
                break
            changes = self._changes.get(workspace, ())
            for seq, event_id, tree in changes[bisect_right(changes, (admission.seq, "\uffff")) :]:
                if seq >= used_at:
                    break
                if tree != admission.tree:
                    causes.append((seq, event_id, f"{event_id} changed workspace {workspace} to tree {tree}"))
                    break
        if causes:
            _seq, _event, cause = min(causes)
            yield _finding(
                "LIN006",
                user,
                admission_id,
                f"{what} uses admission {admission_id} ({admission.purpose or 'no purpose'}) after {cause}; "
                f"the evidence no longer describes the workspace, so validate again.",
            )

    def _check_foreign(self, what: str, user: str, approval_id: str, approval: _Approval) -> Iterator[Finding]:
        reasons = []
        if self.run_id is not None and approval.run != self.run_id:
            reasons.append(f"recorded in run {approval.run} (this is {self.run_id})")
        if self.environment is not None and approval.environment != self.environment:
            reasons.append(f"given in environment {approval.environment} (this run is {self.environment})")
        if approval.origin == "historical" and self.mode != "recorded":
            reasons.append(f"historical, in a {self.mode} replay")
        if reasons:
            yield _finding(
                "LIN005",
                user,
                approval_id,
                f"{what} takes its authority from approval {approval_id}: {'; '.join(reasons)}. Historical "
                "approvals are read-only evidence; ask for an approval in this run.",
            )

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

    def _latest(self, starts: Iterable[str | None], cap: int, purpose: str) -> tuple[int, str] | None:
        """The latest (seq, receipt) for `purpose` before `cap` on the lineages of the `starts`."""
        latest: tuple[int, str] | None = None
        for start in _unique(s for s in starts if s is not None):
            for workspace, until in self._lineage(start, cap):
                if latest is not None and until <= latest[0]:
                    break  # caps only shrink going back: no older ancestor can hold a later receipt
                entries = self._by_purpose.get((workspace, purpose))
                if entries:
                    i = bisect_left(entries, (until,))
                    if i and (latest is None or entries[i - 1] > latest):
                        latest = entries[i - 1]
        return latest

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

    def _check_failures(
        self,
        decision_id: str,
        decision: _Decision,
        subject: str,
        artifact_id: str,
        artifact: _Artifact,
        purpose: str,
        used: list[_Admission],
    ) -> Iterator[Finding]:
        starts = [artifact.workspace, *(a.workspace for a in used if a.purpose == purpose)]
        latest = self._latest(starts, decision.seq, purpose)
        if latest is None:
            return
        receipt_id = latest[1]
        receipt = self._receipts[receipt_id]
        if not receipt.has_failures:
            return
        unwaived = self._unwaived(receipt_id, receipt, decision.seq)
        if unwaived is None:
            return
        suites = f" in {_join(unwaived)}" if unwaived else ""
        yield _finding(
            "LIN003",
            decision_id,
            receipt_id,
            f"Decision {decision_id} allowed {subject} although the latest {purpose} receipt on the lineage of "
            f"artifact {artifact_id}, {self._failure_text(receipt_id, receipt)}, has failures{suites} that no "
            f"waiver covers; fix and rerun, or record a waiver.",
        )

    def _claim_scope(self, claim: _Claim) -> tuple[str, ...]:
        if claim.scope is not None:
            return claim.scope
        i = bisect_left(self._requirements, (claim.seq,))
        if i == 0:
            return ()
        return self._decisions[self._requirements[i - 1][1]].required

    def _claim_supports(self, claim: _Claim) -> tuple[dict[str, set[str]], list[str]]:
        """The receipts behind a claim's supports (with the purposes they were cited for), and their workspaces."""
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
        starts = _unique(w for w in (self._receipts[r].workspace for r in supported) if w is not None)
        return supported, starts

    def _check_claim(self, claim_id: str, claim: _Claim) -> Iterator[Finding]:
        supported, starts = self._claim_supports(claim)
        label = f"Claim {claim_id} ({claim.kind})"
        if not supported:
            yield _finding(
                "LIN008",
                claim_id,
                claim_id,
                f"{label} cites no command receipt; link it to the completed receipts that support it, or "
                f"narrow it to what the evidence shows.",
            )
            yield from self._check_claim_artifacts(claim_id, claim, label, self._claim_scope(claim), set())
            return
        reported: set[str] = set()
        covered: set[str] = set()
        for receipt_id, cited in supported.items():
            receipt = self._receipts[receipt_id]
            if receipt.completion != "completed":
                reported.add(receipt_id)
                yield _finding(
                    "LIN008",
                    claim_id,
                    receipt_id,
                    f"{label} rests on receipt {receipt_id}, whose completion is {receipt.completion}, not "
                    f"completed; partial output cannot support it.",
                )
            elif receipt.has_failures and self._unwaived(receipt_id, receipt, claim.seq) is not None:
                reported.add(receipt_id)
                yield _finding(
                    "LIN008",
                    claim_id,
                    receipt_id,
                    f"{label} rests on {self._failure_text(receipt_id, receipt)}, which reports failures.",
                )
            else:
                covered.update(cited, receipt.suites, self._purposes.get(receipt_id, ()))
        scope = self._claim_scope(claim)
        for item in scope:
            if item not in covered:
                yield _finding(
                    "LIN008",
                    claim_id,
                    claim_id,
                    f"{label} speaks for {item}, but none of its supports is a completed, passing receipt for "
                    f"it; narrow the claim or run {item} to completion.",
                )
        lineage: dict[tuple[str, int], None] | None = None  # the full one, only if a failure needs it
        for receipt_id in self._open_failures().get(claim_id, ()):
            if receipt_id in reported:
                continue
            receipt = self._receipts[receipt_id]
            speaks_for = self._purposes.get(receipt_id, set()).union(receipt.suites)
            if scope and speaks_for and speaks_for.isdisjoint(scope):
                continue  # a failure outside the claim's scope: the claim was narrowed around it
            if self._unwaived(receipt_id, receipt, claim.seq) is None:
                continue
            if lineage is None:
                lineage = {}
                for start in starts:
                    lineage.update(dict.fromkeys(self._lineage(start, claim.seq)))
            if self._rerun(receipt_id, receipt, lineage):
                continue
            reported.add(receipt_id)
            yield _finding(
                "LIN008",
                claim_id,
                receipt_id,
                f"{label} is contradicted by {self._failure_text(receipt_id, receipt)}, which reports failures "
                f"that were neither waived nor followed by a passing rerun before the claim.",
            )
        yield from self._check_claim_artifacts(claim_id, claim, label, scope, supported.keys() | reported)

    def _claim_artifacts(self, claim: _Claim) -> list[str]:
        """The artifacts a claim speaks for: its own `artifact_id`, and those of the admissions it cites."""
        found = [claim.artifact] if claim.artifact is not None else []
        for support in claim.supports:
            admission = self._admissions.get(support)
            if admission is not None and admission.artifact is not None:
                found.append(admission.artifact)
        return _unique(found)

    def _check_claim_artifacts(
        self, claim_id: str, claim: _Claim, label: str, scope: tuple[str, ...], skip: set[str]
    ) -> Iterator[Finding]:
        """LIN015: a failed or unfinished receipt for the claim's scope on its artifact's lineage that the claim does
        not cite (a cited one is LIN008's to judge, `skip`), neither waived nor rerun with success before the claim."""
        candidates = [r for r in _unique(self._open_on_artifacts().get(claim_id, ())) if r not in skip]
        if not candidates:
            return
        for artifact_id in self._claim_artifacts(claim):
            artifact = self._artifacts.get(artifact_id)
            if artifact is None:
                continue
            spots = dict.fromkeys(self._lineage(artifact.workspace, claim.seq))
            caps = dict(spots.keys())
            for receipt_id in candidates:
                if receipt_id in skip:
                    continue
                receipt = self._receipts[receipt_id]
                cap = caps.get(receipt.workspace) if receipt.workspace is not None else None
                if cap is None or receipt.seq >= cap:
                    continue  # not on this artifact's lineage (another artifact of the claim's, perhaps)
                speaks_for = self._purposes.get(receipt_id, set()).union(receipt.suites)
                if not speaks_for or (scope and speaks_for.isdisjoint(scope)):
                    continue  # not a validation of the claimed scope (an unfinished `ls` contradicts nothing)
                if self._unwaived(receipt_id, receipt, claim.seq) is None or self._rerun(receipt_id, receipt, spots):
                    continue
                skip.add(receipt_id)
                what = "reports failures" if receipt.has_failures else "did not complete"
                within = f" for {_join(sorted(speaks_for.intersection(scope)))}" if scope else ""
                yield _finding(
                    "LIN015",
                    claim_id,
                    receipt_id,
                    f"{label} speaks for artifact {artifact_id}, but {self._failure_text(receipt_id, receipt)} on "
                    f"its lineage{within} {what}, and the claim neither cites it nor was it waived or followed by a "
                    f"passing rerun; cite it and narrow the claim, or rerun to completion.",
                )

    # Derived indexes, built on demand and kept until the next `add`.

    def _memo(self) -> dict[str, Any]:
        if self._memo_at != self._added:
            self._memo_store, self._memo_at = {}, self._added
        return self._memo_store

    def _passing_after(self, workspace: str, key: str, seq: int) -> int | None:
        """The seq of the first completed, passing receipt filed under (workspace, key) after `seq`."""
        entries = self._by_purpose.get((workspace, key))
        if not entries:
            return None
        memo = self._memo().setdefault("passing", {})
        following = memo.get((workspace, key))
        if following is None:
            following = [None] * (len(entries) + 1)
            nearest = None
            for i in range(len(entries) - 1, -1, -1):
                receipt = self._receipts[entries[i][1]]
                if receipt.completion == "completed" and not receipt.has_failures:
                    nearest = entries[i][0]
                following[i] = nearest
            memo[(workspace, key)] = following
        return following[bisect_right(entries, (seq, "\uffff"))]

    def _waived_at(self, receipt_id: str, receipt: _Receipt) -> int | None:
        """The seq from which waivers cover every failing suite of the receipt (see `_unwaived`)."""
        waivers = self._waivers.get(receipt_id)
        if not waivers:
            return None
        if not receipt.failing_suites:
            return min(seq for seq, _suite in waivers)
        first: dict[str, int] = {}
        for seq, suite in waivers:
            first[suite] = min(seq, first.get(suite, seq))
        if any(suite not in first for suite in receipt.failing_suites):
            return None
        return max(first[suite] for suite in receipt.failing_suites)

    def _open_failures(self) -> dict[str, list[str]]:
        """claim id -> the failing receipts on its lineage that its own workspace had not resolved by then.

        One sweep per workspace over its failures (opened at their seq, closed by a full waiver or by the first
        passing rerun of the same purpose or suite there) and the claims that look at it, so the cost follows
        the failures still open rather than every failure times every claim. The claim check then applies the
        exact tests (waivers up to the claim, reruns anywhere on its lineage) to these few.
        """
        memo = self._memo()
        index = memo.get("open")
        if index is not None:
            return index
        queries: dict[str, list[tuple[int, str]]] = {}
        for claim_id, claim in self._claims.items():
            for start in self._claim_supports(claim)[1]:
                for workspace, cap in self._failing_lineage(start, claim.seq):
                    if self._failing.get(workspace):
                        queries.setdefault(workspace, []).append((min(cap, claim.seq), claim_id))
        index = self._sweep(self._failing, queries)
        memo["open"] = index
        return index

    def _open_on_artifacts(self) -> dict[str, list[str]]:
        """claim id -> the failed or unfinished receipts on its artifacts' lineages that their own workspace had not
        resolved by then (LIN015's candidates; the claim check applies the exact tests), by the sweep of
        `_open_failures`."""
        memo = self._memo()
        index = memo.get("open_unsettled")
        if index is not None:
            return index
        queries: dict[str, list[tuple[int, str]]] = {}
        for claim_id, claim in self._claims.items():
            for artifact_id in self._claim_artifacts(claim):
                artifact = self._artifacts.get(artifact_id)
                if artifact is None:
                    continue
                for workspace, cap in self._lineage(artifact.workspace, claim.seq):
                    if self._unsettled.get(workspace):
                        queries.setdefault(workspace, []).append((cap, claim_id))
        index = self._sweep(self._unsettled, queries)
        memo["open_unsettled"] = index
        return index

    def _sweep(
        self, receipts: dict[str, list[tuple[int, str]]], queries: dict[str, list[tuple[int, str]]]
    ) -> dict[str, list[str]]:
        """Per workspace, the receipts of `receipts` still open (neither rerun there nor waived) at each query's seq."""
        index: dict[str, list[str]] = {}
        never = float("inf")
        for workspace, asked in queries.items():
            asked.sort()
            opened: list[tuple[int, str]] = []
            closed: list[tuple[float, str]] = []
            for seq, receipt_id in receipts[workspace]:
                receipt = self._receipts[receipt_id]
                ends = [
                    self._passing_after(workspace, key, seq)
                    for key in (self._purposes.get(receipt_id) or (_ANY_PURPOSE,))
                ]
                ends.append(self._waived_at(receipt_id, receipt))
                end = min((e for e in ends if e is not None), default=never)
                if end > seq:
                    opened.append((seq, receipt_id))
                    closed.append((end, receipt_id))
            closed.sort()
            active: dict[str, None] = {}
            i = j = 0
            for at, claim_id in asked:
                while i < len(opened) and opened[i][0] < at:
                    active[opened[i][1]] = None
                    i += 1
                while j < len(closed) and closed[j][0] < at:
                    active.pop(closed[j][1], None)
                    j += 1
                if active:
                    index.setdefault(claim_id, []).extend(active)
        return index

    def _rerun(self, receipt_id: str, receipt: _Receipt, spots: dict[tuple[str, int], None]) -> bool:
        """Whether a completed, passing receipt for the same purpose or suite followed the failing one."""
        keys = self._purposes.get(receipt_id) or {_ANY_PURPOSE}
        for workspace, cap in spots:
            for key in keys:
                later = self._passing_after(workspace, key, receipt.seq)
                if later is not None and later < cap:
                    return True
        return False


# What each kind adds to the graph: plain functions, so a graph holds no bound methods of itself (no reference
# cycle: a replay's final gate builds one per activation in a sandbox child that runs without the cyclic GC).
_HANDLERS: dict[str, Callable[[LineageGraph, str, int, dict[str, Any]], None]] = {
    "workspace.created": LineageGraph._add_workspace,
    "workspace.changed": LineageGraph._add_change,
    "workspace.lifecycle": LineageGraph._add_lifecycle,
    "artifact.created": LineageGraph._add_artifact,
    "tool.call": LineageGraph._add_tool_call,
    "tool.result": LineageGraph._add_tool_result,
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


def claim_is_judged(event: dict) -> bool:
    """Whether LIN008 judges this `account.claim`: a validation or completion claim no replay left unevaluated."""
    return event.get("claim_kind") in ("validation", "completion") and not isinstance(event.get("unevaluated"), dict)


def unevaluated_checks(
    kinds: dict[str, int],
    unevaluated_claims: dict[str, tuple[str, ...]],
    claims_without_artifact: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """The checks that had nothing to judge (DESIGN §10): `[{"code", "reason"}]` in code order, plus `events` where
    only some inputs were left out (claims resting on excluded tools). A code listed here has no findings because it
    could not have any, not because the run passed it.

    `kinds`: events per kind, where `account.claim` counts only the claims LIN008 judges (`claim_is_judged`);
    `unevaluated_claims`: claim id -> the excluded tools it rests on; `claims_without_artifact`: the judged claims that
    name no artifact (no `artifact_id`, no admission among their supports), whose artifact's lineage LIN015 cannot
    read. A caller that cannot tell (a migration counting kinds) leaves it empty."""
    without = list(claims_without_artifact)
    out: list[dict[str, Any]] = []
    for code, groups in REQUIRED_INPUTS.items():
        absent = [group for group in groups if not any(kinds.get(kind, 0) > 0 for kind in group)]
        entry: dict[str, Any] | None = None
        if absent:
            words = [" or ".join(_INPUT_WORDS[k] for k in group) for group in absent]
            listed = words[0] if len(words) == 1 else ", no ".join(words[:-1]) + " and no " + words[-1]
            entry = {"code": code, "reason": f"the run holds no {listed}"}
        claims: list[str] = []
        reasons: list[str] = []
        # LIN015 adds what it could not read only when it judged the rest (a run without artifacts is not evaluated).
        if unevaluated_claims and (code == "LIN008" or (code == "LIN015" and entry is None)):
            tools = sorted({t for ts in unevaluated_claims.values() for t in ts})
            claims = list(unevaluated_claims)
            said = f"{len(claims)} claim{'s' if len(claims) != 1 else ''} rest{'s' if len(claims) == 1 else ''}"
            reasons.append(
                f"{said} on {' and '.join(tools)}, excluded by the scenario: neither supported nor contradicted"
            )
        if code == "LIN015" and without and entry is None:
            n = len(without)
            reasons.append(
                f"{n} claim{'s' if n != 1 else ''} name{'s' if n == 1 else ''} no artifact (no artifact_id, no "
                "admission among the supports): no artifact lineage to read"
            )
            claims = _unique([*claims, *without])
        if reasons:
            reason = "; ".join(reasons)
            entry = {"code": code, "reason": reason if entry is None else f"{entry['reason']}; {reason}"}
            entry["events"] = claims
        if entry is not None:
            out.append(entry)
    return out


def check_events(run: dict, events: Iterable[dict]) -> list[Finding]:
    """Build the graph of `events` (validated, in seq order) and return its findings."""
    graph = LineageGraph(run)
    for event in events:
        graph.add(event)
    return graph.findings()
