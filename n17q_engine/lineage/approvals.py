"""LIN004, LIN005: whether the approval an effect rests on is this run's approval of exactly this evidence.

LIN004: an intent's approval must be an `approval.recorded` that approves that intent, says yes, and binds the
digest of the intent's own evidence set (what was approved is what is being done); and the review object it approved
(review.py: the effect, the artifact, the admitted evidence's content, the policy revision, the expiry) must be
unchanged between the approval and the intent's action, and equal to the `review_digest` the approval records, if
it records one (issue 34, seed 003: "a changed test, patch, workspace, or policy [...] invalidated approval").
LIN005: an approval a decision or an intent takes its authority from must have been given in this run and environment,
and a historical approval is never authority in a replay. A reconstruction is judged as the run it reconstructs
(n17q_engine/lineage/graph.py), so the recorded run's own approval is not foreign to its own history; a `deny`
decision's approvals are not checked as authority (n17q_engine/lineage/checks.py).
"""

from __future__ import annotations

from collections.abc import Iterator

from ..canonical import evidence_set_digest
from .graph import Finding, LineageGraph, _Approval, _finding, _Intent, _join
from .review import acted_at, executed_after_expiry, review_changes, review_digest, review_object


def check_approval(graph: LineageGraph, what: str, intent_id: str, intent: _Intent) -> Iterator[Finding]:
    """LIN004 and LIN005 for the approval an intent names (`what` says "Intent <id>")."""
    approval_id = intent.approval
    if approval_id is None or (approval_id not in graph._approvals and approval_id not in graph._seq):
        return  # no approval claimed, or a dangling one (LIN011)
    approval = graph._approvals.get(approval_id)
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
    now = review_object(graph, intent_id, acted_at(graph, intent_id), approval)
    approved = None
    if approval.subject is not None and approval.subject in graph._intents:
        approved = review_object(graph, approval.subject, approval.seq, approval)
    if approval.subject != intent_id:
        differs = ""
        if approved is not None and now is not None:
            changes = [c for c in review_changes(approved, now) if not c.startswith("subject ")]
            if changes:
                differs = f" Against what was approved: {'; '.join(changes)}."
        yield _finding(
            "LIN004",
            intent_id,
            approval_id,
            f"Approval {approval_id} approves {approval.subject}, not intent {intent_id}; record an approval "
            f"whose subject is {intent_id}.{differs}",
        )
    elif approved is not None and now is not None:
        changes = review_changes(approved, now)
        if changes:
            yield _finding(
                "LIN004",
                intent_id,
                approval_id,
                f"Approval {approval_id} no longer binds intent {intent_id}: after it was recorded, "
                f"{'; '.join(changes)}. What was approved is not what is being done; ask for a new approval.",
            )
    if approved is not None and approval.review_digest is not None:
        engine = review_digest(approved)
        if engine != approval.review_digest:
            yield _finding(
                "LIN004",
                intent_id,
                approval_id,
                f"Approval {approval_id} records review digest {approval.review_digest}, but the review object of "
                f"{approval.subject} as this run recorded it at the approval hashes to {engine}: the approver's view "
                "differed from the recorded graph, so ask for a new approval on what the run holds.",
            )
    expired = executed_after_expiry(graph, intent_id, approval.expires_at)
    if expired is not None:
        yield _finding(
            "LIN004",
            intent_id,
            approval_id,
            f"Approval {approval_id} expired at {approval.expires_at}, but intent {intent_id} was first executed "
            f"at {expired}, after it: an expired approval authorizes nothing, so ask for a new approval.",
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
    yield from check_foreign(graph, what, intent_id, approval_id, approval)


def check_foreign(
    graph: LineageGraph, what: str, user: str, approval_id: str, approval: _Approval
) -> Iterator[Finding]:
    reasons = []
    if graph.run_id is not None and approval.run != graph.run_id:
        reasons.append(f"recorded in run {approval.run} (this is {graph.run_id})")
    if graph.environment is not None and approval.environment != graph.environment:
        reasons.append(f"given in environment {approval.environment} (this run is {graph.environment})")
    if approval.origin == "historical" and graph.mode != "recorded":
        reasons.append(f"historical, in a {graph.mode} replay")
    if reasons:
        yield _finding(
            "LIN005",
            user,
            approval_id,
            f"{what} takes its authority from approval {approval_id}: {'; '.join(reasons)}. Historical "
            "approvals are read-only evidence; ask for an approval in this run.",
        )
