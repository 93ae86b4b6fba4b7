"""The review surface of one approval (issue 39; seeds 001 and 003): what the approver saw, rebuilt from the recording.

Seed 003: "The prepared review object included branch artifact digest, target base, workspace lineage, required
validation receipts, unresolved failures, policy revision, adapter mapping, effect identity, destination, and expiry.
The UI rendered from that canonical object." Seed 001: "the interface could render the exact review surface".

`review_surface(builder, event_id)` reads a `FactBuilder` fed the run's events up to and including the approval (or
the `needs_approval` decision still waiting on a person): the run's facts as they stood then, and its lineage graph.
Nothing after that event is read, so a later test, patch or decision cannot colour what the approver was shown. It
counts nothing of its own: the review object and its digest are `lineage/review.py`'s (the digest the approval's
`review_digest` must equal), the validations, workspaces and policy decisions are the fact layer's, and why an
approval is no authority here is LIN005's own sentence (`lineage/approvals.py: check_foreign`).

The surface holds, in the story's order: the subject intent and its effect identity and destination; the artifact
(digest, workspace, tree) and the workspace lineage it and the admitted evidence sit in (each workspace's base,
what it was derived from, its tree then, and whether any validation ran in it); the required validation purposes,
each with the admitted receipts for it (tree and completion) and the latest receipt for it; the unresolved
failures; the policy decision in force; the evidence-set digest the approval binds and whether it is the intent's;
the approval's expiry; and, for an approval, its decision, origin and whether it is authority here.

One exception, the engine's own (lineage/review.py, docs/decisions.md "The review object an approval binds"): an
approval names its intent by id and a harness may record the approval first (stories 001 and 003 do), so the intent's
own declaration (destination, effect identity, artifact id, admission ids) is what was approved of it, whenever it was
recorded. The caller passes that one later event as `declared_later`; the surface says it was declared after the
approval, and reads nothing else after it (not the artifact's creation, no receipt, admission or decision).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .canonical import evidence_set_digest
from .facts import FactBuilder
from .lineage.approvals import check_foreign
from .lineage.review import _receipt_json, review_digest, review_object


def _workspace_lineage(facts: dict[str, Any], start: list[str]) -> list[dict[str, Any]]:
    """The workspaces `start` names and every workspace they were derived from, oldest first, as the facts held them,
    each with the validations whose latest receipt ran in it (none: "no current validation")."""
    known = {w["id"]: w for w in facts["workspaces"]["items"]}
    validations: dict[str, list[dict[str, Any]]] = {}
    for row in facts["validations"]["latest"]:
        validations.setdefault(row["workspace"], []).append(row)
    order: list[str] = []
    for wid in start:
        chain = []
        seen: set[str] = set()
        at: str | None = wid
        while at is not None and at not in seen:
            seen.add(at)
            chain.append(at)
            at = (known.get(at) or {}).get("derived_from")
        for w in reversed(chain):
            if w not in order:
                order.append(w)
    out = []
    for wid in order:
        held = known.get(wid)
        out.append(
            {
                "id": wid,
                "recorded": held is not None,
                "base_digest": (held or {}).get("base_digest"),
                "derived_from": (held or {}).get("derived_from"),
                "relation": (held or {}).get("relation"),
                "tree": (held or {}).get("tree"),
                "state": (held or {}).get("state"),
                "validations": validations.get(wid, []),
            }
        )
    return out


def _required(builder: FactBuilder, facts: dict[str, Any], review: dict[str, Any] | None, decision: Any) -> list:
    """Each required validation purpose (the run's, and the decision's) with the admitted evidence for it and the
    latest receipt for it, as the facts held them."""
    purposes = list(facts["validations"]["required"])
    for p in (decision or {}).get("required", []):
        if p not in purposes:
            purposes.append(p)
    evidence = (review or {}).get("evidence") or []
    rows = []
    for purpose in purposes:
        tally = facts["validations"]["purposes"].get(purpose)
        latest = tally.get("latest") if tally else None
        rows.append(
            {
                "purpose": purpose,
                "admitted": [e for e in evidence if e.get("purpose") == purpose],
                "latest_receipt": _receipt_json(builder.graph, latest) if latest else None,
                "tally": tally,
                "never_ran": tally is None,
            }
        )
    return rows


def review_surface(
    builder: FactBuilder, event_id: str, declared_later: Mapping[str, Any] | None = None
) -> dict[str, Any] | None:
    """The review surface of approval (or `needs_approval` decision) `event_id`, from `builder` fed the run's events
    up to and including it (the module docstring); None when the builder holds no such approval or decision.
    `declared_later`: the `effect.intent` the approval names, when the run recorded it after the approval."""
    graph = builder.graph
    approval = graph._approvals.get(event_id)
    asked = next((a for a in builder.asks if a["id"] == event_id), None)
    if approval is None and asked is None:
        return None
    facts = builder.result()
    if approval is not None:
        subject, cutoff = approval.subject, approval.seq
    else:
        assert asked is not None
        subject, cutoff = asked["subject"], asked["seq"]
    later_seq = None
    if (
        declared_later is not None
        and subject is not None
        and subject not in graph._intents
        and declared_later.get("kind") == "effect.intent"
        and declared_later.get("id") == subject
        and isinstance(declared_later.get("seq"), int)
        and declared_later["seq"] > cutoff
    ):
        graph.add(dict(declared_later))  # the intent's declaration only: the facts stay as they stood (docstring)
        later_seq = declared_later["seq"]
    intent_id = subject if subject in graph._intents else None
    if intent_id is None and subject is not None:
        # a decision on an artifact or a proposal: the intent that names it, if one was recorded yet
        intent_id = next(
            (i for i, v in builder.intents.items() if subject in (v.get("artifact"), v.get("proposal"))), None
        )
    intent = graph._intents.get(intent_id) if intent_id is not None else None
    review = review_object(graph, intent_id, cutoff, approval) if intent_id is not None else None
    decision = builder.decision_on(intent_id or subject)
    if asked is not None and (decision is None or decision["seq"] < asked["seq"]):
        decision = asked
    workspaces_named: list[str] = []
    if review is not None:
        artifact = review.get("artifact") or {}
        for w in [artifact.get("workspace_id")] + [
            x for e in review["evidence"] for x in (e.get("workspace_id"), (e.get("receipt") or {}).get("workspace_id"))
        ]:
            if isinstance(w, str) and w not in workspaces_named:
                workspaces_named.append(w)
    if not workspaces_named:  # nothing names a workspace: every workspace the run had, as the approver could see it
        workspaces_named = [w["id"] for w in facts["workspaces"]["items"]]
    surface: dict[str, Any] = {
        "event": event_id,
        "kind": "approval" if approval is not None else "request",
        "seq": cutoff,
        "subject": subject,
        "intent": intent_id,
        "intent_recorded": intent is not None,
        "intent_declared_at": later_seq,  # the seq of an intent declared after the approval, else None
        "effect": review["effect"] if review else None,
        "artifact": review["artifact"] if review else None,
        "evidence": review["evidence"] if review else [],
        "review_object": review,
        "review_digest": review_digest(review) if review is not None else None,
        "workspaces": _workspace_lineage(facts, workspaces_named),
        "required": _required(builder, facts, review, decision),
        "unresolved": list(facts["validations"]["problems"]),
        "validation": facts["validations"]["status"],
        "decision": decision,
        "policy_revision": (review or {}).get("policy", {}).get("policy_revision") or graph.policy_revision,
    }
    if approval is not None:
        expected = evidence_set_digest(intent.admissions) if intent is not None else None
        surface["approval"] = {
            "decision": approval.decision,
            "origin": approval.origin,
            "run": approval.run,
            "environment": approval.environment,
            "evidence_set_digest": approval.digest,
            "intent_evidence_digest": expected,
            # None: the intent was not recorded yet, so what the digest should be is not known at the approval.
            "binds_evidence": (approval.digest == expected) if expected is not None else None,
            "recorded_review_digest": approval.review_digest,
            "review_digest_matches": (
                approval.review_digest == surface["review_digest"]
                if approval.review_digest is not None and surface["review_digest"] is not None
                else None
            ),
            "expires_at": approval.expires_at,
            "actor_role": (builder.approvals.get(event_id) or {}).get("actor_role"),
            # LIN005's own words for why this approval is no authority in this run (read-only evidence), if it is not
            "not_authority": [f.message for f in check_foreign(graph, "This run", event_id, event_id, approval)],
        }
    return surface
