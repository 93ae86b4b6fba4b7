"""Contracts inferred from a trace (n17q_engine.contract_inference, issue 37 point 3): types, required and nullable
from the calls; definitions where the trace recorded them; the effect class only when the trace says it."""

from __future__ import annotations

import pytest

from n17q_engine.agent.model import MODEL_CONTRACT
from n17q_engine.contract_inference import contract_check, definitions_from_messages, infer_contracts
from n17q_engine.contracts import ContractError


def fields_of(inference, tool: str) -> dict:
    return {f.name: f for f in next(t for t in inference.tools if t.tool == tool).fields}


def test_types_required_and_nullable_come_from_every_call():
    inference = infer_contracts(
        [
            ("search", {"q": "a", "limit": 5, "tags": ["x"], "after": None}),
            ("search", {"q": "b", "limit": 2.5, "after": "2026-01-01"}),
        ],
        effect_classes={"search": "read"},
    )
    fields = fields_of(inference, "search")
    assert (fields["q"].type, fields["q"].required, fields["q"].nullable) == ("string", True, False)
    assert fields["limit"].type == "number"  # an integer and a number seen: a number
    assert (fields["tags"].type, fields["tags"].items, fields["tags"].required) == ("array", "string", False)
    assert (fields["after"].type, fields["after"].nullable) == ("string", True)
    assert fields["q"].source == "observed in 2 of 2 calls" and fields["tags"].source == "observed in 1 of 2 calls"
    (contract,) = inference.contracts()
    assert contract["revision"] == 1 and contract["effect_class"] == "read"
    checked = contract_check(contract)
    # The contract holds every recorded call, and it fails closed on what none of them sent.
    assert checked.normalize({"q": "a", "limit": 5, "tags": ["x"], "after": None})["after"] is None
    with pytest.raises(ContractError, match="q"):
        checked.normalize({"limit": 1, "after": None})


def test_a_definition_gives_types_descriptions_and_optional_fields_and_the_calls_still_count():
    messages = [
        {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
        {
            "role": "tool_definitions",
            "parts": [
                {
                    "type": "function",
                    "function": {
                        "name": "lookup",
                        "description": "Look it up",
                        "parameters": {
                            "type": "object",
                            "properties": {
                                "id": {"type": "string", "description": "its id"},
                                "page": {"type": ["integer", "null"]},
                                "labels": {"type": "array", "items": {"type": "string"}},
                                "mode": {"type": "string"},
                            },
                            "required": ["id", "mode"],
                        },
                    },
                }
            ],
        },
    ]
    definitions = definitions_from_messages(messages)
    assert set(definitions) == {"lookup"} and definitions["lookup"]["description"] == "Look it up"
    inference = infer_contracts(
        [("lookup", {"id": "a", "page": 1}), ("lookup", {"id": "b", "page": 2})],
        definitions=definitions,
        effect_classes={"lookup": "read"},
    )
    fields = fields_of(inference, "lookup")
    assert fields["id"].source == "definitions and observed in 2 of 2 calls" and fields["id"].description == "its id"
    # Sent in every call, but the definition makes it optional: optional.
    assert fields["page"].required is False and fields["page"].nullable and fields["page"].type == "integer"
    # Never sent: its type and items from the definition, optional.
    assert (fields["labels"].type, fields["labels"].items, fields["labels"].required) == ("array", "string", False)
    assert fields["labels"].source == "definitions"
    # Required by the definition, but no call sent it: the contract must hold the recorded calls, so optional.
    assert fields["mode"].required is False


def test_the_effect_class_is_asked_unless_the_trace_says_it():
    calls = [("read_file", {"path": "a"}), ("write_file", {"path": "a", "text": "b"})]
    inference = infer_contracts(calls)
    assert inference.asked == ["read_file", "write_file"]
    with pytest.raises(ContractError, match="incomplete"):
        inference.contracts()
    annotated = {"read_file": {"name": "read_file", "parameters": None, "annotations": {"readOnlyHint": True}}}
    inference = infer_contracts(calls, definitions=annotated, declared_effects={"write_file": "mutation"})
    assert inference.asked == []
    tools = {t.tool: t for t in inference.tools}
    assert (tools["read_file"].effect_class, tools["read_file"].effect_source) == ("read", "declared by the trace")
    assert tools["write_file"].effect_class == "mutation"
    given = infer_contracts(calls, declared_effects={"write_file": "mutation"}, effect_classes={"write_file": "read"})
    assert given.problems == ["write_file: the trace declares it a mutation; read was given"]


@pytest.mark.parametrize(
    ("calls", "said"),
    [
        ([("t", {"a": "x"}), ("t", {"a": 1})], "field a: seen as integer and string"),
        ([("t", {"a": None})], "field a: only null was seen and no definition types it"),
        ([("t", {"a": []})], "field a: the type of its items is not known"),
        ([("t", {"a": [1, "x"]})], "field a: its items were seen as integer and string"),
        ([("t", ["not", "an", "object"])], "a call's arguments are not an object"),
    ],
)
def test_what_the_trace_cannot_type_is_a_problem_never_a_guess(calls, said):
    inference = infer_contracts(calls, effect_classes={"t": "read"})
    assert any(said in p for p in inference.problems), inference.problems
    assert inference.tools[0].contract() is None


def test_a_definition_and_the_calls_that_disagree_is_a_problem():
    definitions = {"t": {"name": "t", "parameters": {"properties": {"n": {"type": "string"}}}}}
    inference = infer_contracts([("t", {"n": 3})], definitions=definitions, effect_classes={"t": "read"})
    assert inference.problems == ["t: field n: the definition says string, the calls sent integer"]


def test_model_calls_add_the_built_in_model_contract_and_model_chat_calls_are_not_a_tool():
    inference = infer_contracts(
        [("model.chat", {"model": "m"}), ("t", {})], effect_classes={"t": "read"}, model_calls=2
    )
    assert [t.tool for t in inference.tools] == ["t"]
    assert [c["tool"] for c in inference.contracts()] == ["model.chat", "t"]
    assert inference.contracts()[0] == MODEL_CONTRACT
