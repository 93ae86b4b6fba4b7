"""The lineage codes (DESIGN §4, §10): their names, what each finding means, which are warnings, what each reads.

Every rule module of the package names its codes from here; the glossary page, the verdict and the event detail read
`CODES`, `EXPLANATIONS` and `WARNING_CODES` through `n17q_engine.lineage`. `unevaluated_checks` says which codes had
nothing to judge in a run (a migration calls it with kinds counted from stored events, without a graph).

Decision taken where DESIGN §4 is silent (the rest travel with the rules they concern; the package docstring lists
where):

- `unevaluated()` (DESIGN §10) names the codes whose inputs the run does not hold (REQUIRED_INPUTS): a run without
  workspaces cannot have LIN009 findings, and that is not the same as passing LIN009. A claim a replay marked
  `unevaluated` (it rests on a tool the scenario excludes) is neither supported nor contradicted: LIN008 skips it
  (`claim_is_judged`) and `unevaluated()` names it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

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
    # Extension (seed 003): a claim that leaves out the failed or unfinished receipt on the lineage it speaks for (its
    # artifact's, or with none named, its supports' workspace and tree: issue 34).
    "LIN015": "claim contradicted on the lineage it speaks for",
    # Extension (seed 003 "Attempt cleanup became explicit"): a workspace took over a cache or a process from elsewhere
    # with no trusted immutable dependency layer allowing it (`workspace.created.inherited`).
    "LIN016": "untrusted state inherited",
    # Extension (seed 003 "Human approval stopped being a ceremonial button"): the agent changed the repository's
    # tests in its workspace although the task does not require it.
    "LIN017": "tests changed by the agent",
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
    "was approved is not what is being done. It also binds the whole review object (seed 003): the effect (class, "
    "destination, key, parameters), the artifact, each admitted receipt's content and trees, the policy revision and "
    "any expiry; a change to any of them between the approval and the intent's action (a new policy revision, a "
    "rerun replacing a receipt, a workspace whose tree moved on, another destination or artifact) invalidates it, "
    "and the finding names what changed. An approval that records the review_digest its approver saw must equal "
    "the engine's digest of that object at the approval.",
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
    "LIN015": "A validation or completion claim leaves out a failed or unfinished receipt for the claimed scope on "
    "the lineage of what it speaks for (neither cited, waived nor followed by a passing rerun): the account reads "
    "green while that history says otherwise. A claim speaks for the artifacts it names; one that names none speaks "
    'for the workspace and tree its supports ran at, so "All tests pass" citing a focused receipt is contradicted '
    "by the broad run that failed or timed out there. Not evaluated only when even that is unknown, or when its "
    "supports disagree on workspace or tree (the reason names them).",
    "LIN016": "A workspace declares (workspace.created.inherited) that it took over a cache, a running process or a "
    "layer from another workspace or elsewhere, and no trusted immutable dependency layer allows it: a process is "
    "never one, and a cache or layer counts only when it is marked trusted and names a sha256 content digest. What "
    "the first attempt left behind must not leak into the next one. Not evaluated when no workspace declares what "
    "it inherited.",
    "LIN017": "An artifact or a workspace change touches the repository's tests (the run's test paths: test folders "
    "and test files by default, or the globs the task or scenario names) while the task does not require test "
    "changes: the agent could weaken or delete the tests that judge its work. Files of the initial overlay are "
    "not counted (LIN010). Not evaluated when no artifact or change names its files.",
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
    # A claim naming no artifact speaks for its supports' workspace and tree, so a run without artifacts is judged.
    "LIN015": (("account.claim",), ("command.receipt",)),
    # Pseudo-kinds counted by the workspace rules (lineage/workspaces.py): a workspace.created with `inherited`, a
    # workspace.changed with `files`.
    "LIN016": (("workspace.created.inherited",),),
    "LIN017": (("artifact.created", "workspace.changed.files"),),
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
    "workspace.created.inherited": "workspaces declaring what they inherited",
    "workspace.changed.files": "workspace changes naming their files",
}


def claim_is_judged(event: dict) -> bool:
    """Whether LIN008 judges this `account.claim`: a validation or completion claim no replay left unevaluated."""
    return event.get("claim_kind") in ("validation", "completion") and not isinstance(event.get("unevaluated"), dict)


def unevaluated_checks(
    kinds: dict[str, int],
    unevaluated_claims: dict[str, tuple[str, ...]],
    claims_without_ground: Iterable[str] = (),
    claims_split: Mapping[str, Sequence[tuple[str, str]]] | None = None,
) -> list[dict[str, Any]]:
    """The checks that had nothing to judge (DESIGN §10): `[{"code", "reason"}]` in code order, plus `events` where
    only some inputs were left out (claims resting on excluded tools). A code listed here has no findings because it
    could not have any, not because the run passed it.

    `kinds`: events per kind, where `account.claim` counts only the claims LIN008 judges (`claim_is_judged`);
    `unevaluated_claims`: claim id -> the excluded tools it rests on; `claims_without_ground`: the judged claims that
    name no artifact (no `artifact_id`, no admission among their supports) and whose supports hold no receipt with a
    known workspace and tree, so LIN015 has no lineage to read; `claims_split`: claim id -> the (workspace, tree)
    spots of its supports, for the claims naming no artifact whose supports disagree on where they ran (LIN015 picks
    none of them). A caller that cannot tell (a migration counting kinds) leaves both empty."""
    without = list(claims_without_ground)
    split = dict(claims_split or {})
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
                f"{n} claim{'s' if n != 1 else ''} name{'s' if n == 1 else ''} no artifact and no workspace and "
                f"tree of a receipt among {'their' if n != 1 else 'its'} supports: no lineage to read"
            )
            claims = list(dict.fromkeys([*claims, *without]))  # unique, in order
        if code == "LIN015" and split and entry is None:
            spots = "; ".join(
                f"{claim_id}: " + ", ".join(f"{ws} at {_short(tree)}" for ws, tree in where)
                for claim_id, where in split.items()
            )
            n = len(split)
            reasons.append(
                f"{n} claim{'s' if n != 1 else ''} name{'s' if n == 1 else ''} no artifact and "
                f"{'their' if n != 1 else 'its'} supports disagree on workspace or tree ({spots}): judged at none"
            )
            claims = list(dict.fromkeys([*claims, *split]))
        if reasons:
            reason = "; ".join(reasons)
            entry = {"code": code, "reason": reason if entry is None else f"{entry['reason']}; {reason}"}
            entry["events"] = claims
        if entry is not None:
            out.append(entry)
    return out


def _short(tree: str) -> str:
    """A tree digest short enough for a sentence (`sha256:` and 12 hex digits)."""
    algorithm, sep, digest = tree.partition(":")
    return f"{algorithm}:{digest[:12]}" if sep and len(digest) > 12 else tree
