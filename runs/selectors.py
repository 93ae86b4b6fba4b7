"""Reads of the run graph. Writes live in importer.py (and, later, the replay services)."""

from __future__ import annotations

from typing import Any

from django.db.models import Case, Count, F, OuterRef, Q, QuerySet, Subquery, Sum, When
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce

from n17q_engine.lineage import Finding as LineageFinding
from n17q_engine.lineage import LineageGraph

from .models import Event, Run


def run_get(run_id: str) -> Run:
    return Run.objects.get(run_id=run_id)


def run_lineage_graph(run: Run) -> LineageGraph:
    """A stored run's evidence graph with today's rules, its events streamed in append order."""
    graph = LineageGraph(run.manifest_run)
    for body in Event.objects.filter(run=run).order_by("seq").values_list("body", flat=True).iterator(chunk_size=2000):
        graph.add(body)
    return graph


def run_lineage_check(run: Run) -> list[LineageFinding]:
    """Re-check a stored run with today's rules."""
    return run_lineage_graph(run).findings()


# The `lineage --json` answer lists at most this many findings and counts the rest: a run whose every event names
# something missing would otherwise answer with a finding per event (issue 20).
LINEAGE_FINDINGS_IN_ANSWER = 1000


def run_lineage_json(run: Run, *, limit: int = LINEAGE_FINDINGS_IN_ANSWER) -> dict[str, Any]:
    """The `lineage --json` answer (DESIGN §8), with `unevaluated` (§10): the checks that had nothing to judge.

    Added keys (§10): `findings` holds the first `limit` findings in the checker's order; `finding_count` counts them
    all and `findings_truncated` says some were left out. The checker yields them one source event at a time, so the
    findings left out are counted, never held."""
    graph = run_lineage_graph(run)
    findings: list[dict[str, str]] = []
    count = errors = 0
    for f in graph.iter_findings():
        count += 1
        errors += f.severity == "error"
        if len(findings) < limit:
            findings.append(f.to_json())
    return {
        "run": run.run_id,
        "findings": findings,
        "finding_count": count,
        "error_count": errors,
        "findings_truncated": count > len(findings),
        "unevaluated": graph.unevaluated(),
    }


def run_list(
    *,
    q: str = "",
    state: str = "",
    mode: str = "",
    environment: str = "",
    scenario: str = "",
    findings: str = "",
    replays: bool = False,
    source: str = "",
) -> QuerySet[Run]:
    """Runs for the list page, filtered, newest created first; one query however many runs and replays match
    (paginated by the caller, which adds its count).

    A replay (a run with a parent: a replay's or counterfactual's child run) is counted on its source's row
    (`replay_count`) and listed only with `replays` or when a search names it; it then follows its source, with
    the source's title beside it (`source_title`). `source` narrows the list to one run and its replays. `q` finds a
    run by its id, title, task, a tool of its `tool.call` events or a destination of its `effect.intent` events: the
    last two are kept on the run at import (Run.tools, Run.destinations), so the search reads no events.
    """
    children = Run.objects.filter(parent=OuterRef("pk")).order_by().values("parent")
    child_counts = children.annotate(n=Count("pk")).values("n")
    # What the replays found, shown on the source's row when they are not listed (issue 38: a source whose replay
    # failed open read "none" in the list): the children's stored counts summed, in the same query.
    child_errors = children.annotate(n=Sum("error_count")).values("n")
    child_findings = children.annotate(n=Sum("finding_count")).values("n")
    runs = Run.objects.only(
        "run_id",
        "title",
        "task_id",
        "environment",
        "mode",
        "scenario_name",
        "scenario_version",
        "model_name",
        "model_version",
        "event_count",
        "finding_count",
        "error_count",
        "unevaluated",
        "final_state",
        "imported_at",
        "created_at",
        "parent_run_ref",
        "parent",
    ).annotate(
        replay_count=Coalesce(Subquery(child_counts), 0),
        replay_error_count=Coalesce(Subquery(child_errors), 0),
        replay_finding_count=Coalesce(Subquery(child_findings), 0),
        source_title=F("parent__title"),
        # What happened, from the run's stored facts (issue 34): three short texts read by key, never the whole facts.
        facts_effects=KT("facts__headline__effects"),
        facts_effects_tone=KT("facts__headline__effects_tone"),
        facts_validation=KT("facts__headline__validation"),
    )
    if q:
        runs = runs.filter(
            Q(run_id__icontains=q)
            | Q(title__icontains=q)
            | Q(task_id__icontains=q)
            | Q(tools__icontains=q)
            | Q(destinations__icontains=q)
        )
    if state:
        runs = runs.filter(final_state=state)
    if mode:
        runs = runs.filter(mode=mode)
    if environment:
        runs = runs.filter(environment=environment)
    if scenario:
        runs = runs.filter(scenario_name=scenario)
    if findings == "yes":
        runs = runs.filter(finding_count__gt=0)
    elif findings == "no":
        runs = runs.filter(finding_count=0)
    if source:
        runs = runs.filter(Q(run_id=source) | Q(parent__run_id=source) | Q(parent__parent__run_id=source))
    if not (replays or q or source):
        return runs.filter(parent__isnull=True).order_by("-created_at", "-imported_at", "-id")
    # Families in the list's order: each source, then each of its replays newest created first, each followed by its
    # own replays. A family reaches two generations below its source: a deeper replay opens a family of its own (it
    # still names its source), which keeps this one query without a walk up the tree.
    grandchild = Q(parent__parent__isnull=False)
    return runs.order_by(
        Coalesce("parent__parent__created_at", "parent__created_at", "created_at").desc(),
        Coalesce("parent__parent__imported_at", "parent__imported_at", "imported_at").desc(),
        Coalesce("parent__parent_id", "parent_id", "id").desc(),
        Case(When(parent__isnull=True, then=0), default=1).asc(),
        Case(When(grandchild, then=F("parent__created_at")), default=F("created_at")).desc(),
        Case(When(grandchild, then=F("parent_id")), default=F("id")).desc(),
        Case(When(grandchild, then=1), default=0).asc(),
        "-created_at",
        "-imported_at",
        "-id",
    )


def replay_runs_imported(*, source: str = "") -> QuerySet[Run]:
    """Replay runs that came in as runs (a harness's own replay, imported with its `parent_run_ref`), not launched
    here: the replays page lists them beside the launched replays (issue 38: a story's fail-open replay was
    reachable from its source only through the run list). One query, newest created first."""
    runs = (
        Run.objects.filter(parent__isnull=False, replay_of__isnull=True)
        .select_related("parent")
        .only(
            "run_id",
            "title",
            "mode",
            "environment",
            "scenario_name",
            "scenario_version",
            "event_count",
            "finding_count",
            "error_count",
            "final_state",
            "created_at",
            "parent__run_id",
            "parent__title",
        )
    )
    if source:
        runs = runs.filter(parent__run_id=source)
    return runs.order_by("-created_at", "-id")


def run_list_facts(rows: Any) -> None:
    """Give the listed runs stored without facts (imported before issue 34) their facts now, saved (runs/facts.py):
    a query or two per such run, once; a run with facts costs nothing here."""
    from .facts import facts_of

    for row in rows:
        if row.facts_validation is None:
            headline = facts_of(Run.objects.get(pk=row.pk))["headline"]
            row.facts_effects = headline["effects"]
            row.facts_effects_tone = headline["effects_tone"]
            row.facts_validation = headline["validation"]
