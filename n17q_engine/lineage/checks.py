"""The lineage checker's orchestration: which rules judge which event, plugged into the graph.

The graph (graph.py) records events and answers findings one "from" event at a time but imports no rule; this
module gives it the rules (`graph.plug_in`, run when the package is imported): the arrival checks of the families
decided as events arrive (effects.py: LIN007, LIN012, LIN014; workspaces.py: LIN009, LIN010), and `findings_from`,
which brings the resolved families together for one event: a dangling reference (references.py: LIN011), a decision
or an intent (the evidence it uses, evidence.py: LIN001, LIN003, LIN006, LIN013; its approval, approvals.py: LIN004,
LIN005), an admission (LIN002), a claim (claims.py: LIN008, LIN015). The rule families import the graph and never
each other or this module.

Decision taken where DESIGN §4 is silent (the project docs cite this list):

- A `policy.decision` whose outcome is `deny` authorizes nothing, so the evidence and approvals it cites are not
  checked as authority (LIN001, LIN005, LIN006): the corrected gate of seed 003, denying because workspace one's
  receipt does not fit workspace two's artifact, must not itself be a finding.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from . import effects, workspaces
from .approvals import check_approval, check_foreign
from .claims import check_claim
from .evidence import check_admission, check_fresh, check_lineage, check_requirements, rule_unmet
from .graph import Finding, Handler, LineageGraph, _Decision, _Intent, _unique, plug_in
from .references import dangling


def findings_from(graph: LineageGraph, event_id: str) -> Iterator[Finding]:
    """The findings whose "from" is `event_id` (`LineageGraph._findings_from`)."""
    yield from graph._found.get(event_id, ())
    yield from dangling(graph, event_id)
    decision = graph._decisions.get(event_id)
    if decision is not None:
        yield from _check_decision(graph, event_id, decision)
        return
    intent = graph._intents.get(event_id)
    if intent is not None:
        yield from _check_intent(graph, event_id, intent)
        return
    admission = graph._admissions.get(event_id)
    if admission is not None:
        yield from check_admission(graph, event_id, admission)
        return
    claim = graph._claims.get(event_id)
    if claim is not None:
        yield from check_claim(graph, event_id, claim)


def _check_decision(graph: LineageGraph, decision_id: str, decision: _Decision) -> Iterator[Finding]:
    if decision.outcome == "deny":
        return
    artifact_id, intent = graph._subject_artifact(decision.subject)
    artifact = graph._artifacts.get(artifact_id) if artifact_id is not None else None
    what = f"Decision {decision_id}"
    for input_id in _unique(decision.inputs):
        admission = graph._admissions.get(input_id)
        if admission is not None:
            unmet = rule_unmet(graph, admission, artifact_id, artifact)
            if artifact is not None:
                yield from check_lineage(graph, what, decision_id, input_id, admission, artifact_id, artifact, unmet)
            yield from check_fresh(graph, what, decision_id, decision.seq, input_id, admission, unmet is None)
        approval = graph._approvals.get(input_id)
        if approval is not None:
            yield from check_foreign(graph, what, decision_id, input_id, approval)
    if decision.outcome != "allow" or artifact_id is None:
        return
    yield from check_requirements(graph, decision_id, decision, artifact_id, intent, artifact)


def _check_intent(graph: LineageGraph, intent_id: str, intent: _Intent) -> Iterator[Finding]:
    artifact = graph._artifacts.get(intent.artifact) if intent.artifact is not None else None
    what = f"Intent {intent_id}"
    for admission_id in _unique(intent.admissions):
        admission = graph._admissions.get(admission_id)
        if admission is None:
            continue
        unmet = rule_unmet(graph, admission, intent.artifact, artifact)
        if artifact is not None:
            yield from check_lineage(graph, what, intent_id, admission_id, admission, intent.artifact, artifact, unmet)
        yield from check_fresh(graph, what, intent_id, intent.seq, admission_id, admission, unmet is None)
    yield from check_approval(graph, what, intent_id, intent)


def _arrival_checks(*families: dict[str, Handler]) -> dict[str, tuple[Handler, ...]]:
    checks: dict[str, tuple[Handler, ...]] = {}
    for family in families:
        for kind, check in family.items():
            checks[kind] = (*checks.get(kind, ()), check)
    return checks


plug_in(_arrival_checks(workspaces.ARRIVAL_CHECKS, effects.ARRIVAL_CHECKS), findings_from)


def check_events(run: dict, events: Iterable[dict]) -> list[Finding]:
    """Build the graph of `events` (validated, in seq order) and return its findings."""
    graph = LineageGraph(run)
    for event in events:
        graph.add(event)
    return graph.findings()
