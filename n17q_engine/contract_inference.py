"""Contracts inferred from a trace (issue 37 point 3, "Scenario from a trace"): what an imported run says about each
tool it called, as a contract a scenario version can pin (DESIGN §5), and what it does not say.

Two sources, each named on every field it gave (`InferredField.source`), so a person can judge it:

- the calls themselves: each argument's JSON type across all calls of the tool ("observed in N calls"); a field is
  required when every call carried it, nullable when a call sent null;
- the tool definitions offered to the model, where the trace recorded them (a `model.proposal`'s `tool_definitions`
  pseudo message, an OpenInference `tool_parameters` schema on the call): JSON Schema `parameters` with `properties`
  (types, items, descriptions) and `required` ("definitions"). A field a definition declares optional stays optional
  even when every call carried it; a field it declares required but a call omitted is optional (the contract must
  hold every recorded call). Observed values that contradict a definition's type are a problem, not a guess.

The effect class (read or mutation) is inferred only when the trace says it: an `effect_class` on a call, or a
definition's MCP annotation `readOnlyHint`. Otherwise it is asked (`InferredTool.effect_class` None until given).
Nothing is coerced and nothing is guessed: a field seen as a string in one call and an integer in another, an array
whose items were never seen, is listed in `problems` and blocks the contract.

Django-free (the engine's rule); the console's flow is `fixtures_review.trace_scenarios`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .agent.model import MODEL_CONTRACT, MODEL_TOOL
from .contracts import EFFECT_CLASSES, FIELD_TYPES, ITEM_TYPES, Contract, ContractError, json_type_name
from .identifiers import id_problem

INFERRED_REVISION = 1
# Every outcome a recorded result can carry that a fixture can hold: an inferred contract admits them all, since the
# trace cannot say which a tool may report beyond those it did.
INFERRED_OUTCOMES = ("ok", "empty", "not_found", "denied", "deleted", "error", "timeout")
DEFINITIONS = "definitions"


@dataclass
class InferredField:
    name: str
    type: str | None
    items: str | None = None
    required: bool = True
    nullable: bool = False
    description: str | None = None
    source: str = ""  # "definitions", "observed in N calls", or both joined by " and "

    def spec(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        if self.type == "array":
            out["items"] = self.items
        if not self.required:
            out["required"] = False
        if self.nullable:
            out["nullable"] = True
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "items": self.items,
            "required": self.required,
            "nullable": self.nullable,
            "description": self.description,
            "source": self.source,
        }


@dataclass
class InferredTool:
    tool: str
    calls: int
    fields: list[InferredField] = field(default_factory=list)
    defined: bool = False  # a tool definition was recorded for it
    description: str | None = None
    effect_class: str | None = None
    effect_source: str = "asked"  # "declared by the trace", "given" (or "pinned by NAME@N": the flow), "asked"
    problems: list[str] = field(default_factory=list)

    def contract(self) -> dict[str, Any] | None:
        """The contract (revision 1) when everything is known, else None (`problems`, `effect_class`)."""
        if self.problems or self.effect_class not in EFFECT_CLASSES:
            return None
        return {
            "tool": self.tool,
            "revision": INFERRED_REVISION,
            "effect_class": self.effect_class,
            "fields": {f.name: f.spec() for f in sorted(self.fields, key=lambda f: f.name)},
            "transport": [],
            "fault_stages": [],
            "outcomes": list(INFERRED_OUTCOMES),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "calls": self.calls,
            "defined": self.defined,
            "description": self.description,
            "effect_class": self.effect_class,
            "effect_source": self.effect_source,
            "fields": [f.to_json() for f in self.fields],
            "problems": list(self.problems),
            "contract": self.contract(),
        }


@dataclass
class Inference:
    tools: list[InferredTool]
    model_calls: int

    @property
    def asked(self) -> list[str]:
        """The tools whose effect class the trace does not say and nobody has given yet."""
        return [t.tool for t in self.tools if t.effect_class is None]

    @property
    def problems(self) -> list[str]:
        return [f"{t.tool}: {p}" for t in self.tools for p in t.problems]

    def contracts(self) -> list[dict[str, Any]]:
        """Every contract, the model's built-in one when the run made model calls; only when nothing is missing."""
        out = [t.contract() for t in self.tools]
        if any(c is None for c in out):
            raise ContractError(None, "the inference is incomplete: " + "; ".join(self.problems + self.asked))
        contracts: list[dict[str, Any]] = [c for c in out if c is not None]
        if self.model_calls:
            contracts.append(copy.deepcopy(MODEL_CONTRACT))
        return sorted(contracts, key=lambda c: c["tool"])

    def to_json(self) -> dict[str, Any]:
        return {
            "tools": [t.to_json() for t in self.tools],
            "model_calls": self.model_calls,
            "model_contract": copy.deepcopy(MODEL_CONTRACT) if self.model_calls else None,
            "asked": self.asked,
            "problems": self.problems,
        }


