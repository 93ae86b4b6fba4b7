"""The verdict: findings grouped by root cause (same code, meeting at an end), one sentence per group."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from runs.importer import run_import_from_path
from runs.models import Finding, Run
from runs.verdict import group_findings
from tests import bundles


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


@pytest.mark.django_db
def test_a_run_page_never_shows_a_run_without_inputs_as_clean(client, role_user):
    # DESIGN §10 / issue 17 point 4: the example bundle has no workspaces, admissions, approvals or effects. Its
    # page said "No lineage findings" in green; now it says which checks had nothing to judge.
    run_import_from_path(bundles.EXAMPLE)
    client.force_login(role_user("viewer"))
    html = client.get("/runs/run-example-docs/").content.decode()
    headline = html[html.index('id="findings-h"') :]
    headline = headline[: headline.index("</h2>")]
    assert 'class="headline partial"' in headline
    assert "No lineage findings in the 2 checks that had something to judge; 15 not evaluated" in headline
    assert '<details class="unevaluated" id="unevaluated">' in html  # folded: the headline already says it
    assert (
        '<strong>LIN009</strong></a> <span class="muted">uncertain workspace reused</span> — not evaluated: '
        "the run holds no workspaces"
    ) in html


@pytest.mark.django_db
def test_a_run_with_findings_lists_what_was_not_evaluated_beside_them(client, role_user, capsys):
    call_command("load_demo", "--json")
    capsys.readouterr()
    client.force_login(role_user("viewer"))
    # Story 001's naive replay: a duplicate delivery and a foreign approval, and no workspaces or receipts at all.
    run = Run.objects.get(run_id="run-001-naive-replay")
    assert run.finding_count and "LIN009" in {u["code"] for u in run.unevaluated}
    assert Run.objects.get(run_id="run-003-review-request").unevaluated == []  # story 003 holds every input
    html = client.get("/runs/run-001-naive-replay/").content.decode()
    assert 'class="headline bad"' in html and 'id="unevaluated">' in html
    for entry in run.unevaluated:
        assert f'<strong>{entry["code"]}</strong></a> <span class="muted">' in html
