"""The run bundle's event vocabulary (`n17q.run-bundle/1`, DESIGN §3): kinds, their fields, and references.

This module is the single source of truth for what an event may say. The importer validates against it,
the lineage checker reads through it, and the replay engine writes events that satisfy it.

Validation is strict where a wrong value would change a verdict (enumerations, identifiers, digests)
and lenient about extra fields: a harness may add keys (extend, don't rename), and they are kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BUNDLE_FORMAT = "n17q.run-bundle/1"
CAPTURE_FORMAT = "n17q.capture/1"  # a captured tool response (DESIGN §5), staged for review

ENVIRONMENTS = ("live", "fixture", "sandbox", "effect-capable")
MODES = ("recorded", "reconstruction", "rerun", "counterfactual", "regression")
ISOLATION_LEVELS = ("netns", "degraded")

RECEIPT_COMPLETIONS = (
    "not_started",
    "started",
    "partial",
    "completed",
    "canceled_confirmed",
    "termination_requested",
    "termination_unknown",
    "harness_interrupted",
)
RESULT_OUTCOMES = ("ok", "not_found", "empty", "denied", "deleted", "error", "timeout", "unknown")
RESULT_ORIGINS = ("historical", "fixture", "derived", "live")
ABSENCE_KINDS = ("absent", "redacted", "unavailable", "not_applicable")
WORKSPACE_STATES = ("active", "quarantined", "superseded", "uncertain", "torn_down")
DERIVATION_RELATIONS = ("copy", "reconstruct", "branch")
EXECUTION_STAGES = (
    "before_send",
    "after_acceptance",
    "after_world_mutation",
    "before_receipt",
    "during_response",
    "after_local_commit",
    "completed",
)
FAULT_STAGES = EXECUTION_STAGES[:-1]
EXECUTION_OUTCOMES = ("acknowledged", "lost_response", "rejected", "failed", "unknown")
RUN_STATES = ("running", "paused", "incomplete_test_world", "completed", "stopped", "failed", "interrupted")
CLAIM_KINDS = ("validation", "effect", "completion", "other")
# Extension (issue 39, seed 003): whether an extracted effect claim says it happened or not.
CLAIM_POLARITIES = ("affirmed", "denied")
BUDGET_RESOURCES = ("tokens", "turns", "compute_s", "artifacts")
PROPOSAL_TYPES = ("tool_call", "message", "stop")
POLICY_OUTCOMES = ("allow", "deny", "needs_approval")
APPROVAL_DECISIONS = ("approved", "rejected")
APPROVAL_ORIGINS = ("human", "simulated", "historical")
ADMISSION_DECISIONS = ("admitted", "rejected")
# Extension (seed 000 "Missing mutations were treated most strictly"): `client`, a network client built in the sandbox
# (an internet socket, an HTTP, FTP or mail client's constructor), stopped before any request (sandbox_child.py).
VIOLATION_TARGETS = ("socket", "dns", "subprocess", "file", "client")
# Extension (issue 19, seed 000 "Concurrency was recorded as behavior"): the steps of a declared race's schedule
# the engine followed (n17q_engine/concurrency.py, docs/concurrency.md).
SCHEDULE_STEPS = ("run", "accept", "deduplicate", "hold", "release", "skip", "commit", "read")
# Extension (issue 38, seed 001 "Corrections named their author, basis, and time"): what a reviewer adds to a run after
# it ran (docs/annotations.md). An `annotation.recorded` is a score, a label or a comment on the run (no `subject`),
# an event (`subject`) or a lineage finding (`finding {code, from_id, to_id}`); an `annotation.correction` says that a
# recorded fact of one event was otherwise (`subject`, `field`, `recorded`, `corrected`), on the events it rests on
# (`basis_ids`). Both name their author and role; `at.wall` is when. Either may supersede an earlier one of the run
# (`supersedes_id`): nothing is edited, the later one is read instead. Neither changes a fact, a finding or a verdict.
ANNOTATION_TYPES = ("score", "label", "comment")
ANNOTATION_KINDS = ("annotation.recorded", "annotation.correction")
# Extension (issue 39, seed 003): the dimensions of a `review.assessment` (n17q_engine/assessments.py: DIMENSIONS).
ASSESSMENT_DIMENSIONS = ("code_clarity", "diagnostic_reasoning", "report_usefulness", "path_economy")
# What reviewers append after a run (annotations, corrections, assessments): a replay leaves them out.
APPENDED_BY_REVIEWERS = (*ANNOTATION_KINDS, "review.assessment")

# Python types a field may hold. "number" admits int and float (never bool).
STR, INT, NUMBER, BOOL, LIST, DICT, ANY = "string", "integer", "number", "boolean", "array", "object", "any"


@dataclass(frozen=True, slots=True)
class Field:
    type: str
    required: bool = True
    nullable: bool = False
    enum: tuple[str, ...] | None = None
    # For arrays: the type of each item.
    items: str | None = None
    # For namespaced values such as "replay:<world>": allowed prefixes besides the enum.
    prefixes: tuple[str, ...] = ()


def f(type_: str, **kw: Any) -> Field:
    return Field(type_, **kw)


def opt(type_: str, **kw: Any) -> Field:
    return Field(type_, required=False, nullable=True, **kw)


_RECEIPT_LIKE = {
    "scenario": f(ANY, nullable=True),
    "tool": f(STR),
    "contract_revision": f(INT),
    "request_digest": f(STR),
    "world_revision": f(INT, nullable=True),
    "checkpoint_id": f(STR, nullable=True),
    "reason": f(STR),
}

KINDS: dict[str, dict[str, Field]] = {
    "attempt.started": {
        "number": f(INT),
        "reason": f(STR),
        "parent_attempt_id": f(STR, nullable=True),
    },
    "attempt.ended": {"outcome": f(STR)},
    "workspace.created": {
        "workspace_id": f(STR),
        "base_digest": f(STR),
        "overlay_digest": f(STR),
        "environment_revision": f(STR),
        "derived_from": f(DICT, nullable=True),
        # Extension: the paths the initial overlay touched, the edits this workspace inherited and does
        # not own. LIN010 needs them; a bundle without them simply cannot be checked for LIN010.
        "overlay_files": opt(LIST, items=STR),
        # Extension (seed 003 "Attempt cleanup became explicit"): what the workspace took over from elsewhere,
        # [{kind: cache|process|layer, workspace_id, digest, trusted}]; LIN016 reads it, and `[]` says "nothing".
        "inherited": opt(LIST, items=DICT),
    },
    "workspace.changed": {
        "workspace_id": f(STR),
        "overlay_revision": f(ANY),
        "tree_digest": f(STR),
        "cause": f(STR, nullable=True),
        # Extension (seed 003): the paths this change touched; LIN017 reads them for edits to the repository's tests.
        "files": opt(LIST, items=STR),
    },
    "workspace.lifecycle": {
        "workspace_id": f(STR),
        "state": f(STR, enum=WORKSPACE_STATES),
        "cause": f(STR, nullable=True),
        "cleanup_receipt_id": opt(STR),
    },
    "artifact.created": {
        "artifact_id": f(STR),
        "digest": f(STR),
        "media_type": f(STR),
        "size": f(INT),
        "role": f(STR),
        "workspace_id": f(STR, nullable=True),
        "tree_digest": f(STR, nullable=True),
        "files": f(LIST, items=STR),
    },
    "model.proposal": {
        "context_digest": f(STR),
        "proposal": f(DICT),
        "accepted": f(BOOL),
    },
    "tool.call": {
        "tool": f(STR),
        "contract_revision": f(INT),
        "request": f(DICT),
        "request_digest": f(STR),
        "proposal_id": f(STR, nullable=True),
        "workspace_id": f(STR, nullable=True),
    },
    "tool.result": {
        "call_id": f(STR),
        "origin": f(STR, enum=RESULT_ORIGINS),
        "outcome": f(STR, enum=RESULT_OUTCOMES),
        "blob": f(STR, nullable=True),
        "absent": f(DICT),
    },
    "command.receipt": {
        "call_id": f(STR, nullable=True),
        "workspace_id": f(STR),
        "command": f(STR),
        "suites": f(LIST, items=STR),
        "pre_tree": f(STR),
        # DESIGN §10: null when `completion` is not `completed` (an unknown termination has no known tree); a
        # completed receipt must name it (bundle.py). The checker reads null as unknown, never as a match.
        "post_tree": f(STR, nullable=True),
        "environment_revision": f(STR),
        "completion": f(STR, enum=RECEIPT_COMPLETIONS),
        "exit_code": f(INT, nullable=True),
        "results": f(DICT),
        "output_blob": f(STR, nullable=True),
        # Extensions a compatibility rule may pin (n17q_engine/compatibility.py): the digest of what the command
        # read besides the tree (fixtures, seeds, data), and how isolated the test ran (the harness's word, "pure").
        "inputs_digest": opt(STR),
        "test_isolation": opt(STR),
    },
    "evidence.observed": {
        "source": f(STR),
        "workspace_id": f(STR, nullable=True),
        "tree_digest": f(STR, nullable=True),
        "scope": f(ANY),
    },
    "evidence.admitted": {
        "observation_id": f(STR),
        "purpose": f(STR),
        "artifact_id": f(STR, nullable=True),
        "workspace_id": f(STR, nullable=True),
        "tree_digest": f(STR, nullable=True),
        "policy_revision": f(STR),
        "decision": f(STR, enum=ADMISSION_DECISIONS),
        "compatibility": f(DICT, nullable=True),
        "rationale": f(STR, nullable=True),
    },
    "evidence.superseded": {"admission_id": f(STR), "cause": f(STR, nullable=True)},
    "waiver.granted": {
        "failure": f(STR),
        "suite": f(STR),
        "actor_role": f(STR),
        "rationale": f(STR),
    },
    "policy.decision": {
        "policy_revision": f(STR),
        "subject": f(STR),
        "input_ids": f(LIST, items=STR),
        "required": f(LIST, items=STR),
        "outcome": f(STR, enum=POLICY_OUTCOMES),
        "reasons": f(LIST),
    },
    "approval.recorded": {
        "subject": f(STR),
        "evidence_set_digest": f(STR),
        "decision": f(STR, enum=APPROVAL_DECISIONS),
        "actor_role": f(STR),
        "origin": f(STR, enum=APPROVAL_ORIGINS),
        "run": f(STR),
        "environment": f(STR, enum=ENVIRONMENTS),
        # Extension (issue 34, seed 003): the digest of the review object the approver was shown (the harness's; the
        # lineage checker recomputes it from the graph, LIN004 when they differ), and when the approval expires.
        "review_digest": opt(STR),
        "expires_at": opt(STR),
    },
    "human.input": {
        "actor_role": f(STR),
        "visible_ids": f(LIST, items=STR),
        "action": f(STR),
        "note": f(STR, nullable=True),
    },
    "effect.intent": {
        "effect_class": f(STR),
        "destination": f(STR),
        "artifact_id": f(STR, nullable=True),
        "admission_ids": f(LIST, items=STR),
        "approval_id": f(STR, nullable=True),
        "idempotency_key": f(STR),
        "namespace": f(STR, enum=("live",), prefixes=("replay:",)),
        "historical_intent": f(STR, nullable=True),
    },
    "effect.execution": {
        "intent_id": f(STR),
        "attempt_no": f(INT),
        "stage": f(STR, enum=EXECUTION_STAGES),
        "outcome": f(STR, enum=EXECUTION_OUTCOMES),
        "connection": f(STR),
    },
    "world.transition": {
        "resource": f(STR),
        "revision_before": f(INT, nullable=True),
        "revision_after": f(INT),
        "change": f(ANY),
        "cause": f(STR, nullable=True),
    },
    "world.observation": {
        "resource": f(STR),
        "world_revision": f(INT),
        "state": f(ANY),
    },
    "clock.advanced": {"from": f(STR), "to": f(STR), "cause": f(STR, nullable=True)},
    "checkpoint": {
        "world_revision": f(INT),
        "workspaces": f(DICT),
        "clock": f(STR),
        # Issue 39 (additive): the fixture versions in force (a replay's checkpoint; a recording may name them too).
        "fixtures": opt(DICT),
    },
    "fixture.missing": {
        **_RECEIPT_LIKE,
        # Extension (seed 001): the fixture answering the request holds its body by digest and retention removed the
        # bytes: {fixture, body_digest, class, sensitivity, expired_at, removed_at, record} (n17q_engine/fixtures.py).
        "body_expired": opt(DICT),
    },
    "fixture.ambiguous": {**_RECEIPT_LIKE, "candidates": f(LIST)},
    "sandbox.violation": {
        "attempted": f(STR, enum=VIOLATION_TARGETS),
        "target": f(STR),
        "stopped": f(BOOL),
    },
    "replay.scope": {
        "scenario": f(DICT),
        "scope": f(STR),
        "recorded_between": f(ANY),
        "synthetic": f(LIST, items=STR),
        "uncovered": f(LIST),
        "isolation": f(STR, enum=ISOLATION_LEVELS),
        # Extension (seed 003): what the scenario declares of the run's end (instructions, file_scope,
        # allowed_effects, acceptable_stop_states), judged by n17q_engine/scenario_evaluation.py.
        "declared": opt(DICT),
    },
    "run.state": {"state": f(STR, enum=RUN_STATES), "reason": f(STR, nullable=True)},
    "account.claim": {
        "text": f(STR),
        "claim_kind": f(STR, enum=CLAIM_KINDS),
        "supports": f(LIST, items=STR),
        # Extension: the validation purposes or suites the claim speaks for (LIN008's required scope).
        "scope": opt(LIST, items=STR),
        # Extension: the artifact the claim speaks for, whose lineage LIN015 reads for contradicting receipts.
        "artifact_id": opt(STR),
        # Extension (issue 39, seed 003): a claim the importer read from the final answer's prose rather than one the
        # harness stated (n17q_engine/claim_extraction.py): `origin: extracted`, the answer's event, the sentence's
        # [start, end) offsets in its text, the extractor's revision and rule, what it is about, an effect's polarity.
        # No enum: harnesses already write their own words here ("recorded"); the importer writes "extracted".
        "origin": opt(STR),
        "extracted_from": opt(STR),
        "span": opt(LIST),
        "extractor": opt(STR),
        "rule": opt(STR),
        "about": opt(STR),
        "polarity": opt(STR, enum=CLAIM_POLARITIES),
    },
    "budget.charged": {"resource": f(STR, enum=BUDGET_RESOURCES), "amount": f(NUMBER)},
    # Extension: one step of a scenario-declared race, as the replay followed it (scenario evidence).
    "schedule.step": {
        "race": f(STR),
        "index": f(INT),
        "step": f(STR, enum=SCHEDULE_STEPS),
        "delivery": f(STR),
        "intent_id": f(STR),
        "effect_identity": opt(STR),
        "barrier": opt(STR),
        "world_revision": opt(INT),
        "reason": opt(STR),
        # Extension (issue 39, seed 000 "Concurrency was recorded as behavior"): a `read` step (its `delivery` names
        # the read) records the read contract, the fixture that answered, its outcome, the revision of each resource
        # the answer rests on, and whether it was stale (`pending`: deliveries accepted and not committed then).
        "tool": opt(STR),
        "fixture": opt(STR),
        "outcome": opt(STR),
        "observed": opt(DICT),
        "stale": opt(BOOL),
        "pending": opt(LIST, items=STR),
    },
    # Extension (seed 003 "The fix worked without a better model"): what an agent in a replay was told of its task
    # and where it stands (n17q_engine/agent/task.py: workspace identity, exact test scope, partial and timed-out
    # evidence, the checks that need a rerun): the digest of the task document and a blob holding it with the
    # prompt's text, so a reviewer reads the exact words the agent received.
    "agent.context": {
        "format": f(STR),
        "context_digest": f(STR),
        "blob": f(STR),
    },
    "annotation.recorded": {
        "annotation": f(STR, enum=ANNOTATION_TYPES),
        "subject": opt(STR),
        "finding": opt(DICT),
        "name": opt(STR),
        "value": opt(ANY),
        "scale": opt(STR),
        "text": opt(STR),
        "supersedes_id": opt(STR),
        "author": f(STR),
        "author_role": f(STR),
    },
    "annotation.correction": {
        "subject": f(STR),
        "field": f(STR),
        "recorded": f(ANY, nullable=True),
        "corrected": f(ANY, nullable=True),
        "basis_ids": f(LIST, items=STR),
        "rationale": f(STR),
        "supersedes_id": opt(STR),
        "author": f(STR),
        "author_role": f(STR),
    },
    # Extension (issue 39, seed 003 "The scenario definition grew richer"): a qualitative reviewer's assessment of one
    # dimension (n17q_engine/assessments.py), appended after the run like an annotation; never read by the verdict.
    "review.assessment": {
        "dimension": f(STR, enum=ASSESSMENT_DIMENSIONS),
        "score": f(INT),
        "scale": f(STR),
        "cited_ids": f(LIST, items=STR),
        "rationale": opt(STR),
        "reviewer": f(DICT),
        "author": f(STR),
        "author_role": f(STR),
        "model": opt(STR),
        "connection": opt(STR),
    },
    # Extension (issue 39, seed 003 "The final policy gate repeated the invariant"): the outbox entry written in the
    # same local transaction as the final gate's allow and the effect.intent it activates (docs/outbox.md). An
    # execution is delivered from it alone: no entry, no delivery.
    "effect.outbox": {
        "intent_id": f(STR),
        "destination": f(STR),
        "tool": f(STR, nullable=True),
        "idempotency_key": f(STR),
        "request_digest": f(STR),
    },
}

# The fields every event carries, whatever its kind.
ENVELOPE = ("seq", "id", "kind", "at", "attempt")

# Top-level fields whose value is a reference even though the name does not end in _id/_ids.
NAMED_REFERENCES = frozenset({"subject", "source", "cause", "supports", "failure"})

# Fields that carry someone else's data (a tool's request, a world's state): identifiers inside them
# belong to the outside world, not to this run, so they are never read as references. The example
# bundle's `{"request": {"request_id": "req-7781"}}` is such a case.
OPAQUE_FIELDS = frozenset(
    {
        "request",
        "proposal",
        "state",
        "change",
        "absent",
        "results",
        "reasons",
        "scope",
        "files",
        "compatibility",
        "candidates",
        "scenario",
        "recorded_between",
        "uncovered",
        "synthetic",
        "at",
        # A converted event's provenance (n17q_engine.formats): where in its original file (an OTLP trace, an
        # Inspect log) the event came from. Ids in it are that file's (a span id, a log event's uuid), not this
        # run's; and skipping it spares the reader a walk of a dict every converted event carries.
        "otlp",
        "inspect",
    }
)

# The events that introduce an object id of their own, and the field that names it.
INTRODUCTIONS = {
    "attempt.started": "attempt",
    "workspace.created": "workspace_id",
    "artifact.created": "artifact_id",
}
OBJECT_KINDS = {"attempt.started": "attempt", "workspace.created": "workspace", "artifact.created": "artifact"}

# Fields whose value names a blob of the bundle.
BLOB_FIELDS = {"tool.result": ("blob",), "command.receipt": ("output_blob",), "agent.context": ("blob",)}
# Fields whose value, when present, is a digest (`sha256:<64 lowercase hex>`) that names no blob.
DIGEST_FIELDS = {"approval.recorded": ("review_digest",), "agent.context": ("context_digest",)}
# Fields whose value, when present, is an ISO-8601 time with a timezone.
TIME_FIELDS = {"approval.recorded": ("expires_at",)}


_SKIPPED_FIELDS = frozenset(ENVELOPE) | OPAQUE_FIELDS
_REF_SUFFIXES = ("_id", "_ids")


def references(event: dict[str, Any]) -> list[tuple[str, str]]:
    """Every reference the event makes, as (field path, target id).

    Paths are dotted with list indices, e.g. ``input_ids[1]`` or ``derived_from.workspace_id``, so a
    finding or an edge can name exactly where the reference sits. The event's `attempt` comes first (it is
    an edge of the graph; attempt.started introduces the attempt instead). Written as flat loops rather
    than a recursive generator: the checker and the importer call it for every event, and at 100,000
    events the generator's nesting was half the cost of the checker's `add`.
    """
    kind = event.get("kind")
    introduced = INTRODUCTIONS.get(kind) if isinstance(kind, str) else None
    out: list[tuple[str, str]] = []
    attempt = event.get("attempt")
    if isinstance(attempt, str) and kind != "attempt.started":
        out.append(("attempt", attempt))
    for name, value in event.items():
        if name in _SKIPPED_FIELDS or name == introduced:
            continue
        if isinstance(value, str):
            if value and (name in NAMED_REFERENCES or name.endswith(_REF_SUFFIXES)):
                out.append((name, value))
        elif isinstance(value, list):
            if name in NAMED_REFERENCES or name.endswith(_REF_SUFFIXES):
                out.extend((f"{name}[{i}]", item) for i, item in enumerate(value) if isinstance(item, str) and item)
        elif isinstance(value, dict):
            if name == "workspaces" and kind == "checkpoint":
                out.extend((f"workspaces.{key}", key) for key in value if isinstance(key, str))
            else:
                _nested_references(name, value, out)
    return out


def _nested_references(path: str, value: dict, out: list[tuple[str, str]]) -> None:
    for name, sub in value.items():
        if not isinstance(name, str) or name in OPAQUE_FIELDS:
            continue
        where = f"{path}.{name}"
        if isinstance(sub, str):
            if sub and name.endswith(_REF_SUFFIXES):
                out.append((where, sub))
        elif isinstance(sub, list):
            if name.endswith(_REF_SUFFIXES):
                out.extend((f"{where}[{i}]", item) for i, item in enumerate(sub) if isinstance(item, str) and item)
        elif isinstance(sub, dict):
            _nested_references(where, sub, out)


def introduced_object(event: dict[str, Any]) -> tuple[str, str] | None:
    """(object kind, object id) for an event that creates an attempt, workspace or artifact."""
    kind = event.get("kind")
    if not isinstance(kind, str) or kind not in INTRODUCTIONS:
        return None
    value = event.get(INTRODUCTIONS[kind])
    if not isinstance(value, str):
        return None
    return OBJECT_KINDS[kind], value


def event_workspace(event: dict[str, Any]) -> str | None:
    """The workspace an event acts on or speaks about, if it names one."""
    value = event.get("workspace_id")
    return value if isinstance(value, str) else None


# A fixture result's freshness (tool.result `freshness.state`, additive): judged on the logical clock against the
# scenario version's rule for the tool; `not_evaluated` when there is no rule (replay/calls.py `_freshness`).
FRESHNESS_STATES = ("fresh", "stale", "not_evaluated")
