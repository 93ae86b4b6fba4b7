"""The verdict at the top of a run page: what the run is, what went wrong in one sentence per root cause, and
the objects an investigator will want next (attempts, workspaces, artifacts, effects, approvals) as chips.

Findings are grouped by root cause: the same code meeting at the same end (two LIN001 findings whose
admission is the same are one broken edge used twice). Bounded reads only: the first FINDINGS_GROUPED
findings, the first CHIPS objects and key events, each through an index that leads with the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from n17q_engine.facts import effects_label, models_label, validation_label
from n17q_engine.lineage import CODES

from .facts import facts_of
from .models import Event, Finding, Run, RunObject

FINDINGS_GROUPED = 200
CHIPS = 12
KEY_KINDS = ("effect.intent", "effect.execution", "world.transition", "approval.recorded")


@dataclass
class FindingGroup:
    code: str
    title: str
    severity: str
    findings: list[Finding]
    shared: str  # the end every finding of the group meets at ("" when a single finding)

    @property
    def ends(self) -> list[str]:
        refs: list[str] = []
        for f in self.findings:
            for ref in (f.from_ref, f.to_ref):
                if ref != self.shared and ref not in refs:
                    refs.append(ref)
        return refs

    @property
    def sentence(self) -> str:
        """One sentence for the group: the finding's own for one; where they meet and from where for several."""
        if len(self.findings) == 1:
            return self.findings[0].message
        return f"{len(self.findings)} findings meet at {self.shared}, reached from {', '.join(self.ends)}."


@dataclass
class Chip:
    kind: str  # attempt, workspace, artifact, effect, approval, delivery…
    ref: str  # what focusing it selects
    label: str
    tone: str = ""  # "bad" when the chip is an end of a finding or carries a warning of its own
    note: str = ""


@dataclass(frozen=True)
class FactLine:
    """One sentence of what happened, from the run's facts (runs/facts.py): the same words every page uses."""

    key: str  # effects, validation, workspaces, approvals
    label: str
    text: str
    tone: str = ""  # "bad" when the fact is a problem


def fact_lines(facts: dict[str, Any]) -> list[FactLine]:
    effects, workspaces, approvals = facts["effects"], facts["workspaces"], facts["approvals"]
    lines = [
        FactLine(
            "effects",
            "Effects",
            effects_label(facts)
            + ("" if effects["at_most_one_delivery"] else "; at most one delivery per intent does not hold (LIN012)")
            + (f"; {len(effects['left_containment'])} left containment" if effects["left_containment"] else ""),
            "" if effects["at_most_one_delivery"] and not effects["left_containment"] else "bad",
        ),
        FactLine(
            "validation",
            "Validation",
            validation_label(facts),
            "bad" if facts["validations"]["status"] == "incomplete" else "",
        ),
    ]
    items = workspaces["items"]
    if items:
        names = ", ".join(
            w["id"] + (f" ({w['state']})" if w.get("state") not in (None, "active") else "") for w in items[:CHIPS]
        )
        more = f" and {workspaces['count'] - CHIPS} more" if workspaces["count"] > CHIPS else ""
        text = f"{workspaces['count']} workspace{'s' if workspaces['count'] != 1 else ''}: {names}{more}"
    else:
        text = "no workspaces in this run"
    lines.append(FactLine("workspaces", "Workspaces", text))
    if approvals["count"]:
        unbound = [a["id"] for a in approvals["items"] if a.get("binds_evidence") is False]
        foreign = [a["id"] for a in approvals["items"] if not a.get("own")]
        text = f"{approvals['count']} approval{'s' if approvals['count'] != 1 else ''}"
        if unbound:
            text += f"; {len(unbound)} not of its intent's evidence set"
        # Issue 34: what the approval approved (its review object) changed before its intent was acted on.
        stale = [a["id"] for a in approvals["items"] if a.get("still_binds") is False and a["id"] not in unbound]
        if stale:
            text += f"; {len(stale)} no longer binding what was approved"
        if foreign:
            text += f"; {len(foreign)} not this run's own (read-only evidence)"
        lines.append(FactLine("approvals", "Approvals", text, "bad" if unbound or stale else ""))
    models = facts.get("models")
    if models and (models["model_calls"] or models["token_charges"]):
        lines.append(FactLine("models", "Model calls", models_label(models, settings.N17Q_MODEL_PRICES)))
    return lines


@dataclass
class Verdict:
    groups: list[FindingGroup]
    findings_read: int
    objects: list[Chip]
    effects: list[Chip]
    approvals: list[Chip]
    kind_counts: dict[str, int] = field(default_factory=dict)
    # The checks that had nothing to judge (Run.unevaluated, DESIGN §10), each with the code's title: a run without
    # workspaces has no LIN009 findings because it could have none, which is not the same as passing LIN009.
    unevaluated: list[dict[str, Any]] = field(default_factory=list)
    # What happened, from the run's facts (issue 34): effects, validation, workspaces, approvals.
    facts: list[FactLine] = field(default_factory=list)

    @property
    def checks_evaluated(self) -> int:
        return len(CODES) - len(self.fully_unevaluated)

    @property
    def fully_unevaluated(self) -> list[dict[str, Any]]:
        """Codes with no input at all (an entry with `events` was judged on the rest of its inputs)."""
        return [u for u in self.unevaluated if not u.get("events")]

    @property
    def headline(self) -> str:
        errors = sum(len(g.findings) for g in self.groups if g.severity == "error")
        warnings = sum(len(g.findings) for g in self.groups if g.severity != "error")
        if not self.groups:
            if self.unevaluated:
                n = self.checks_evaluated
                return (
                    f"No lineage findings in the {n} check{'s' if n != 1 else ''} that had something to judge; "
                    f"{len(self.unevaluated)} not evaluated"
                )
            return "No lineage findings"
        parts = []
        if errors:
            parts.append(f"{errors} error{'s' if errors != 1 else ''}")
        if warnings:
            parts.append(f"{warnings} warning{'s' if warnings != 1 else ''}")
        causes = len(self.groups)
        return f"{' and '.join(parts)} in {causes} root cause{'s' if causes != 1 else ''}"