def _one_type(types: set[str]) -> str | None:
    """One contract type for the JSON types seen, or None when they disagree (integer and number are a number)."""
    if types == {"integer", "number"}:
        return "number"
    return next(iter(types)) if len(types) == 1 else None


def definitions_from_messages(messages: Any) -> dict[str, dict[str, Any]]:
    """{tool name: definition} from a model call's input messages in GenAI parts form: the `tool_definitions`
    pseudo message the OTLP converter adds (each part a GenAI definition `{type, name, description, parameters}` or
    an OpenAI one `{type: function, function: {name, description, parameters}}`)."""
    out: dict[str, dict[str, Any]] = {}
    if not isinstance(messages, list):
        return out
    for message in messages:
        if not isinstance(message, dict) or message.get("role") != "tool_definitions":
            continue
        for part in message.get("parts") or []:
            definition = _definition(part)
            if definition is not None:
                out.setdefault(definition["name"], definition)
    return out


def _definition(part: Any) -> dict[str, Any] | None:
    if not isinstance(part, dict):
        return None
    function = part.get("function")
    inner: dict[str, Any] = function if isinstance(function, dict) else part
    name = inner.get("name")
    if not isinstance(name, str) or not name:
        return None
    schema = inner.get("parameters", inner.get("input_schema", inner.get("inputSchema")))
    annotations = inner.get("annotations") if isinstance(inner.get("annotations"), dict) else {}
    return {
        "name": name,
        "description": inner.get("description") if isinstance(inner.get("description"), str) else None,
        "parameters": schema if isinstance(schema, dict) else None,
        "annotations": annotations,
    }


def _schema_type(spec: Any) -> tuple[str | None, bool, str | None]:
    """(type, nullable, items) a JSON Schema property declares; type None when it declares none we can use."""
    if not isinstance(spec, dict):
        return None, False, None
    declared = spec.get("type")
    types = set(declared) if isinstance(declared, list) else ({declared} if isinstance(declared, str) else set())
    for alternative in spec.get("anyOf") or spec.get("oneOf") or []:
        if isinstance(alternative, dict) and isinstance(alternative.get("type"), str):
            types.add(alternative["type"])
    nullable = "null" in types
    types.discard("null")
    type_ = _one_type(types)
    if type_ not in FIELD_TYPES:
        return None, nullable, None
    items = None
    if type_ == "array":
        item_type, _, _ = _schema_type(spec.get("items"))
        items = item_type if item_type in ITEM_TYPES else None
    return type_, nullable, items


def infer_contracts(
    calls: Iterable[tuple[str, Any]],
    *,
    definitions: Mapping[str, Mapping[str, Any]] | None = None,
    declared_effects: Mapping[str, str] | None = None,
    effect_classes: Mapping[str, str] | None = None,
    model_calls: int = 0,
) -> Inference:
    """Infer a contract per tool from its calls `(tool, arguments)` and, where recorded, its definition
    (`definitions_from_messages`, or `{"parameters": schema}` from a call). `declared_effects` {tool: class}: what the
    trace itself said; `effect_classes` {tool: class}: what a person gave for the tools the trace says nothing
    about (a given class never overrides a declared one that disagrees: that is a problem). `model_calls`: how many
    model calls the run made (the built-in model.chat contract is then part of the scenario)."""
    definitions = definitions or {}
    declared_effects = declared_effects or {}
    effect_classes = effect_classes or {}
    by_tool: dict[str, list[Any]] = {}
    for tool, arguments in calls:
        if tool == MODEL_TOOL:
            continue
        by_tool.setdefault(tool, []).append(arguments)
    tools = []
    for tool in sorted(by_tool):
        tools.append(
            _infer_tool(
                tool,
                by_tool[tool],
                definitions.get(tool),
                declared_effects.get(tool),
                effect_classes.get(tool),
            )
        )
    return Inference(tools=tools, model_calls=model_calls)


