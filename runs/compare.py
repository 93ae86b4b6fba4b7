"""Two runs side by side (issue 38 §3: "a compare-two-runs entry from the list"), read-only: for each layer (outcome,
tool calls, effects, findings, model calls with tokens and cost) the same lines for both runs, each marked where they
differ. Every value comes from the fact layer (runs/facts.py: facts_of), the search summary (runs.models.RunSummary,
computed now for a run stored without one) or the stored findings: two pages never count a run two ways.

A replay against its source has its own comparison (replays/comparison.py: what the replay was asked to hold); this
one compares any two runs and judges nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count
from django.db.models.fields.json import KT

from .facts import facts_of
from .models import Event, Finding, Run, RunSummary
from .summary import summary_compute

TOOLS_SHOWN = 50


@dataclass
class Line:
    label: str
    a: str
    b: str

    @property
    def differs(self) -> bool:
        return self.a != self.b


@dataclass
class Layer:
    title: str
    lines: list[Line] = field(default_factory=list)

    def add(self, label: str, a: Any, b: Any) -> None:
        self.lines.append(Line(label, _text(a), _text(b)))

    @property
    def differences(self) -> int:
        return sum(line.differs for line in self.lines)


@dataclass
class Comparison:
    a: Run
    b: Run
    layers: list[Layer]

    @property
    def differences(self) -> int:
        return sum(layer.differences for layer in self.layers)


def _text(value: Any) -> str:
    if value is None:
        return "not known"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value) if value != "" else "—"


def _summary(run: Run) -> RunSummary:
    try:
        return run.summary
    except RunSummary.DoesNotExist:
        return summary_compute(run)


def _tool_counts(run: Run) -> dict[str, int]:
    rows = (
        Event.objects.filter(run=run, kind="tool.call")
        .annotate(tool=KT("body__tool"))
        .values("tool")
        .annotate(n=Count("id"))
        .order_by("tool")
    )
    return {r["tool"] or "(unnamed)": r["n"] for r in rows[:TOOLS_SHOWN]}


def _codes(run: Run) -> dict[str, int]:
    rows = Finding.objects.filter(run=run).values("code").annotate(n=Count("id")).order_by("code")
    return {r["code"]: r["n"] for r in rows}


def _cost(s: RunSummary) -> str | None:
    if s.cost is None:
        return None
    return f"{s.cost:.6f} {s.currency}".strip()


def runs_compare(a: Run, b: Run) -> Comparison:
    """The two runs' layers (module docstring)."""
    fa, fb = facts_of(a), facts_of(b)
    sa, sb = _summary(a), _summary(b)

    outcome = Layer("Outcome")
    outcome.add("Kind", sa.kind, sb.kind)
    outcome.add("Mode", a.mode, b.mode)
    outcome.add("Environment", a.environment, b.environment)
    outcome.add("Task", a.task_id, b.task_id)
    outcome.add("Scenario", a.scenario_name, b.scenario_name)
    outcome.add("Final state", a.final_state, b.final_state)
    outcome.add("Reason", fa["outcome"].get("reason"), fb["outcome"].get("reason"))
    outcome.add("Validation", fa["headline"]["validation"], fb["headline"]["validation"])
    outcome.add("Events", a.event_count, b.event_count)

    tools = Layer("Tool calls")
    kinds_a, kinds_b = a.kind_counts or {}, b.kind_counts or {}
    tools.add("Tool calls", kinds_a.get("tool.call", 0), kinds_b.get("tool.call", 0))
    tools.add("Tool results", kinds_a.get("tool.result", 0), kinds_b.get("tool.result", 0))
    ta, tb = _tool_counts(a), _tool_counts(b)
    for name in sorted(set(ta) | set(tb)):
        tools.add(name, ta.get(name, 0), tb.get(name, 0))

    effects = Layer("Effects")
    ea, eb = fa["effects"], fb["effects"]
    effects.add("Summary", fa["headline"]["effects"], fb["headline"]["effects"])
    for key, label in (
        ("intents", "Intents"),
        ("executions", "Executions"),
        ("deliveries", "Deliveries"),
        ("world_changes", "World changes"),
        ("at_most_one_delivery", "At most one delivery per intent"),
    ):
        va, vb = ea.get(key), eb.get(key)
        effects.add(label, len(va) if isinstance(va, list) else va, len(vb) if isinstance(vb, list) else vb)

    findings = Layer("Findings")
    findings.add("Errors", a.error_count, b.error_count)
    findings.add("Findings", a.finding_count, b.finding_count)
    ca, cb = _codes(a), _codes(b)
    for code in sorted(set(ca) | set(cb)):
        findings.add(code, ca.get(code, 0), cb.get(code, 0))

    models = Layer("Model calls, tokens and cost")
    models.add("Models", _names(sa.model_names), _names(sb.model_names))
    models.add("Model calls", sa.model_calls, sb.model_calls)
    models.add("Tokens", sa.tokens, sb.tokens)
    models.add("Tokens in", sa.tokens_in, sb.tokens_in)
    models.add("Tokens out", sa.tokens_out, sb.tokens_out)
    models.add("Cost", _cost(sa), _cost(sb))

    return Comparison(a=a, b=b, layers=[outcome, tools, effects, findings, models])


def _names(lines: str) -> str:
    return ", ".join(name for name in lines.split("\n") if name)
