"""What the cross-run search reads of a run (n17q_engine.run_summary): models, tools, calls and tokens from the
events, unknown counts kept unknown, and the cost priced only when every model's tokens are."""

from __future__ import annotations

from decimal import Decimal

from n17q_engine.pricing import price_table
from n17q_engine.run_summary import SummaryBuilder, lines, summary_values

TABLE = price_table({"gpt-4o-mini": {"input": "0.15", "output": "0.60", "currency": "USD"}})


def built(*events: dict, model: str = "agent-model") -> dict:
    builder = SummaryBuilder.for_manifest({"model": {"name": model}})
    for event in events:
        builder.add(event)
    return builder.result()


def cost(result: dict) -> tuple:
    """The (cost, currency) the summary stores: the fact layer's run cost (pricing.run_cost), 0 for no model."""
    values = summary_values(
        run_id="r", title="", task_id="", destinations="", kind="recorded", finding_count=0, error_count=0,
        built=result, codes=[], messages=[], table=TABLE,
    )  # fmt: skip
    return values["cost"], values["currency"]


def call(model: str | None = None) -> dict:
    return {"kind": "model.proposal", **({"model": model} if model else {})}


def charge(model: str | None = None, **counts: int) -> dict:
    return {"kind": "budget.charged", "resource": "tokens", **({"model": model} if model else {}), **counts}


def test_a_run_without_model_calls_used_no_tokens_and_cost_nothing():
    result = built({"kind": "tool.call", "tool": "b"}, {"kind": "tool.call", "tool": "a"})
    assert (result["tools"], result["models"], result["tokens"], result["tokens_in"]) == (["a", "b"], [], 0, 0)
    assert cost(result) == (Decimal(0), "")


def test_calls_without_a_charge_have_unknown_tokens_and_no_cost():
    result = built(call(), call())
    assert (result["model_calls"], result["models"], result["tokens"], result["tokens_in"]) == (
        2,
        ["agent-model"],
        None,
        None,
    )
    assert cost(result) == (None, "")


def test_a_charge_without_the_split_keeps_the_total_and_not_the_split():
    result = built(call(), charge(amount=500))
    assert (result["tokens"], result["tokens_in"], result["tokens_out"]) == (500, None, None)


def test_split_charges_of_a_priced_model_are_priced():
    result = built(
        call("gpt-4o-mini-2024-07-18"),
        charge("gpt-4o-mini-2024-07-18", amount=1200, input_tokens=1000, output_tokens=200),
        call("gpt-4o-mini-2024-07-18"),
        charge("gpt-4o-mini-2024-07-18", input_tokens=1000, output_tokens=200),
    )
    assert (result["tokens"], result["tokens_in"], result["tokens_out"]) == (2400, 2000, 400)
    assert cost(result) == (Decimal("0.00054"), "USD")


def test_one_unpriced_model_leaves_the_whole_run_unpriced():
    result = built(
        call("gpt-4o-mini"),
        charge("gpt-4o-mini", input_tokens=10, output_tokens=10),
        call("claude-3-5"),
        charge("claude-3-5", input_tokens=10, output_tokens=10),
    )
    assert result["models"] == ["claude-3-5", "gpt-4o-mini"] and result["tokens_in"] == 20
    assert cost(result) == (None, "")


def test_a_converted_event_makes_the_run_imported():
    assert built({"kind": "tool.call", "tool": "x", "otlp": {"span": "ab"}})["converted"] is True
    assert built({"kind": "tool.call", "tool": "x"})["converted"] is False


def test_lines_match_whole_values():
    assert lines(["b", "a"]) == "\na\nb\n" and lines([]) == ""


def test_a_count_or_cost_past_what_the_summary_stores_is_stored_unknown():
    """Found by the import property test on PostgreSQL: a charge of 2**70 tokens made the summary's bigint insert fail
    (a database error, not a refusal). Past the columns' range, a count or a cost is no count a run made: unknown."""
    huge = built(call("gpt-4o-mini"), charge("gpt-4o-mini", amount=2**70, input_tokens=2**69, output_tokens=2**69))
    values = summary_values(
        run_id="r", title="", task_id="", destinations="", kind="recorded", finding_count=0, error_count=0,
        built=huge, codes=[], messages=[], table=TABLE,
    )  # fmt: skip
    assert (values["tokens"], values["tokens_in"], values["tokens_out"]) == (None, None, None)
    assert (values["cost"], values["currency"]) == (None, "")
    # At the edge of the range, the count is kept.
    edge = summary_values(
        run_id="r", title="", task_id="", destinations="", kind="recorded", finding_count=0, error_count=0,
        built=built(call(), charge(amount=2**63 - 1)), codes=[], messages=[], table=TABLE,
    )  # fmt: skip
    assert edge["tokens"] == 2**63 - 1
