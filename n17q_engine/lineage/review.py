"""The review object an approval binds (issue 34, seed 003): what was approved, computed from the graph.

Seed 003: "The prepared review object included branch artifact digest, target base, workspace lineage, required
validation receipts, unresolved failures, policy revision, adapter mapping, effect identity, destination, and expiry.
[...] A changed test, patch, workspace, or policy produced a new digest and invalidated approval." The approval's
`evidence_set_digest` (DESIGN §3, kept exactly) covers admission ids only; the review object covers what they stand
for. `review_object(graph, intent, upto)` is the object of one intent as the graph stood at seq `upto`:

- **effect**: the intent's effect class, destination, idempotency key, namespace, and the digest of any further
  parameters it carries (every key beyond DESIGN §3's fields and the envelope);
- **artifact**: its id, digest, workspace and tree (null digest while it is not created yet);
- **evidence**: per admission the intent uses (sorted): whether it was recorded yet, its purpose, decision, workspace
  and tree, the admission that superseded it (if any), its source receipt's identity and content (command, suites,
  completion, failures, exit code, workspace, trees), the latest receipt for the same purpose where that one ran
  (a rerun replaces it), and that workspace's latest tree;
- **policy**: the revision in force on the intent: the latest `policy.decision` on the intent (or its artifact),
  else the run's `policy_revision`;
- **expires_at**: the approval's expiry, when it records one.

`review_changes(before, after)` says in words what differs; an approval binds while nothing does between the moment
it was recorded and the moment its intent is acted on (`acted_at`: the intent's first execution, else now).
`review_digest` is the object's digest (`n17q_engine.canonical.digest_json`): what a harness records as the
approval's optional `review_digest`, which must equal the engine's recomputation at the approval.

Decisions taken where DESIGN is silent (docs/decisions.md, "The review object an approval binds"):

- The intent's own declaration (effect identity, artifact id, admission ids) is read whenever it was recorded: an
  approval names its intent by id and a harness may record the approval first (story 003), so an intent's fields are
  what was approved of it. A changed destination or artifact is a different intent acting on the approval; the
  finding that it approves another subject then names what differs.
- The policy decision's outcome is not bound: an approval is what turns `needs_approval` into `allow` (story 001),
  so a revision, not an outcome, is what changes under the approver. Before any decision on the intent, the run's
  policy revision is in force.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ..canonical import digest_json
from .codes import _short
from .graph import LineageGraph, _Approval, _Intent, _join

# A cutoff later than every event: the graph as it stands now.
NOW = 1 << 62


def acted_at(graph: LineageGraph, intent_id: str) -> int:
    """The seq at which an intent was acted on: its first execution, else now (the final gate's question)."""
    seqs = [s for s in (graph._seq.get(e) for e in graph._executions.get(intent_id, ())) if s is not None]
    return min(seqs) if seqs else NOW


def _latest(entries: Sequence[tuple[Any, ...]], upto: int, ordered: bool) -> tuple[Any, ...] | None:
    """The entry with the greatest seq (its first item) not after `upto`; `ordered` when `entries` is sorted by seq
    (every index the graph keeps is, for events added in seq order), so a long history costs a bisection."""
    if ordered:
        index = bisect_right(entries, upto, key=_first)
        return entries[index - 1] if index else None
    found: tuple[Any, ...] | None = None
    for entry in entries:
        if entry[0] <= upto and (found is None or entry[0] > found[0]):
            found = entry
    return found


def _first(entry: tuple[Any, ...]) -> Any:
    return entry[0]


def _receipt_json(graph: LineageGraph, receipt_id: str | None) -> dict[str, Any] | None:
    receipt = graph._receipts.get(receipt_id) if receipt_id is not None else None
    if receipt is None:
        return None
    return {
        "id": receipt_id,
        "command": receipt.command,
        "suites": list(receipt.suites),
        "completion": receipt.completion,
        "failed": receipt.failed,
        "exit_code": receipt.exit_code,
        "workspace_id": receipt.workspace,
        "pre_tree": receipt.pre_tree,
        "post_tree": receipt.post_tree,
    }


def _evidence(graph: LineageGraph, admission_id: str, upto: int) -> dict[str, Any]:
    admission = graph._admissions.get(admission_id)
    if admission is None or admission.seq > upto:
        return {"admission_id": admission_id, "recorded": False}
    receipt_id = graph._source_receipt(admission)
    receipt = graph._receipts.get(receipt_id) if receipt_id is not None else None
    if receipt is not None and receipt.seq > upto:
        receipt_id, receipt = None, None
    ordered = graph._in_order
    superseded = _latest(graph._superseded.get(admission_id, ()), upto, ordered)
    latest = None
    where = receipt.workspace if receipt is not None else admission.workspace
    if receipt is not None and where is not None and admission.purpose:
        found = _latest(graph._by_purpose.get((where, admission.purpose), ()), upto, True)
        latest = found[1] if found is not None else None
    changed = _latest(graph._changes.get(where, ()), upto, ordered) if where is not None else None
    return {
        "admission_id": admission_id,
        "recorded": True,
        "purpose": admission.purpose,
        "admitted": admission.admitted,
        "workspace_id": admission.workspace,
        "tree_digest": admission.tree,
        "superseded_by": superseded[1] if superseded is not None else None,
        "receipt": _receipt_json(graph, receipt_id),
        "latest_receipt": _receipt_json(graph, latest) if latest is not None and latest != receipt_id else None,
        "workspace_tree": changed[2] if changed is not None else None,
    }


def _policy_revision(graph: LineageGraph, intent_id: str, intent: _Intent, upto: int) -> str | None:
    decisions = [*graph._decisions_on.get(intent_id, ())]
    if intent.artifact is not None:
        decisions.extend(graph._decisions_on.get(intent.artifact, ()))
    best: tuple[int, str | None] | None = None
    for decision_id in decisions:
        decision = graph._decisions[decision_id]
        if decision.seq <= upto and (best is None or decision.seq > best[0]):
            best = (decision.seq, decision.revision)
    return best[1] if best is not None else graph.policy_revision


def review_object(
    graph: LineageGraph, intent_id: str, upto: int = NOW, approval: _Approval | None = None
) -> dict[str, Any] | None:
    """The review object of intent `intent_id` as the graph stood at seq `upto` (the module docstring), or None when
    the run holds no such intent. `approval` adds its expiry."""
    intent = graph._intents.get(intent_id)
    if intent is None:
        return None
    artifact: dict[str, Any] | None = None
    if intent.artifact is not None:
        made = graph._artifacts.get(intent.artifact)
        if made is not None and made.seq <= upto:
            artifact = {
                "id": intent.artifact,
                "digest": made.digest,
                "workspace_id": made.workspace,
                "tree_digest": made.tree,
            }
        else:
            artifact = {"id": intent.artifact, "digest": None, "workspace_id": None, "tree_digest": None}
    return {
        "subject": intent_id,
        "effect": {
            "effect_class": intent.effect_class,
            "destination": intent.destination,
            "idempotency_key": intent.key,
            "namespace": intent.namespace,
            "parameters": intent.parameters,
        },
        "artifact": artifact,
        "evidence": [_evidence(graph, a, upto) for a in sorted(set(intent.admissions))],
        "policy": {"policy_revision": _policy_revision(graph, intent_id, intent, upto)},
        "expires_at": approval.expires_at if approval is not None else None,
    }


def review_digest(review: dict[str, Any]) -> str:
    """The digest of a review object: DESIGN §3's digest of a JSON value."""
    return digest_json(review)


def _t(value: Any) -> str:
    if value is None:
        return "none"
    return _short(value) if isinstance(value, str) else str(value)


def _arrow(what: str, before: Any, after: Any) -> str:
    return f"{what} {_t(before)} → {_t(after)}"


_EFFECT_WORDS = {
    "effect_class": "effect class",
    "destination": "destination",
    "idempotency_key": "idempotency key",
    "namespace": "namespace",
    "parameters": "effect parameters",
}


def _receipt_changes(what: str, before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    out = []
    for key, word in (
        ("pre_tree", "tree"),
        ("post_tree", "post-run tree"),
        ("completion", "completion"),
        ("failed", "failed"),
        ("exit_code", "exit code"),
        ("command", "command"),
        ("workspace_id", "workspace"),
    ):
        if before.get(key) != after.get(key):
            out.append(_arrow(word, before.get(key), after.get(key)))
    if len(out) > 1 and out[1] == "post-run " + out[0]:  # ran at one tree before and after: say it once
        del out[1]
    return [f"{what}: {', '.join(out)}"] if out else [what]


def review_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What differs between two review objects, one phrase per change ("policy revision 7 → 8"), in a fixed order:
    effect, artifact, evidence, policy, expiry. Empty when they are equal."""
    out: list[str] = []
    if before.get("subject") != after.get("subject"):
        out.append(_arrow("subject", before.get("subject"), after.get("subject")))
    eb, ea = before.get("effect") or {}, after.get("effect") or {}
    for key, word in _EFFECT_WORDS.items():
        if eb.get(key) != ea.get(key):
            out.append(f"{word} changed: {_t(eb.get(key))} → {_t(ea.get(key))}")
    ab, aa = before.get("artifact"), after.get("artifact")
    if ab != aa:
        if ab is None or aa is None or ab.get("id") != aa.get("id"):
            out.append(
                _arrow("artifact", (ab or {}).get("id"), (aa or {}).get("id"))
                + f" (digest {_t((ab or {}).get('digest'))} → {_t((aa or {}).get('digest'))})"
            )
        elif ab.get("digest") is None:
            out.append(f"artifact {aa['id']} was created after the approval (digest {_t(aa.get('digest'))})")
        else:
            for key, word in (("digest", "digest"), ("workspace_id", "workspace"), ("tree_digest", "tree")):
                if ab.get(key) != aa.get(key):
                    out.append(_arrow(f"artifact {aa['id']} {word}", ab.get(key), aa.get(key)))
    out.extend(_evidence_changes(before.get("evidence") or [], after.get("evidence") or []))
    pb = (before.get("policy") or {}).get("policy_revision")
    pa = (after.get("policy") or {}).get("policy_revision")
    if pb != pa and pb is not None:  # a revision first known after the approval changed nothing the approver saw
        out.append(f"policy revision {_t(pb)} → {_t(pa)}")
    if before.get("expires_at") != after.get("expires_at"):
        out.append(_arrow("expiry", before.get("expires_at"), after.get("expires_at")))
    return list(dict.fromkeys(out))  # two admissions from one workspace name its change once


def _evidence_changes(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    old = {e["admission_id"]: e for e in before}
    new = {e["admission_id"]: e for e in after}
    gone = [a for a in old if a not in new]
    added = [a for a in new if a not in old]
    if gone or added:
        out.append(
            "evidence set changed"
            + (f": without {_join(gone)}" if gone else "")
            + ("," if gone and added else "")
            + (f" with {_join(added)}" if added else "")
        )
    for admission_id in (a for a in new if a in old):
        b, a = old[admission_id], new[admission_id]
        if b == a:
            continue
        if not b.get("recorded"):
            out.append(f"admission {admission_id} was recorded after the approval")
            continue
        if b.get("superseded_by") != a.get("superseded_by") and a.get("superseded_by") is not None:
            out.append(f"admission {admission_id} superseded by {a['superseded_by']}")
        for key, word in (("workspace_id", "workspace"), ("tree_digest", "tree"), ("purpose", "purpose")):
            if b.get(key) != a.get(key):
                out.append(_arrow(f"admission {admission_id} {word}", b.get(key), a.get(key)))
        rb, ra = b.get("receipt"), a.get("receipt")
        if rb != ra:
            if rb is None and ra is not None:
                out.append(f"receipt {ra['id']} of admission {admission_id} was recorded after the approval")
            elif rb is not None and ra is not None:
                out.extend(_receipt_changes(f"receipt {rb['id']} → {ra['id']}", rb, ra))
        lb, la = b.get("latest_receipt"), a.get("latest_receipt")
        if lb != la and la is not None and ra is not None:
            base = lb or ra
            purpose = a.get("purpose")
            out.extend(_receipt_changes(f"receipt {ra['id']} replaced by {la['id']} for {purpose}", base, la))
        if b.get("workspace_tree") != a.get("workspace_tree") and a.get("workspace_tree") is not None:
            where = (ra or {}).get("workspace_id") or a.get("workspace_id")
            base_tree = b.get("workspace_tree") or (rb or {}).get("post_tree") or b.get("tree_digest")
            out.append(_arrow(f"workspace {where} changed: tree", base_tree, a.get("workspace_tree")))
    return out


def approval_review(graph: LineageGraph, approval_id: str) -> dict[str, Any] | None:
    """What the facts layer says of an approval's review object, for its subject intent: `{"intent", "review_digest"
    (the engine's, at the approval), "recorded_review_digest" (the harness's, or None), "changes" (between the approval
    and the intent's action), "binds"}`; None when the approval is not one or its subject is no intent of the run."""
    approval = graph._approvals.get(approval_id)
    if approval is None or approval.subject is None or approval.subject not in graph._intents:
        return None
    intent_id = approval.subject
    then = review_object(graph, intent_id, approval.seq, approval)
    now = review_object(graph, intent_id, acted_at(graph, intent_id), approval)
    if then is None or now is None:
        return None
    digest = review_digest(then)
    changes = review_changes(then, now)
    expired = executed_after_expiry(graph, intent_id, approval.expires_at)
    recorded = approval.review_digest
    return {
        "intent": intent_id,
        "review_digest": digest,
        "recorded_review_digest": recorded,
        "changes": changes,
        "expired_before": expired,  # the first execution's logical time when it came after the expiry
        "binds": not changes and expired is None and (recorded is None or recorded == digest),
    }


def _instant(value: str | None) -> datetime | None:
    """A logical time as an aware instant (ISO 8601, `Z` or an offset), or None when it is not one. Compared as
    instants, never as text: "14:00:05.5Z" is later than "14:00:05Z" though it sorts first."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def executed_after_expiry(graph: LineageGraph, intent_id: str, expires_at: str | None) -> str | None:
    """The logical time of the intent's first execution when it comes after the approval's expiry, else None."""
    executed = graph._first_executed_at.get(intent_id)
    expiry, when = _instant(expires_at), _instant(executed)
    if expiry is None or when is None or when <= expiry:
        return None
    return executed
