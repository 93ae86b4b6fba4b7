"""LIN008, LIN015: whether a validation or completion claim is what its evidence and its artifact's history say.

LIN008 judges a claim by what it cites: its supports must be completed, passing receipts covering the claimed scope,
and no failure left open on the lineage of their workspaces may contradict it. LIN015 (extension, seed 003) judges it
by what it leaves out: a failed or unfinished receipt for the claimed scope on the lineage of the artifact it speaks
for. Which claims are judged at all is `codes.claim_is_judged`; the lineage walk and the waivers are
n17q_engine/lineage/graph.py's.

Decisions taken where DESIGN §4 is silent (the project docs cite this list):

- LIN008 with no `scope` on the claim takes the `required` list of the latest decision before the claim that has one
  (a later decision about a docs lookup with `required: []` does not erase the gate's requirement). A supported
  receipt that reports failures is itself a contradiction. A waived failure, or one followed by a passing rerun of the
  same purpose or suite on the lineage, no longer contradicts.
- LIN015 (extension): a judged claim speaks for the artifacts it names (`artifact_id`) and those of the admissions
  among its supports. A receipt on such an artifact's lineage (as above, up to the claim) that failed or did not
  complete, for the claim's scope (its purposes or suites meet the scope; with no scope, any receipt that speaks for a
  purpose or suite), contradicts it unless the claim cites it (then LIN008 judges it as a support, and a receipt
  LIN008 already reported is not reported twice), a waiver covers it, or a completed passing rerun of the same purpose
  followed it on that lineage.
- LIN015 for a claim that names no artifact (issue 34): it speaks for the workspace and tree its supports ran at (the
  receipts behind them, a receipt's last recorded tree), so the receipts judged are those on that workspace's lineage
  (as above) that ran at that same tree: "All tests pass" citing a focused receipt is contradicted by the broad run
  that timed out on the same workspace and tree. Failures on another tree of the workspace are not what it speaks for.
  When the supports hold no receipt with a known workspace and tree, or disagree on them (two workspaces, two trees),
  the claim is listed under `unevaluated()` for LIN015 with the reason (naming the spots it could not choose between),
  never passed.
- A claim a replay marked `unevaluated` (it rests on a tool the scenario excludes) is neither supported nor
  contradicted: LIN008 skips it and `unevaluated()` names it (n17q_engine/lineage/codes.py).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator

from .graph import _ANY_PURPOSE, Finding, LineageGraph, _Claim, _finding, _join, _Receipt, _unique


def check_claim(graph: LineageGraph, claim_id: str, claim: _Claim) -> Iterator[Finding]:
    supported, starts = _claim_supports(graph, claim)
    label = f"Claim {claim_id} ({claim.kind})"
    if not supported:
        yield _finding(
            "LIN008",
            claim_id,
            claim_id,
            f"{label} cites no command receipt; link it to the completed receipts that support it, or "
            f"narrow it to what the evidence shows.",
        )
        yield from _check_claim_artifacts(graph, claim_id, claim, label, _claim_scope(graph, claim), set())
        return
    reported: set[str] = set()
    covered: set[str] = set()
    for receipt_id, cited in supported.items():
        receipt = graph._receipts[receipt_id]
        if receipt.completion != "completed":
            reported.add(receipt_id)
            yield _finding(
                "LIN008",
                claim_id,
                receipt_id,
                f"{label} rests on receipt {receipt_id}, whose completion is {receipt.completion}, not "
                f"completed; partial output cannot support it.",
            )
        elif receipt.has_failures and graph._unwaived(receipt_id, receipt, claim.seq) is not None:
            reported.add(receipt_id)
            yield _finding(
                "LIN008",
                claim_id,
                receipt_id,
                f"{label} rests on {graph._failure_text(receipt_id, receipt)}, which reports failures.",
            )
        else:
            covered.update(cited, receipt.suites, graph._purposes.get(receipt_id, ()))
    scope = _claim_scope(graph, claim)
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
    for receipt_id in _open_failures(graph).get(claim_id, ()):
        if receipt_id in reported:
            continue
        receipt = graph._receipts[receipt_id]
        speaks_for = graph._purposes.get(receipt_id, set()).union(receipt.suites)
        if scope and speaks_for and speaks_for.isdisjoint(scope):
            continue  # a failure outside the claim's scope: the claim was narrowed around it
        if graph._unwaived(receipt_id, receipt, claim.seq) is None:
            continue
        if lineage is None:
            lineage = {}
            for start in starts:
                lineage.update(dict.fromkeys(graph._lineage(start, claim.seq)))
        if _rerun(graph, receipt_id, receipt, lineage):
            continue
        reported.add(receipt_id)
        yield _finding(
            "LIN008",
            claim_id,
            receipt_id,
            f"{label} is contradicted by {graph._failure_text(receipt_id, receipt)}, which reports failures "
            f"that were neither waived nor followed by a passing rerun before the claim.",
        )
    yield from _check_claim_artifacts(graph, claim_id, claim, label, scope, supported.keys() | reported)


def _claim_scope(graph: LineageGraph, claim: _Claim) -> tuple[str, ...]:
    if claim.scope is not None:
        return claim.scope
    i = bisect_left(graph._requirements, (claim.seq,))
    if i == 0:
        return ()
    return graph._decisions[graph._requirements[i - 1][1]].required


def _claim_supports(graph: LineageGraph, claim: _Claim) -> tuple[dict[str, set[str]], list[str]]:
    """The receipts behind a claim's supports (with the purposes they were cited for), and their workspaces."""
    supported = graph._claim_receipts(claim)
    starts = _unique(w for w in (graph._receipts[r].workspace for r in supported) if w is not None)
    return supported, starts


