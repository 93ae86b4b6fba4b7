"""LIN015 (seed 003, "The simulated world stayed independent": the broad command contradicted completion): a claim
about an artifact is contradicted by a failed or unfinished receipt for the claimed scope on that artifact's lineage,
unless the claim cites it (then LIN008 judges it as a support)."""

from __future__ import annotations

from n17q_engine.lineage import Finding, LineageGraph, check_events

from .eventlib import EventLog

BROAD = "validation:broad"


def two_workspaces() -> tuple[EventLog, str]:
    """Broad passes in workspace one at t1; workspace two is derived from it, patched to t2 and built into art2.
    Returns the log and workspace one's passing broad receipt."""
    log = EventLog()
    log.attempt()
    log.workspace("ws1")
    log.change("ws1", "t1")
    green = log.receipt("ws1", "t1", suites=("broad",), id="green-broad")
    log.observe(green, "ws1", "t1", scope=BROAD)
    log.workspace("ws2", parent="ws1", relation="branch", content_equal=True)
    log.change("ws2", "t2")
    log.artifact("art2", "ws2", "t2")
    return log, green


def lin015(log: EventLog) -> list[Finding]:
    return [f for f in check_events(log.run, log.events) if f.code == "LIN015"]


def test_a_claim_citing_an_old_green_receipt_is_contradicted_by_the_artifacts_failing_one():
    log, green = two_workspaces()
    red = log.receipt("ws2", "t2", suites=("broad",), failed=2, exit_code=1, id="red-broad")
    log.claim([green], scope=[BROAD], artifact_id="art2", id="claim")
    (found,) = lin015(log)
    assert (found.from_, found.to, found.severity) == ("claim", red, "error")
    assert "speaks for artifact art2" in found.message and "2 failed" in found.message
    assert "for validation:broad reports failures" in found.message
    # LIN008 reads the lineage of the supports (workspace one), which never saw workspace two's failure.
    assert not [f for f in check_events(log.run, log.events) if f.code == "LIN008"]


def test_an_unfinished_receipt_contradicts_as_well():
    log, green = two_workspaces()
    timed_out = log.receipt(
        "ws2", "t2", suites=("broad",), completion="termination_unknown", exit_code=None, post_tree=None, id="timeout"
    )
    log.claim([green], scope=[BROAD], artifact_id="art2", id="claim")
    (found,) = lin015(log)
    assert found.to == timed_out and "completion termination_unknown" in found.message
    assert "did not complete" in found.message


def test_the_artifact_may_come_from_an_admission_the_claim_cites():
    log, green = two_workspaces()
    red = log.receipt("ws2", "t2", suites=("broad",), failed=1, exit_code=1, id="red-broad")
    admission = log.admit(log.observe(green, "ws1", "t1", scope=BROAD), BROAD, "art2", "ws1", "t1")
    log.claim([admission], scope=[BROAD], id="claim")
    assert [f.to for f in lin015(log)] == [red]


def test_a_cited_failing_receipt_is_lin008s_not_lin015s():
    log, green = two_workspaces()
    red = log.receipt("ws2", "t2", suites=("broad",), failed=1, exit_code=1, id="red-broad")
    log.claim([green, red], scope=[BROAD], artifact_id="art2", id="claim")
    findings = check_events(log.run, log.events)
    assert [(f.code, f.to) for f in findings if f.to == red] == [("LIN008", red)]


def test_a_waived_failure_or_a_passing_rerun_no_longer_contradicts():
    log, green = two_workspaces()
    red = log.receipt("ws2", "t2", suites=("broad",), failed=1, exit_code=1, id="red-broad")
    log.emit("waiver.granted", failure=red, suite="broad")
    log.claim([green], scope=[BROAD], artifact_id="art2", id="claim")
    assert lin015(log) == []

    log, green = two_workspaces()
    log.receipt("ws2", "t2", suites=("broad",), failed=1, exit_code=1, id="red-broad")
    log.receipt("ws2", "t2", suites=("broad",), id="green-again")
    log.claim([green], scope=[BROAD], artifact_id="art2", id="claim")
    assert lin015(log) == []


def test_a_failure_outside_the_claimed_scope_does_not_contradict():
    log, green = two_workspaces()
    log.receipt("ws2", "t2", suites=("lint",), failed=1, exit_code=1, id="red-lint")
    log.claim([green], scope=[BROAD], artifact_id="art2", id="claim")
    assert lin015(log) == []


def test_what_the_ancestor_did_after_the_fork_is_not_the_artifacts_history():
    log, green = two_workspaces()
    log.receipt("ws1", "t1", suites=("broad",), failed=1, exit_code=1, id="red-after-fork")
    log.claim([green], scope=[BROAD], artifact_id="art2", id="claim")
    assert lin015(log) == []


def _graph(log: EventLog) -> LineageGraph:
    graph = LineageGraph(log.run)
    for event in log.events:
        graph.add(event)
    return graph


