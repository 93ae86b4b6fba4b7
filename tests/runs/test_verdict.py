"""The verdict: findings grouped by root cause (same code, meeting at an end), one sentence per group."""

from __future__ import annotations

from runs.models import Finding
from runs.verdict import group_findings


def _finding(pk: int, code: str, a: str, b: str, severity: str = "error") -> Finding:
    return Finding(pk=pk, code=code, severity=severity, from_ref=a, to_ref=b, message=f"{code} {a} {b}")


def test_it_groups_findings_of_one_code_that_meet_at_an_end():
    groups = group_findings(
        [
            _finding(1, "LIN001", "decision", "admission"),
            _finding(2, "LIN001", "intent", "admission"),
            _finding(3, "LIN001", "other-intent", "other-admission"),
            _finding(4, "LIN003", "decision", "admission"),
        ]
    )
    shapes = sorted((g.code, len(g.findings), g.shared) for g in groups)
    assert shapes == [("LIN001", 1, ""), ("LIN001", 2, "admission"), ("LIN003", 1, "")]
    two = next(g for g in groups if len(g.findings) == 2)
    assert two.sentence == "2 findings meet at admission, reached from decision, intent."


def test_it_joins_a_chain_of_findings_through_shared_ends():
    groups = group_findings(
        [_finding(1, "LIN007", "a", "b"), _finding(2, "LIN007", "b", "c"), _finding(3, "LIN007", "c", "d")]
    )
    assert len(groups) == 1 and len(groups[0].findings) == 3
    assert groups[0].shared in {"b", "c"}


def test_it_puts_errors_before_warnings_and_keeps_a_single_findings_own_sentence():
    groups = group_findings([_finding(1, "LIN009", "x", "y", "warning"), _finding(2, "LIN002", "p", "q")])
    assert [g.code for g in groups] == ["LIN002", "LIN009"]
    assert groups[1].sentence == "LIN009 x y"
