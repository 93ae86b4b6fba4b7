"""The model price table (n17q_engine.pricing, issue 38): costs from tokens, and no cost where nothing is priced."""

from __future__ import annotations

from decimal import Decimal

import pytest

from n17q_engine.pricing import PriceTableError, call_cost, price_for, price_table, run_cost

TABLE = price_table(
    {
        "gpt-4o-mini": {"input": "0.15", "output": 0.6, "currency": "usd"},
        "gpt-4o": {"input": 2.5, "output": 10},
    }
)


def test_a_call_costs_its_tokens_at_the_tables_price_per_million():
    cost = call_cost("gpt-4o-mini", 1_000, 200, TABLE)
    assert cost is not None
    assert cost.amount == Decimal("0.00027")  # 1000 * 0.15 / 1e6 + 200 * 0.6 / 1e6, exactly (no float error)
    assert cost.currency == "USD"
    assert cost.text() == "0.000270 USD"


def test_a_snapshot_and_a_provider_prefix_take_the_longest_priced_name():
    assert price_for("gpt-4o-mini-2024-07-18", TABLE).model == "gpt-4o-mini"
    assert price_for("gpt-4o-2024-08-06", TABLE).model == "gpt-4o"
    assert price_for("openai/gpt-4o-mini", TABLE).model == "gpt-4o-mini"
    assert price_for("gpt-4omni", TABLE) is None  # a prefix that is not a snapshot is another model


@pytest.mark.parametrize(
    ("model", "tokens_in", "tokens_out"),
    [("unpriced-model", 10, 10), (None, 10, 10), ("gpt-4o", None, 10), ("gpt-4o", 10, None), ("gpt-4o", -1, 1)],
)
def test_an_unpriced_model_or_an_unknown_count_has_no_cost_never_zero(model, tokens_in, tokens_out):
    assert call_cost(model, tokens_in, tokens_out, TABLE) is None


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ([], "an object"),
        ({"m": {"input": "x", "output": 1}}, "price of m: input: 'x' is not a number"),
        ({"m": {"input": -1, "output": 1}}, "price of m: input: a price between"),
        ({"m": {"input": 1, "output": True}}, "price of m: output: a number"),
        ({"m": {"input": 1, "output": 1, "per": 1}}, "unknown field 'per'"),
        ({"m": {"input": 1, "output": 1, "currency": "U$"}}, "currency is a code"),
        ({"": {"input": 1, "output": 1}}, "a model name is text"),
        ({"m": {"input": "NaN", "output": 1}}, "a price between"),
    ],
)
def test_a_malformed_table_is_refused_in_one_line(raw, said):
    with pytest.raises(PriceTableError, match=said.replace("(", r"\(").replace("$", r"\$")):
        price_table(raw)


def _models(*rows):
    return {
        "per_model": [
            dict(zip(("model", "calls", "charges", "tokens_in", "tokens_out", "unsplit"), r, strict=True)) for r in rows
        ]
    }


def test_a_run_s_cost_is_its_models_tokens_priced_and_given_only_when_every_call_was_evaluated():
    table = price_table({"gpt-4o-mini": {"input": "0.15", "output": "0.60"}, "claude-x": {"input": 3, "output": 15}})
    whole = run_cost(_models(("gpt-4o-mini", 3, 3, 652, 173, 0), ("claude-x", 1, 1, 1000, 10, 0)), table)
    assert whole.amount == (Decimal(652) * Decimal("0.15") + 173 * Decimal("0.60") + 3000 + 150) / 10**6
    assert whole.text() == f"{whole.amount.quantize(Decimal('0.000001'))} USD" and whole.not_evaluated == ()
    part = run_cost(
        _models(("gpt-4o-mini", 3, 3, 652, 173, 0), ("llama", 2, 2, 5, 5, 0), ("claude-x", 4, 0, 0, 0, 0)), table
    )
    assert part.amount is None and part.evaluated_calls == 3 and part.not_evaluated_calls == 6
    assert part.text() == (
        "cost not evaluated for 6 calls: no price for llama (2 calls); tokens not recorded for claude-x (4 calls)"
    )
    unsplit = run_cost(_models(("gpt-4o-mini", 2, 1, 0, 0, 1)), table)
    assert unsplit.amount is None and "tokens in and out not recorded apart for gpt-4o-mini" in unsplit.text()


def test_prices_in_two_currencies_make_no_total():
    table = price_table(
        {"a": {"input": 1, "output": 1, "currency": "USD"}, "b": {"input": 1, "output": 1, "currency": "EUR"}}
    )
    cost = run_cost(_models(("a", 1, 1, 10, 10, 0), ("b", 1, 1, 10, 10, 0)), table)
    assert cost.amount is None and "prices in several currencies" in cost.text()