def test_a_claim_that_names_no_artifact_speaks_for_its_supports_workspace_and_tree():
    """Issue 34: "All tests pass" cites a focused receipt while the broad suite on the same workspace and tree timed
    out (no failure counted, so LIN008's open failures never saw it); the claim speaks for ws1 at t1."""
    log = EventLog()
    log.attempt()
    log.workspace("ws1")
    log.change("ws1", "t1")
    focused = log.receipt("ws1", "t1", suites=("adapter",), id="focused")
    broad = log.receipt(
        "ws1",
        "t1",
        suites=("unit", "integration"),
        completion="termination_unknown",
        exit_code=None,
        post_tree=None,
        results={},
        id="broad",
    )
    log.claim([focused], text="All tests pass.", id="claim")
    graph = _graph(log)
    (found,) = graph.findings()
    assert (found.code, found.from_, found.to) == ("LIN015", "claim", broad)
    assert "names no artifact" in found.message and "workspace ws1 at tree" in found.message
    assert "did not complete" in found.message
    assert not [u for u in graph.unevaluated() if u["code"] in ("LIN008", "LIN015")]


def test_a_claim_without_artifact_reads_its_supports_lineage_up_to_the_fork_on_the_same_tree():
    # ws2 is a content-equal copy of ws1 at t1 before its change: a broad failure there on t1 was its history too.
    log = EventLog()
    log.attempt()
    log.workspace("ws1")
    log.change("ws1", "t1")
    red = log.receipt("ws1", "t1", suites=("broad",), completion="harness_interrupted", exit_code=None, id="red")
    log.workspace("ws2", parent="ws1", relation="reconstruct", content_equal=True)
    focused = log.receipt("ws2", "t1", suites=("focused",), id="focused")
    log.claim([focused], id="claim")
    assert [(f.code, f.to) for f in _graph(log).findings()] == [("LIN015", red)]


def test_a_failure_on_another_tree_of_the_workspace_is_not_what_the_claim_speaks_for():
    log = EventLog()
    log.attempt()
    log.workspace("ws1")
    log.change("ws1", "t1")
    log.receipt("ws1", "t1", suites=("broad",), completion="harness_interrupted", exit_code=None, id="old")
    log.change("ws1", "t2")
    focused = log.receipt("ws1", "t2", suites=("focused",), id="focused")
    log.claim([focused], id="claim")
    graph = _graph(log)
    assert graph.findings() == []
    assert not [u for u in graph.unevaluated() if u["code"] == "LIN015"]


def test_a_claim_narrowed_to_what_passed_is_not_contradicted_at_its_supports_tree():
    log = EventLog()
    log.attempt()
    log.workspace("ws1")
    log.change("ws1", "t1")
    focused = log.receipt("ws1", "t1", suites=("focused",), id="focused")
    log.receipt("ws1", "t1", suites=("broad",), completion="termination_unknown", exit_code=None, id="broad")
    log.claim([focused], scope=["validation:focused"], id="claim")
    assert _graph(log).findings() == []


def test_a_claim_whose_supports_disagree_on_workspace_or_tree_is_not_evaluated_and_says_so():
    log, green = two_workspaces()
    other = log.receipt("ws2", "t2", suites=("focused",), id="green-focused")
    log.receipt("ws2", "t2", suites=("broad",), completion="harness_interrupted", exit_code=None, id="red-broad")
    log.claim([green, other], id="claim")
    graph = _graph(log)
    assert not [f for f in graph.findings() if f.code == "LIN015"]
    (entry,) = [u for u in graph.unevaluated() if u["code"] == "LIN015"]
    assert entry["events"] == ["claim"]
    assert "supports disagree on workspace or tree" in entry["reason"]
    assert "ws1 at" in entry["reason"] and "ws2 at" in entry["reason"]


def test_a_claim_with_neither_artifact_nor_a_receipts_workspace_and_tree_is_not_evaluated_for_lin015():
    log, _green = two_workspaces()
    log.receipt("ws2", "t2", suites=("broad",), failed=1, exit_code=1, id="red-broad")
    result = log.emit("tool.result", call_id=log.emit("tool.call"))
    log.claim([result], scope=[BROAD], id="claim")
    graph = _graph(log)
    assert not [f for f in graph.findings() if f.code == "LIN015"]
    (entry,) = [u for u in graph.unevaluated() if u["code"] == "LIN015"]
    assert entry["events"] == ["claim"]
    assert "1 claim names no artifact and no workspace and tree of a receipt among its supports" in entry["reason"]


def test_a_run_without_artifacts_is_judged_for_lin015_at_its_claims_supports():
    log = EventLog()
    log.attempt()
    log.workspace("ws1")
    log.change("ws1", "t1")
    focused = log.receipt("ws1", "t1", suites=("focused",), id="focused")
    log.claim([focused], scope=["validation:focused"], id="claim")
    assert not [u for u in _graph(log).unevaluated() if u["code"] in ("LIN008", "LIN015")]