def _root(parent: list[int], i: int) -> int:
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


def group_findings(findings: list[Finding]) -> list[FindingGroup]:
    """Same code, joined through a shared end (union-find over the findings of one code)."""
    by_code: dict[str, list[Finding]] = {}
    for f in findings:
        by_code.setdefault(f.code, []).append(f)
    groups: list[FindingGroup] = []
    for code, items in by_code.items():
        parent = list(range(len(items)))
        first_at: dict[str, int] = {}
        for i, f in enumerate(items):
            for ref in {f.from_ref, f.to_ref}:
                if ref in first_at:
                    parent[_root(parent, i)] = _root(parent, first_at[ref])
                else:
                    first_at[ref] = i
        clusters: dict[int, list[Finding]] = {}
        for i, f in enumerate(items):
            clusters.setdefault(_root(parent, i), []).append(f)
        for members in clusters.values():
            shared = ""
            if len(members) > 1:
                common = set.intersection(*({m.from_ref, m.to_ref} for m in members))
                # The end they all meet at; with none common to all, the most shared one.
                counts: dict[str, int] = {}
                for m in members:
                    for ref in {m.from_ref, m.to_ref}:
                        counts[ref] = counts.get(ref, 0) + 1
                shared = sorted(common)[0] if common else max(counts, key=lambda r: (counts[r], r))
            severity = "error" if any(m.severity == "error" for m in members) else members[0].severity
            groups.append(
                FindingGroup(code=code, title=CODES.get(code, code), severity=severity, findings=members, shared=shared)
            )
    groups.sort(key=lambda g: (g.severity != "error", g.findings[0].pk))
    return groups


def _effect_chip(event: Event, bad: set[str], duplicates: set[str]) -> Chip:
    body = event.body
    tone = "bad" if event.event_id in bad else ""
    if event.kind == "effect.intent":
        return Chip(
            "intent", event.event_id, f"{body.get('effect_class')} to {body.get('destination')}", tone,
            f"namespace {body.get('namespace')}",
        )  # fmt: skip
    if event.kind == "effect.execution":
        return Chip(
            "execution", event.event_id, f"{body.get('outcome')} via {body.get('connection')}", tone,
            f"attempt {body.get('attempt_no')}, {body.get('stage')}",
        )  # fmt: skip
    change = body.get("change") if isinstance(body.get("change"), dict) else {}
    before = body.get("revision_before")
    note = f"revision {'new' if before is None else before} → {body.get('revision_after')}"
    if change.get("duplicate_of"):
        note += f", duplicate of {change['duplicate_of']}"
        tone = "bad"
    if event.event_id in duplicates:
        note += ", a second delivery of one intent"
        tone = "bad"
    op = change.get("op")
    return Chip("world change", event.event_id, f"{op + ' ' if op else ''}{body.get('resource')}", tone, note)


def verdict_build(run: Run) -> Verdict:
    findings = list(Finding.objects.filter(run=run).order_by("id")[:FINDINGS_GROUPED])
    bad = {ref for f in findings for ref in (f.from_ref, f.to_ref)}
    objects = [
        Chip(o.kind, o.ref, o.ref, "bad" if o.ref in bad or o.introduced_by.event_id in bad else "")
        for o in RunObject.objects.filter(run=run).select_related("introduced_by").order_by("id")[:CHIPS]
    ]
    # One read per key kind would be four queries; one IN over the (run, kind, seq) index, capped, is one.
    key_events = list(Event.objects.filter(run=run, kind__in=KEY_KINDS).order_by("seq")[: CHIPS * 2])
    facts = facts_of(run)
    duplicates = {
        d for item in facts["effects"]["items"] if item["deliveries"] > 1 for d in item["delivery_events"][1:]
    }
    effects = [_effect_chip(e, bad, duplicates) for e in key_events if e.kind != "approval.recorded"][:CHIPS]
    approvals = []
    for e in key_events:
        if e.kind != "approval.recorded":
            continue
        body = e.body
        foreign = body.get("run") not in (None, run.run_id) or body.get("environment") not in (None, run.environment)
        approvals.append(
            Chip(
                "approval",
                e.event_id,
                f"{body.get('decision')} by {body.get('actor_role')}",
                "bad" if foreign or e.event_id in bad else "",
                f"{body.get('origin')}, from run {body.get('run')} ({body.get('environment')})",
            )
        )
    return Verdict(
        groups=group_findings(findings),
        findings_read=len(findings),
        objects=objects,
        effects=effects,
        approvals=approvals[:CHIPS],
        kind_counts=run.kind_counts or {},
        unevaluated=[
            {**u, "title": CODES.get(str(u.get("code")), "")} for u in (run.unevaluated or []) if isinstance(u, dict)
        ],
        facts=fact_lines(facts),
    )
