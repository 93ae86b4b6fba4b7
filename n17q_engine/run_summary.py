"""What the cross-run search reads of a run (issue 38 §3), gathered from its events as they stream by. Django-free.

`SummaryBuilder` takes each event body once (at import, beside the lineage graph and the facts; or from the stored
events of the kinds it reads, for a run stored before it) and answers the run's models, tools, model calls and
token counts per model. The console prices the counts with its price table and stores the answer in one row per run
(runs.models.RunSummary), which the run list's filters and the span search read instead of the events.

Rules:
- A model call is a `model.proposal`; its model is the event's own `model` (an imported trace's) or else the run's
  manifest model.
- Tokens are `budget.charged` events of resource `tokens`: `input_tokens` and `output_tokens` where given. A charge
  without the split (a native run's `amount` only) counts toward the total but makes the run's input and output
  counts unknown (None), never 0, and so its cost unknown: an unknown count is not a zero one.
- A run with no model call and no token charge used no tokens: its counts are 0 and its cost is 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

MAX_VALUES = 200  # distinct tools or models kept (like Run.tools: SEARCH_VALUES_MAX)
VALUE_CHARS = 200


@dataclass
class ModelUsage:
    calls: int = 0
    charges: int = 0
    tokens: int = 0
    tokens_in: int | None = 0
    tokens_out: int | None = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "charges": self.charges,
            "tokens": self.tokens,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
        }


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        return None
    return int(value)


@dataclass
class SummaryBuilder:
    run_model: str = ""
    tools: set[str] = field(default_factory=set)
    usage: dict[str, ModelUsage] = field(default_factory=dict)
    model_calls: int = 0
    # Whether an event came from a converted trace (its `otlp` or `inspect` origin: n17q_engine.formats).
    converted: bool = False

    @classmethod
    def for_manifest(cls, manifest_run: dict[str, Any] | None) -> SummaryBuilder:
        model = (manifest_run or {}).get("model") if isinstance(manifest_run, dict) else None
        name = model.get("name") if isinstance(model, dict) else None
        return cls(run_model=str(name or "")[:VALUE_CHARS])

    def _usage_of(self, model: Any) -> ModelUsage | None:
        name = (model if isinstance(model, str) and model else self.run_model)[:VALUE_CHARS]
        if not name:
            name = "(unnamed model)"
        if name not in self.usage and len(self.usage) >= MAX_VALUES:
            return None
        return self.usage.setdefault(name, ModelUsage())

    def add(self, event: dict[str, Any]) -> None:
        kind = event.get("kind")
        if not self.converted and ("otlp" in event or "inspect" in event):
            self.converted = True
        if kind == "tool.call":
            tool = event.get("tool")
            if isinstance(tool, str) and len(self.tools) < MAX_VALUES:
                self.tools.add(tool[:VALUE_CHARS])
        elif kind == "model.proposal":
            self.model_calls += 1
            usage = self._usage_of(event.get("model"))
            if usage is not None:
                usage.calls += 1
        elif kind == "budget.charged" and event.get("resource") == "tokens":
            usage = self._usage_of(event.get("model"))
            if usage is None:
                return
            usage.charges += 1
            tin, tout = _int(event.get("input_tokens")), _int(event.get("output_tokens"))
            amount = _int(event.get("amount"))
            usage.tokens += amount if amount is not None else (tin or 0) + (tout or 0)
            usage.tokens_in = None if usage.tokens_in is None or tin is None else usage.tokens_in + tin
            usage.tokens_out = None if usage.tokens_out is None or tout is None else usage.tokens_out + tout

    def result(self) -> dict[str, Any]:
        """{models, tools, model_calls, tokens, tokens_in, tokens_out, usage, converted}; tokens_in/out None when a
        charge did not split them, or when model calls were made and no charge was recorded at all."""
        used = {name: u for name, u in self.usage.items() if u.calls or u.charges}
        charged = any(u.charges for u in used.values())
        uncharged_calls = any(u.calls and not u.charges for u in used.values())
        if not used:
            tokens: int | None = 0
            tin: int | None = 0
            tout: int | None = 0
        elif not charged:
            tokens = tin = tout = None
        else:
            tokens = sum(u.tokens for u in used.values())
            ins = [u.tokens_in for u in used.values() if u.charges]
            outs = [u.tokens_out for u in used.values() if u.charges]
            tin = None if uncharged_calls or any(x is None for x in ins) else sum(x for x in ins if x is not None)
            tout = None if uncharged_calls or any(x is None for x in outs) else sum(x for x in outs if x is not None)
        return {
            "models": sorted(used),
            "tools": sorted(self.tools),
            "model_calls": self.model_calls,
            "tokens": tokens,
            "tokens_in": tin,
            "tokens_out": tout,
            "usage": {name: u.to_json() for name, u in sorted(used.items())},
            "converted": self.converted,
        }


# The event kinds the builder reads: a stored run's summary is built from these alone (indexed by run and kind).
SUMMARY_KINDS = ("tool.call", "model.proposal", "budget.charged")


TEXT_CHARS = 8000
CODES_MAX = 40


def lines(values: list[str] | set[str]) -> str:
    """Values one per line with a newline before and after each ("" for none): `contains "\\nvalue\\n"` matches
    one whole value."""
    ordered = sorted(v.replace("\n", " ") for v in values if v)
    return "\n" + "\n".join(ordered) + "\n" if ordered else ""


def run_cost(usage: dict[str, dict[str, Any]], table: Any) -> tuple[Decimal | None, str]:
    """The run's cost: every model's tokens priced (pricing.call_cost), or None when a model used is not priced, its
    counts are not split into input and output, or the table prices them in two currencies. No model used: 0."""
    from .pricing import call_cost

    if not usage:
        return Decimal(0), ""
    total = Decimal(0)
    currencies = set()
    for model, u in usage.items():
        if u.get("calls") and not u.get("charges"):
            return None, ""
        cost = call_cost(model, u.get("tokens_in"), u.get("tokens_out"), table)
        if cost is None:
            return None, ""
        total += cost.amount
        currencies.add(cost.currency)
    if len(currencies) > 1:
        return None, ""
    return total, currencies.pop() if currencies else ""


def summary_values(
    *,
    run_id: str,
    title: str,
    task_id: str,
    destinations: str,
    kind: str,
    finding_count: int,
    error_count: int,
    built: dict[str, Any],
    codes: list[str],
    messages: list[str],
    table: Any,
) -> dict[str, Any]:
    """The searched columns of a run's summary row (runs.models.RunSummary) from plain values: the builder's result,
    the run's finding codes and (some of) its finding messages, the price table."""
    cost, currency = run_cost(built["usage"], table)
    outcome = "errors" if error_count else "warnings" if finding_count else "clean"
    text_parts = [run_id, title, task_id, *built["tools"], destinations, *built["models"], *codes, *messages]
    text = "\n".join(p for p in text_parts if p).lower()[:TEXT_CHARS]
    return {
        "kind": kind,
        "outcome": outcome,
        "tools": lines(built["tools"]),
        "model_names": lines(built["models"]),
        "codes": lines(sorted(set(codes))[:CODES_MAX]),
        "model_calls": built["model_calls"],
        "tokens": built["tokens"],
        "tokens_in": built["tokens_in"],
        "tokens_out": built["tokens_out"],
        "cost": cost,
        "currency": currency,
        "usage": built["usage"],
        "text": text,
    }
