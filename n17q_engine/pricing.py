"""What a model call cost: tokens in and out priced by a price table (issue 38). Django-free; the console's table is
the `N17Q_MODEL_PRICES` setting (docs/facts.md "Tokens and cost").

A price table maps a model name to its prices per million tokens, input and output, in one currency:
`{"gpt-4o-mini": {"input": "0.15", "output": "0.60", "currency": "USD"}}`. Prices are decimals (text or numbers;
floats are read through their shortest text, so 0.15 stays 0.15). A model the table does not price has no cost:
`call_cost` answers None, and every page says "no price for <model>", never 0: an unpriced call is not a free one.
A model is matched by its exact name, then by the longest table name it starts with followed by `-` or `@` (a dated
snapshot `gpt-4o-mini-2024-07-18` takes `gpt-4o-mini`'s price), and a `provider/` prefix (Inspect's
`openai/gpt-4o-mini`) is dropped first when the full name is not priced.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

PER_TOKENS = 1_000_000
MAX_MODELS = 1_000
MAX_PRICE = Decimal("1000000")


class PriceTableError(ValueError):
    """The price table is malformed: one line naming the model and field."""


@dataclass(frozen=True)
class Price:
    model: str  # the table's name for it
    input: Decimal  # per PER_TOKENS input tokens
    output: Decimal  # per PER_TOKENS output tokens
    currency: str


@dataclass(frozen=True)
class Cost:
    amount: Decimal
    currency: str
    price: Price

    def text(self) -> str:
        """The amount to six decimals with its currency (`0.000420 USD`)."""
        return f"{self.amount.quantize(Decimal('0.000001'))} {self.currency}"


def _decimal(value: Any, where: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise PriceTableError(f"{where}: a number (per {PER_TOKENS:,} tokens)")
    try:
        amount = Decimal(repr(value) if isinstance(value, float) else str(value).strip())
    except InvalidOperation:
        raise PriceTableError(f"{where}: {str(value)[:40]!r} is not a number") from None
    if not amount.is_finite() or amount < 0 or amount > MAX_PRICE:
        raise PriceTableError(f"{where}: a price between 0 and {MAX_PRICE} per {PER_TOKENS:,} tokens")
    return amount


def price_table(raw: Any) -> dict[str, Price]:
    """Check and read a price table (the setting's value); PriceTableError names what is wrong."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise PriceTableError("the price table: an object {model: {input, output, currency}}")
    if len(raw) > MAX_MODELS:
        raise PriceTableError(f"the price table: at most {MAX_MODELS} models")
    table: dict[str, Price] = {}
    for model, entry in raw.items():
        if not isinstance(model, str) or not model.strip() or len(model) > 200:
            raise PriceTableError(f"the price table: a model name is text of 1 to 200 characters, got {model!r:.40}")
        if not isinstance(entry, Mapping):
            raise PriceTableError(f"price of {model}: an object {{input, output, currency}}")
        unknown = set(entry) - {"input", "output", "currency"}
        if unknown:
            raise PriceTableError(f"price of {model}: unknown field {sorted(unknown)[0]!r}")
        currency = entry.get("currency", "USD")
        if not isinstance(currency, str) or not (1 <= len(currency) <= 8) or not currency.isalpha():
            raise PriceTableError(f"price of {model}: currency is a code such as USD")
        table[model] = Price(
            model=model,
            input=_decimal(entry.get("input"), f"price of {model}: input"),
            output=_decimal(entry.get("output"), f"price of {model}: output"),
            currency=currency.upper(),
        )
    return table


def price_for(model: str | None, table: Mapping[str, Price]) -> Price | None:
    """The table's price for `model` (module docstring: exact, then a snapshot of a priced name, then without a
    provider prefix); None when it has none."""
    if not model or not table:
        return None
    for name in (model, model.split("/", 1)[1] if "/" in model else None):
        if not name:
            continue
        if name in table:
            return table[name]
        best = None
        for priced in table:
            snapshot = name.startswith(priced) and name[len(priced) : len(priced) + 1] in ("-", "@")
            if snapshot and (best is None or len(priced) > len(best)):
                best = priced
        if best is not None:
            return table[best]
    return None


def call_cost(
    model: str | None, input_tokens: int | None, output_tokens: int | None, table: Mapping[str, Price]
) -> Cost | None:
    """The cost of one call: None when the model is not priced or neither count is known (a count that is not known
    is not counted as zero: with one of the two unknown, the cost is None too)."""
    price = price_for(model, table)
    if price is None or input_tokens is None or output_tokens is None:
        return None
    if input_tokens < 0 or output_tokens < 0:
        return None
    amount = (Decimal(input_tokens) * price.input + Decimal(output_tokens) * price.output) / PER_TOKENS
    return Cost(amount=amount, currency=price.currency, price=price)


@dataclass(frozen=True)
class RunCost:
    """What a run's model calls cost by a price table (`run_cost`): `amount` only when every call's cost was evaluated;
    `partial` the sum of those that were; `not_evaluated` (model, calls, reason) for the others."""

    amount: Decimal | None
    currency: str | None
    partial: Decimal
    evaluated_calls: int
    not_evaluated: tuple[tuple[str, int, str], ...]

    @property
    def not_evaluated_calls(self) -> int:
        return sum(calls for _model, calls, _reason in self.not_evaluated)

    def text(self) -> str:
        """`0.000420 USD`, or what was not evaluated and why (never a total that leaves calls out)."""
        if self.amount is not None and self.currency is not None:
            return f"{self.amount.quantize(Decimal('0.000001'))} {self.currency}"
        n = self.not_evaluated_calls
        why = "; ".join(
            f"{reason} ({calls} call{'s' if calls != 1 else ''})" for _model, calls, reason in self.not_evaluated
        )
        return f"cost not evaluated for {n} call{'s' if n != 1 else ''}: {why}"


def run_cost(models: Mapping[str, Any], table: Mapping[str, Price]) -> RunCost:
    """The cost of a run's model calls from its `models` facts (n17q_engine.facts): per model, its tokens in and out
    priced by `table`. A model is not evaluated when the table has no price for it, when its tokens were not recorded,
    or when a token charge of it does not say how many were in and how many out; prices in two currencies make no
    total either."""
    partial = Decimal(0)
    currencies: set[str] = set()
    evaluated = 0
    missing: list[tuple[str, int, str]] = []
    for row in models.get("per_model") or []:
        model, calls = str(row.get("model")), int(row.get("calls") or 0)
        shown = calls or int(row.get("charges") or 0)
        price = price_for(model, table)
        if price is None:
            missing.append((model, shown, f"no price for {model}"))
        elif not row.get("charges"):
            missing.append((model, shown, f"tokens not recorded for {model}"))
        elif row.get("unsplit"):
            missing.append((model, shown, f"tokens in and out not recorded apart for {model}"))
        else:
            cost = call_cost(model, int(row.get("tokens_in") or 0), int(row.get("tokens_out") or 0), table)
            assert cost is not None
            partial += cost.amount
            currencies.add(cost.currency)
            evaluated += calls
    if len(currencies) > 1:
        return RunCost(None, None, partial, 0, (("all", evaluated, "prices in several currencies"), *missing))
    currency = next(iter(currencies), None)
    if missing:
        return RunCost(None, currency, partial, evaluated, tuple(missing))
    return RunCost(partial if currency else None, currency, partial, evaluated, ())