def _claim_places(graph: LineageGraph, claim: _Claim) -> list[tuple[str, str, str | None]]:
    """What a claim speaks for, as (words, workspace, tree): its artifacts (any tree of their lineage), or, when it
    names none, the one workspace and tree its supports ran at (that tree only). Nothing when neither is known or the
    supports disagree (`LineageGraph.unevaluated` says so)."""
    places: list[tuple[str, str, str | None]] = []
    artifacts = graph._claim_artifacts(claim)
    for artifact_id in artifacts:
        artifact = graph._artifacts.get(artifact_id)
        if artifact is not None and artifact.workspace is not None:
            places.append((f"speaks for artifact {artifact_id}", artifact.workspace, None))
    if not artifacts:
        spots = graph._claim_spots(claim)
        if len(spots) == 1:
            workspace, tree = spots[0]
            places.append(
                (
                    f"names no artifact, so it speaks for workspace {workspace} at tree {tree}, where its supports ran",
                    workspace,
                    tree,
                )
            )
    return places


def _check_claim_artifacts(
    graph: LineageGraph, claim_id: str, claim: _Claim, label: str, scope: tuple[str, ...], skip: set[str]
) -> Iterator[Finding]:
    """LIN015: a failed or unfinished receipt for the claim's scope on the lineage of what it speaks for
    (`_claim_places`) that the claim does not cite (a cited one is LIN008's to judge, `skip`), neither waived nor
    rerun with success before the claim."""
    candidates = [r for r in _unique(_open_on_artifacts(graph).get(claim_id, ())) if r not in skip]
    if not candidates:
        return
    for words, workspace, tree in _claim_places(graph, claim):
        spots = dict.fromkeys(graph._lineage(workspace, claim.seq))
        caps = dict(spots.keys())
        for receipt_id in candidates:
            if receipt_id in skip:
                continue
            receipt = graph._receipts[receipt_id]
            cap = caps.get(receipt.workspace) if receipt.workspace is not None else None
            if cap is None or receipt.seq >= cap:
                continue  # not on this lineage (another artifact of the claim's, perhaps)
            if tree is not None and tree not in receipt.trees:
                continue  # another tree than the one the claim's supports ran at
            speaks_for = graph._purposes.get(receipt_id, set()).union(receipt.suites)
            if not speaks_for or (scope and speaks_for.isdisjoint(scope)):
                continue  # not a validation of the claimed scope (an unfinished `ls` contradicts nothing)
            if graph._unwaived(receipt_id, receipt, claim.seq) is None or _rerun(graph, receipt_id, receipt, spots):
                continue
            skip.add(receipt_id)
            what = "reports failures" if receipt.has_failures else "did not complete"
            within = f" for {_join(sorted(speaks_for.intersection(scope)))}" if scope else ""
            yield _finding(
                "LIN015",
                claim_id,
                receipt_id,
                f"{label} {words}, but {graph._failure_text(receipt_id, receipt)} on its lineage{within} {what}, "
                f"and the claim neither cites it nor was it waived or followed by a passing rerun; cite it and "
                f"narrow the claim, or rerun to completion.",
            )


