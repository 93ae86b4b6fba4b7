"""LIN001, LIN002, LIN003, LIN006, LIN013: whether the evidence a decision or an intent uses fits the artifact.

An external effect may reference an artifact only when every required validation receipt was produced on that
artifact's workspace and tree (or an explicitly recorded compatible ancestor: LIN001), ran to completion (LIN002), no
later workspace event invalidated it (LIN006), its failures are resolved or waived (LIN003), and every purpose the
decision requires has admitted evidence at all (LIN013). These are the rules about one admission (or the lack of one)
against one artifact; which admissions and artifacts a decision or intent brings together is n17q_engine/lineage/
checks.py's to say.

Decisions taken where DESIGN §4 is silent (the project docs cite this list):

- LIN001 compares the artifact's (workspace, tree) with the admission's and also with the receipt behind it (its
  workspace, and its pre- or post-run tree): an admission that merely *says* workspace two while its receipt ran in
  workspace one is the seed-003 failure in disguise. A `compatibility` record counts only when it cites a rule the
  run's policy declares (`run.compatibility_rules`, compatibility.py) and the recorded facts satisfy every part of it:
  the receipt's trees against the artifact's (and, for `content_equal_ancestor`, the derivations between their
  workspaces), the environment revision of the artifact's workspace, the receipt's command, `inputs_digest` and
  `test_isolation`. Otherwise LIN001 stands and names the rule and each failing part; a run that declares no rules
  cannot have one honoured (fail closed). A null post-run tree, or the converters' `unknown`, is a tree nobody knows
  and matches nothing. Evidence bound to no workspace at all (both null, e.g. a docs lookup) and artifacts built
  outside any workspace are out of LIN001's reach.
- LIN003 reads the "artifact's lineage" and the waivers as n17q_engine/lineage/graph.py's docstring says: the latest
  receipt for the purpose across the lineage wins.
- LIN006 for an admission whose compatibility rule holds for the artifact in question: only invalidations after the
  admission count, because such an admission is a deliberate re-use decision taken knowing the ancestor was
  superseded. A rule that does not hold forgives nothing. Without compatibility, a superseded or quarantined
  workspace taints the admission whenever it happened.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator

from ..compatibility import Rule
from .graph import (
    MAX_LINEAGE_DEPTH,
    UNKNOWN_TREE,
    VALIDATION_PREFIX,
    Finding,
    LineageGraph,
    _Admission,
    _Artifact,
    _Decision,
    _finding,
    _Intent,
    _join,
    _Receipt,
    _unique,
)


def check_admission(graph: LineageGraph, admission_id: str, admission: _Admission) -> Iterator[Finding]:
    if not (admission.admitted and admission.purpose.startswith(VALIDATION_PREFIX)):
        return
    receipt_id = graph._source_receipt(admission)
    if receipt_id is None:
        return
    receipt = graph._receipts[receipt_id]
    if receipt.completion != "completed":
        yield _finding(
            "LIN002",
            admission_id,
            receipt_id,
            f"Admission {admission_id} counts receipt {receipt_id} (completion {receipt.completion}, "
            f"workspace {receipt.workspace}) as completed evidence for {admission.purpose}; rerun the "
            f"suite to completion or admit the output for diagnosis only.",
        )


def check_lineage(
    graph: LineageGraph,
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
    receipt_id = graph._source_receipt(admission)
    if receipt_id is None:
        return
    receipt = graph._receipts[receipt_id]
    if receipt.workspace != artifact.workspace or artifact.tree not in receipt.trees:
        yield _finding(
            "LIN001",
            user,
            admission_id,
            f"{what} relies on admission {admission_id} ({admission.purpose or 'no purpose'}), whose receipt "
            f"{receipt_id} ran in workspace {receipt.workspace} at tree {receipt.pre_tree}, but {built}, and "
            f"{reason}; {advice}.",
        )


def rule_unmet(
    graph: LineageGraph, admission: _Admission, artifact_id: str | None, artifact: _Artifact | None
) -> str | None:
    """Why the admission's compatibility record does not make it evidence for the artifact (LIN001's reason, naming
    the rule and each failing part), or None when it cites a rule the run declares whose facts all hold.

    Fail closed: no record, a record naming no rule, a rule the policy does not declare, no command receipt
    behind the admission, or an artifact whose facts are not recorded all leave the rule unmet."""
    if admission.rule is None:
        return "no compatibility rule is recorded"
    if not admission.rule:
        return "its compatibility record names no rule"
    name = admission.rule
    rule = graph.rules.get(name)
    if rule is None:
        declared = _join(sorted(graph.rules)) if graph.rules else None
        said = f"it declares only {declared}" if declared else "it declares no compatibility rules"
        return f"the cited compatibility rule {name} is not declared by the run's policy ({said})"
    receipt_id = graph._source_receipt(admission)
    if receipt_id is None:
        return (
            f"compatibility rule {name} cannot be checked: the admitted evidence is not a command receipt this "
            "run holds"
        )
    if artifact is None:
        return f"compatibility rule {name} cannot be checked: artifact {artifact_id} is not recorded"
    receipt = graph._receipts[receipt_id]
    parts = [_tree_unmet(graph, rule, receipt_id, receipt, artifact_id, artifact)]
    if rule.environment == "same":
        ws = graph._workspaces.get(artifact.workspace) if artifact.workspace is not None else None
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
    graph: LineageGraph, rule: Rule, receipt_id: str, receipt: _Receipt, artifact_id: str | None, artifact: _Artifact
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
        ws = graph._workspaces.get(workspace)
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


def check_fresh(
    graph: LineageGraph, what: str, user: str, used_at: int, admission_id: str, admission: _Admission, compatible: bool
) -> Iterator[Finding]:
    """LIN006: the earliest event before `used_at` that invalidated the admission, if any. `compatible`: the
    admission cites a compatibility rule that holds for the artifact in question (`_rule_unmet`)."""
    causes: list[tuple[int, str, str]] = []
    for seq, event_id in graph._superseded.get(admission_id, ()):
        if seq < used_at:
            causes.append((seq, event_id, f"{event_id} superseded it"))
            break
    workspace = admission.workspace
    if workspace is not None:
        dead = graph._dead.get(workspace, ())
        start = bisect_right(dead, (admission.seq, "\uffff")) if compatible else 0
        for seq, event_id, state in dead[start:]:
            if seq < used_at:
                causes.append((seq, event_id, f"{event_id} marked workspace {workspace} {state}"))
            break
        changes = graph._changes.get(workspace, ())
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


def check_requirements(
    graph: LineageGraph,
    decision_id: str,
    decision: _Decision,
    artifact_id: str,
    intent: _Intent | None,
    artifact: _Artifact | None,
) -> Iterator[Finding]:
    """LIN013 and LIN003 for a decision that allowed `artifact_id` (its subject's artifact): every purpose in its
    `required` list needs admitted evidence for the artifact, and the latest receipt for it on the artifact's lineage
    must have no unwaived failures."""
    subject = decision.subject or artifact_id
    used = [
        graph._admissions[a]
        for a in _unique(decision.inputs + (intent.admissions if intent else ()))
        if a in graph._admissions
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
            yield from _check_failures(graph, decision_id, decision, subject, artifact_id, artifact, purpose, used)


def _check_failures(
    graph: LineageGraph,
    decision_id: str,
    decision: _Decision,
    subject: str,
    artifact_id: str,
    artifact: _Artifact,
    purpose: str,
    used: list[_Admission],
) -> Iterator[Finding]:
    starts = [artifact.workspace, *(a.workspace for a in used if a.purpose == purpose)]
    latest = _latest(graph, starts, decision.seq, purpose)
    if latest is None:
        return
    receipt_id = latest[1]
    receipt = graph._receipts[receipt_id]
    if not receipt.has_failures:
        return
    unwaived = graph._unwaived(receipt_id, receipt, decision.seq)
    if unwaived is None:
        return
    suites = f" in {_join(unwaived)}" if unwaived else ""
    yield _finding(
        "LIN003",
        decision_id,
        receipt_id,
        f"Decision {decision_id} allowed {subject} although the latest {purpose} receipt on the lineage of "
        f"artifact {artifact_id}, {graph._failure_text(receipt_id, receipt)}, has failures{suites} that no "
        f"waiver covers; fix and rerun, or record a waiver.",
    )


def _latest(graph: LineageGraph, starts: Iterable[str | None], cap: int, purpose: str) -> tuple[int, str] | None:
    """The latest (seq, receipt) for `purpose` before `cap` on the lineages of the `starts`."""
    latest: tuple[int, str] | None = None
    for start in _unique(s for s in starts if s is not None):
        for workspace, until in graph._lineage(start, cap):
            if latest is not None and until <= latest[0]:
                break  # caps only shrink going back: no older ancestor can hold a later receipt
            entries = graph._by_purpose.get((workspace, purpose))
            if entries:
                i = bisect_left(entries, (until,))
                if i and (latest is None or entries[i - 1] > latest):
                    latest = entries[i - 1]
    return latest