def _infer_tool(
    tool: str,
    arguments: list[Any],
    definition: Mapping[str, Any] | None,
    declared: str | None,
    given: str | None,
) -> InferredTool:
    out = InferredTool(tool=tool, calls=len(arguments), defined=definition is not None)
    problem = id_problem(tool, what="a tool name")
    if problem is not None:
        out.problems.append(f"the tool's name {problem}: a contract cannot name it")
    n = len(arguments)
    seen: dict[str, list[Any]] = {}
    for args in arguments:
        if not isinstance(args, dict):
            out.problems.append("a call's arguments are not an object of named fields")
            continue
        for name, value in args.items():
            seen.setdefault(name, []).append(value)
    schema = (definition or {}).get("parameters") or {}
    found = schema.get("properties") if isinstance(schema, dict) else None
    properties: dict[str, Any] = found if isinstance(found, dict) else {}
    listed = schema.get("required") if isinstance(schema, dict) else None
    required_by_definition = {r for r in listed if isinstance(r, str)} if isinstance(listed, list) else set()
    if definition is not None:
        out.description = definition.get("description")
    for name in sorted(set(seen) | set(properties)):
        values = seen.get(name, [])
        present = len(values)
        observed = {json_type_name(v) for v in values}
        sources = []
        if name in properties:
            sources.append(DEFINITIONS)
        if present:
            sources.append(f"observed in {present} of {n} call{'s' if n != 1 else ''}")
        defined_type, defined_null, defined_items = _schema_type(properties.get(name))
        given_spec = properties.get(name)
        spec: dict[str, Any] = given_spec if isinstance(given_spec, dict) else {}
        f = InferredField(
            name=name,
            type=None,
            description=spec.get("description") if isinstance(spec.get("description"), str) else None,
            source=" and ".join(sources),
        )
        f.nullable = "null" in observed or defined_null
        observed.discard("null")
        observed_type = _one_type(observed)
        if observed and observed_type is None:
            out.problems.append(f"field {name}: seen as {' and '.join(sorted(observed))}: a contract types it once")
            continue
        widened = defined_type == "number" and observed_type == "integer"
        if defined_type and observed_type and defined_type != observed_type and not widened:
            out.problems.append(f"field {name}: the definition says {defined_type}, the calls sent {observed_type}")
            continue
        f.type = defined_type or observed_type
        if f.type is None:
            out.problems.append(f"field {name}: only null was seen and no definition types it")
            continue
        if f.type == "array":
            item_types = {json_type_name(item) for v in values if isinstance(v, list) for item in v}
            item_type = _one_type(item_types) if item_types else None
            if item_types and item_type is None:
                out.problems.append(f"field {name}: its items were seen as {' and '.join(sorted(item_types))}")
                continue
            f.items = defined_items or item_type
            if f.items not in ITEM_TYPES:
                out.problems.append(
                    f"field {name}: the type of its items is not known (never seen, no definition) or is not one a "
                    f"contract holds ({', '.join(ITEM_TYPES)})"
                )
                continue
        everywhere = present == n and n > 0
        f.required = everywhere and (name not in properties or name in required_by_definition)
        out.fields.append(f)
    said = declared if declared in EFFECT_CLASSES else _annotated_effect(definition)
    if said is not None:
        out.effect_class = said
        out.effect_source = "declared by the trace"
        if given in EFFECT_CLASSES and given != said:
            out.problems.append(f"the trace declares it a {said}; {given} was given")
    elif given in EFFECT_CLASSES:
        out.effect_class = given
        out.effect_source = "given"
    return out


def _annotated_effect(definition: Mapping[str, Any] | None) -> str | None:
    """MCP's tool annotation: `readOnlyHint` true is a read, false a mutation; absent says nothing."""
    hint = ((definition or {}).get("annotations") or {}).get("readOnlyHint")
    if hint is True:
        return "read"
    if hint is False:
        return "mutation"
    return None


def contract_check(contract: Mapping[str, Any]) -> Contract:
    """The inferred contract as the engine loads it (raises ContractError when it could not be pinned)."""
    return Contract.from_dict(dict(contract))