def _passing_after(graph: LineageGraph, workspace: str, key: str, seq: int) -> int | None:
    """The seq of the first completed, passing receipt filed under (workspace, key) after `seq`."""
    entries = graph._by_purpose.get((workspace, key))
    if not entries:
        return None
    memo = graph._memo().setdefault("passing", {})
    following = memo.get((workspace, key))
    if following is None:
        following = [None] * (len(entries) + 1)
        nearest = None
        for i in range(len(entries) - 1, -1, -1):
            receipt = graph._receipts[entries[i][1]]
            if receipt.completion == "completed" and not receipt.has_failures:
                nearest = entries[i][0]
            following[i] = nearest
        memo[(workspace, key)] = following
    return following[bisect_right(entries, (seq, "\uffff"))]


def _waived_at(graph: LineageGraph, receipt_id: str, receipt: _Receipt) -> int | None:
    """The seq from which waivers cover every failing suite of the receipt (see `_unwaived`)."""
    waivers = graph._waivers.get(receipt_id)
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


def _open_failures(graph: LineageGraph) -> dict[str, list[str]]:
    """claim id -> the failing receipts on its lineage that its own workspace had not resolved by then.

    One sweep per workspace over its failures (opened at their seq, closed by a full waiver or by the first
    passing rerun of the same purpose or suite there) and the claims that look at it, so the cost follows
    the failures still open rather than every failure times every claim. The claim check then applies the
    exact tests (waivers up to the claim, reruns anywhere on its lineage) to these few.
    """
    memo = graph._memo()
    index = memo.get("open")
    if index is not None:
        return index
    queries: dict[str, list[tuple[int, str]]] = {}
    for claim_id, claim in graph._claims.items():
        for start in _claim_supports(graph, claim)[1]:
            for workspace, cap in graph._failing_lineage(start, claim.seq):
                if graph._failing.get(workspace):
                    queries.setdefault(workspace, []).append((min(cap, claim.seq), claim_id))
    index = _sweep(graph, graph._failing, queries)
    memo["open"] = index
    return index


def _open_on_artifacts(graph: LineageGraph) -> dict[str, list[str]]:
    """claim id -> the failed or unfinished receipts on the lineages of what it speaks for (`_claim_places`) that
    their own workspace had not resolved by then (LIN015's candidates; the claim check applies the exact tests), by
    the sweep of `_open_failures`."""
    memo = graph._memo()
    index = memo.get("open_unsettled")
    if index is not None:
        return index
    queries: dict[str, list[tuple[int, str]]] = {}
    for claim_id, claim in graph._claims.items():
        for _words, start, _tree in _claim_places(graph, claim):
            for workspace, cap in graph._lineage(start, claim.seq):
                if graph._unsettled.get(workspace):
                    queries.setdefault(workspace, []).append((cap, claim_id))
    index = _sweep(graph, graph._unsettled, queries)
    memo["open_unsettled"] = index
    return index


def _sweep(
    graph: LineageGraph, receipts: dict[str, list[tuple[int, str]]], queries: dict[str, list[tuple[int, str]]]
) -> dict[str, list[str]]:
    """Per workspace, the receipts of `receipts` still open (neither rerun there nor waived) at each query's seq."""
    index: dict[str, list[str]] = {}
    never = float("inf")
    for workspace, asked in queries.items():
        asked.sort()
        opened: list[tuple[int, str]] = []
        closed: list[tuple[float, str]] = []
        for seq, receipt_id in receipts[workspace]:
            receipt = graph._receipts[receipt_id]
            ends = [
                _passing_after(graph, workspace, key, seq)
                for key in (graph._purposes.get(receipt_id) or (_ANY_PURPOSE,))
            ]
            ends.append(_waived_at(graph, receipt_id, receipt))
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


def _rerun(graph: LineageGraph, receipt_id: str, receipt: _Receipt, spots: dict[tuple[str, int], None]) -> bool:
    """Whether a completed, passing receipt for the same purpose or suite followed the failing one."""
    keys = graph._purposes.get(receipt_id) or {_ANY_PURPOSE}
    for workspace, cap in spots:
        for key in keys:
            later = _passing_after(graph, workspace, key, receipt.seq)
            if later is not None and later < cap:
                return True
    return False
