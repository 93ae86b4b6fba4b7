"""What the cross-run search reads of a run (issue 38 §3), gathered from its events as they stream by. Django-free.

`SummaryBuilder` takes each event body once (at import, beside the lineage graph and the facts; or from the stored
events of the kinds it reads, for a run stored before it) and answers the run's models, tools, model calls and
token counts per model. The console prices the counts with its price table and stores the answer in one row per run
(runs.models.RunSummary), which the run list's filters and the span search read instead of the events.

Rules:
- Model calls and tokens are counted by the fact layer's `ModelTally` (n17q_engine.facts: the run page's "Model
  calls" line reads the same tally), so the run list and the run page never count a run differently: a model call
  is a `model.proposal`, or, in a run whose agent was replayed, its `model.chat` call; an event naming no model is
  the run's manifest model's.
- A charge without the split (a native run's `amount` only) counts toward the total but makes the run's input and
  output counts unknown (None), never 0, and so its cost unknown; so do model calls with no token charge at all.
- The cost is `pricing.run_cost` of the tally (the run page's), stored with the summary.
- A run with no model call and no token charge used no tokens: its counts are 0 and its cost is 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from .facts import MODEL_KINDS, ModelTally
from .pricing import run_cost

MAX_VALUES = 200  # distinct tools or models kept (like Run.tools: SEARCH_VALUES_MAX)
VALUE_CHARS = 200


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        return None
    return int(value)


@dataclass
class SummaryBuilder:
    run_model: str = ""
    tools: set[str] = field(default_factory=set)
    models: ModelTally = field(default_factory=lambda: ModelTally(None))
    # Whether an event came from a converted trace (its `otlp` or `inspect` origin: n17q_engine.formats).
    converted: bool = False

    @classmethod
    def for_manifest(cls, manifest_run: dict[str, Any] | None) -> SummaryBuilder:
        model = (manifest_run or {}).get("model") if isinstance(manifest_run, dict) else None
        name = str((model.get("name") if isinstance(model, dict) else None) or "")[:VALUE_CHARS]
        return cls(run_model=name, models=ModelTally(name or None))

    def add(self, event: dict[str, Any]) -> None:
        kind = event.get("kind")
        if not self.converted and ("otlp" in event or "inspect" in event):
            self.converted = True
        if kind == "tool.call":
            tool = event.get("tool")
            if isinstance(tool, str) and len(self.tools) < MAX_VALUES:
                self.tools.add(tool[:VALUE_CHARS])
        if kind in MODEL_KINDS:
            self.models.add(event)

    def result(self) -> dict[str, Any]:
        """{models, tools, model_calls, tokens, tokens_in, tokens_out, usage, converted}: `usage` is the fact layer's
        `models` fact; tokens None when model calls were made and no charge was recorded, tokens_in/out None then
        and when a charge did not split them."""
        models = self.models.result()
        calls, charges = models["model_calls"], models["token_charges"]
        unknown = bool(calls and not charges)
        tokens = None if unknown else models["tokens"]
        split_unknown = unknown or bool(models["unsplit_charges"])
        return {
            "models": sorted(m["model"] for m in models["per_model"])[:MAX_VALUES],
            "tools": sorted(self.tools),
            "model_calls": calls,
            "tokens": tokens,
            "tokens_in": None if split_unknown else models["tokens_in"],
            "tokens_out": None if split_unknown else models["tokens_out"],
            "usage": models,
            "converted": self.converted,
        }


# The event kinds the builder reads: a stored run's summary is built from these alone (indexed by run and kind).
SUMMARY_KINDS = MODEL_KINDS  # tool.call, model.proposal, budget.charged


TEXT_CHARS = 8000
CODES_MAX = 40
# What the summary's columns hold (runs.models.RunSummary): token counts in 64-bit integers, the cost in a decimal of
# 20 digits, 6 after the point. A count or cost past them is not a count a run made (a harness's amount of 1e30 tokens):
# stored as unknown, as a count nobody recorded is, never as a database error (PostgreSQL refuses it, SQLite too).
MAX_STORED_COUNT = 2**63 - 1
MAX_STORED_COST = Decimal(10) ** 14


def _storable_count(count: int | None) -> int | None:
    return count if count is None or 0 <= count <= MAX_STORED_COUNT else None


def lines(values: list[str] | set[str]) -> str:
    """Values one per line with a newline before and after each ("" for none): `contains "\\nvalue\\n"` matches
    one whole value."""
    ordered = sorted(v.replace("\n", " ") for v in values if v)
    return "\n" + "\n".join(ordered) + "\n" if ordered else ""


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
    if built["usage"]["per_model"]:
        priced = run_cost(built["usage"], table)
        cost, currency = priced.amount, (priced.currency or "") if priced.amount is not None else ""
    else:
        cost, currency = Decimal(0), ""  # no model used: nothing to price
    if cost is not None and abs(cost) >= MAX_STORED_COST:
        cost, currency = None, ""
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
        "tokens": _storable_count(built["tokens"]),
        "tokens_in": _storable_count(built["tokens_in"]),
        "tokens_out": _storable_count(built["tokens_out"]),
        "cost": cost,
        "currency": currency,
        "usage": built["usage"],
        "text": text,
    }
