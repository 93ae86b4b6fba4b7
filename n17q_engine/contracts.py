"""Tool contracts and request normalization (DESIGN §5).

A contract (tool, revision) declares which fields of a request carry meaning, their types, defaults and
canonical form, which fields are transport only (an attempt id, a trace id: they may vary and are dropped),
the tool's effect class, the fault stages its adapter supports and the outcomes it can report.

`normalize(contract, args)` turns what an agent sent into the normalized request: defaults resolved,
values canonicalized, transport fields dropped. It fails closed: an unknown field, a wrong type, a missing
required field or a null where none is allowed raises `ContractError` naming the field. Nothing is coerced
("5" is not 5, 5.0 is not an integer, true is not a number). The normalized request does not carry the
revision: a fixture key is (tool, contract revision, `request_digest(normalized)`), the revision beside the
digest, as the example bundle records it (docs/decisions.md).

A contract lives in a scenario package as a plain JSON-able dict (`Contract.from_dict`, `to_dict`):

    {"tool": "docs.search", "revision": 1, "effect_class": "read",
     "fields": {"query": {"type": "string", "canonical": ["strip"]},
                "corpus": {"type": "string", "default": "public-docs"},
                "limit": {"type": "integer", "default": 5},
                "tags": {"type": "array", "items": "string", "canonical": ["lower", "unique", "sort"],
                         "required": false}},
     "transport": ["attempt_id", "trace_id"],
     "fault_stages": ["before_send", "during_response"],
     "outcomes": ["ok", "empty", "error", "timeout"]}

Decisions:
- A field with a default is optional and the default is filled in; a field without one is required unless
  it says `"required": false`, in which case, when omitted, it is omitted from the normalized request too
  (omission is not turned into a value). `nullable` admits an explicit null, which stays null.
- Canonicalization is declared, never guessed: `strip` and `lower` apply to strings (or to each string
  item of an array), `unique` and `sort` to arrays (an array declared unordered). Defaults pass through the
  same canonicalization, so a default written " Public-Docs " cannot make two keys for one meaning.
- `object` fields are JSON objects kept as given (their key order does not matter: the digest sorts keys);
  numbers must be finite.
- A read contract may not declare `after_world_mutation` (a read mutates nothing, so the stage cannot be
  observed); every other stage of `vocabulary.FAULT_STAGES` is allowed for both classes.
- A contract dict with a key this module does not know is refused: contracts are ours, a typo must not
  silently become "no canonicalization".
- `volatile` (issue 36, extension): request parts that may differ between two calls meaning the same thing (an
  id a client makes up per call, an id the tool handed out earlier and the caller quotes back) are declared as paths
  and replaced by the marker `VOLATILE` in the normalized request, so they do not enter the digest. A path is the
  dotted way to the part from a field of the contract, `[]` after a name meaning "each item of that array":
  `metadata`, `messages[].tool_call_id`, `messages[].tool_calls[].id`. Only a field's nested parts are untyped
  JSON, so a path that goes below its field starts at an `object` field or at each item of an array of objects; a
  path may not run through an array the contract sorts or deduplicates (the volatile part would decide the order);
  what a request lacks is left alone. A whole field declared volatile keeps its presence (the marker stands for
  its value) and the marker is accepted for it again, so a normalized request normalizes to itself.
- A revision may declare how fixtures of earlier revisions become its own (`migrations_from`, docs/contract-
  migration.md): `{"<earlier revision>": [operation, ...]}`, each operation one of a small reviewed set
  (`MIGRATION_OPERATIONS`), data only. Here each is checked against this revision (a renamed field must be one
  of ours, an added value must satisfy its field); `contract_migration.migration_path` checks the other side.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import canonical
from .vocabulary import FAULT_STAGES, RESULT_OUTCOMES

EFFECT_CLASSES = ("read", "mutation")
FIELD_TYPES = ("string", "integer", "number", "boolean", "array", "object")
ITEM_TYPES = ("string", "integer", "number", "boolean", "object")
STRING_OPS = ("strip", "lower")
ARRAY_OPS = ("unique", "sort")
_CONTRACT_KEYS = frozenset(
    {
        "tool",
        "revision",
        "effect_class",
        "fields",
        "transport",
        "fault_stages",
        "outcomes",
        "produces",
        "migrations_from",
        "volatile",
        "max_output_bytes",
        "idempotency",
    }
)
# What a volatile request part is replaced by in the normalized request (see `volatile` above).
VOLATILE = "<volatile>"
_PATH_SEGMENT = re.compile(r"^([A-Za-z0-9_-]+)(\[\])?$")
# What a call of the tool leaves in the run: a `tool.result`, or (a command run in a workspace) a `command.receipt`.
PRODUCES = ("result", "receipt")
# The declared structural transformations between contract revisions (docs/contract-migration.md): the keys
# each operation takes besides "op"; every one may also say "meaning_bearing" (true) and carry a "note".
MIGRATION_OPERATIONS: dict[str, frozenset[str]] = {
    "rename_field": frozenset({"from", "to"}),  # a request field renamed
    "add_field": frozenset({"field", "value"}),  # a request field the old revision left implicit, with its value
    "drop_field": frozenset({"field"}),  # a request field the new revision no longer has
    "move": frozenset({"from", "to"}),  # a value in the response body moved (dotted object paths)
    "map_outcome": frozenset({"from", "to"}),  # an outcome reported as another: always meaning-bearing
}
_FIELD_KEYS = frozenset({"type", "items", "default", "required", "nullable", "canonical"})
_NO_DEFAULT: Any = object()


class ContractError(ValueError):
    """A contract or a request that breaks one. `field` names the field at fault (None: the whole thing)."""

    def __init__(self, field: str | None, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


def json_type_name(value: Any) -> str:
    """A JSON value's type as contracts name them (null, boolean, integer, number, string, array, object)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def check_json(value: Any, where: str) -> None:
    """JSON only (string keys, finite numbers, no tuples or objects of other types); else ContractError."""
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ContractError(where, "a number must be finite")
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            check_json(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ContractError(where, f"object keys must be strings, got {json_type_name(key)}")
            check_json(item, f"{where}.{key}")
        return
    raise ContractError(where, f"not a JSON value ({json_type_name(value)})")


_TYPE_CHECKS: dict[str, Any] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


def _check_scalar(type_: str, value: Any, where: str) -> None:
    if not _TYPE_CHECKS[type_](value):
        raise ContractError(where, f"expected {type_}, got {json_type_name(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ContractError(where, "a number must be finite")
    if type_ == "object":
        check_json(value, where)


@dataclass(frozen=True, slots=True)
class FieldSpec:
    name: str
    type: str
    items: str | None = None
    default: Any = _NO_DEFAULT
    required: bool = True
    nullable: bool = False
    canonical: tuple[str, ...] = ()

    @property
    def has_default(self) -> bool:
        return self.default is not _NO_DEFAULT

    @classmethod
    def from_dict(cls, name: str, data: Any) -> FieldSpec:
        where = f"fields.{name}"
        if not isinstance(name, str) or not name:
            raise ContractError("fields", f"a field name must be a non-empty string, got {name!r}")
        if not isinstance(data, dict):
            raise ContractError(where, f"a field spec must be an object, got {json_type_name(data)}")
        unknown = sorted(set(data) - _FIELD_KEYS)
        if unknown:
            raise ContractError(f"{where}.{unknown[0]}", "unknown key in a field spec")
        type_ = data.get("type")
        if type_ not in FIELD_TYPES:
            raise ContractError(f"{where}.type", f"unknown type {type_!r}; one of {', '.join(FIELD_TYPES)}")
        items = data.get("items")
        if type_ == "array":
            if items not in ITEM_TYPES:
                raise ContractError(f"{where}.items", f"unknown item type {items!r}; one of {', '.join(ITEM_TYPES)}")
        elif items is not None:
            raise ContractError(f"{where}.items", "only an array has items")
        ops = data.get("canonical", [])
        if not isinstance(ops, list) or not all(isinstance(op, str) for op in ops):
            raise ContractError(f"{where}.canonical", "must be a list of operation names")
        if len(set(ops)) != len(ops):
            raise ContractError(f"{where}.canonical", "an operation is listed twice")
        string_like = type_ == "string" or (type_ == "array" and items == "string")
        for op in ops:
            if op in STRING_OPS and not string_like:
                raise ContractError(f"{where}.canonical", f"{op!r} applies to strings, not {type_}")
            if op in ARRAY_OPS and type_ != "array":
                raise ContractError(f"{where}.canonical", f"{op!r} applies to arrays, not {type_}")
            if op not in STRING_OPS + ARRAY_OPS:
                raise ContractError(
                    f"{where}.canonical", f"unknown operation {op!r}; one of {', '.join(STRING_OPS + ARRAY_OPS)}"
                )
        for flag in ("required", "nullable"):
            if flag in data and not isinstance(data[flag], bool):
                raise ContractError(f"{where}.{flag}", "must be true or false")
        nullable = data.get("nullable", False)
        has_default = "default" in data
        required = data.get("required", not has_default)
        if required and has_default:
            raise ContractError(f"{where}.required", "a field with a default is not required")
        spec = cls(
            name=name,
            type=type_,
            items=items,
            default=data["default"] if has_default else _NO_DEFAULT,
            required=required,
            nullable=nullable,
            canonical=tuple(ops),
        )
        if has_default:
            # The default must itself satisfy the field; it is canonicalized when it is used.
            spec.canonicalize(data["default"], f"{where}.default")
        return spec

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        if self.items is not None:
            out["items"] = self.items
        if self.has_default:
            out["default"] = self.default
        else:
            out["required"] = self.required
        if self.nullable:
            out["nullable"] = True
        if self.canonical:
            out["canonical"] = list(self.canonical)
        return out

    def canonicalize(self, value: Any, where: str | None = None) -> Any:
        """Check `value` against this field and return its canonical form (a new value; input untouched)."""
        if value is None:
            if self.nullable:
                return None
            raise ContractError(where or self.name, "null is not allowed")
        type_ = self.type
        if type_ == "string" and isinstance(value, str):  # the common case, checked without the general path
            return self._string(value) if self.canonical else value
        where = where or self.name
        _check_scalar(type_, value, where)
        if type_ == "array":
            assert self.items is not None
            out = []
            for i, item in enumerate(value):
                if item is None:
                    raise ContractError(f"{where}[{i}]", "null is not allowed in an array")
                _check_scalar(self.items, item, f"{where}[{i}]")
                out.append(self._string(item) if self.items == "string" else copy_json(item))
            if "unique" in self.canonical:
                seen: dict[str, Any] = {}
                for item in out:
                    seen.setdefault(canonical.canonical_json(item).decode("utf-8"), item)
                out = list(seen.values())
            if "sort" in self.canonical:
                out.sort(key=lambda item: canonical.canonical_json(item))
            return out
        return copy_json(value)

    def _string(self, value: str) -> str:
        if "strip" in self.canonical:
            value = value.strip()
        if "lower" in self.canonical:
            value = value.lower()
        return value


def copy_json(value: Any) -> Any:
    """A deep copy of a JSON value (dicts and lists copied, scalars shared): cheaper than copy.deepcopy."""
    if isinstance(value, dict):
        return {k: copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_json(v) for v in value]
    return value


def _str_list(data: Mapping[str, Any], key: str, allowed: Iterable[str] | None = None) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ContractError(key, "must be a list of non-empty strings")
    if len(set(value)) != len(value):
        raise ContractError(key, "a value is listed twice")
    if allowed is not None:
        allowed = tuple(allowed)
        for v in value:
            if v not in allowed:
                raise ContractError(key, f"unknown value {v!r}; one of {', '.join(allowed)}")
    return tuple(value)


@dataclass(frozen=True, slots=True)
class Contract:
    tool: str
    revision: int
    effect_class: str
    fields: Mapping[str, FieldSpec]
    transport: frozenset[str] = frozenset()
    fault_stages: tuple[str, ...] = ()
    outcomes: tuple[str, ...] = ("ok",)
    produces: str = "result"
    # {earlier revision: the operations that turn its fixtures into this revision's}; see MIGRATION_OPERATIONS.
    migrations_from: Mapping[int, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)
    # Request parts whose value does not enter the digest (paths as declared; see `volatile` above).
    volatile: tuple[str, ...] = ()
    # Extension (issue 39, seed 003 "Adapter fixtures verified … output bounds, … idempotency"; docs/contract-tests.md):
    # the most bytes a response body may hold (its canonical JSON), and for a mutation the request field that carries
    # its idempotency key (the provider keeps one effect per key). None: not declared.
    max_output_bytes: int | None = None
    idempotency_key_field: str | None = None
    _order: tuple[str, ...] = field(default=(), repr=False, compare=False)
    _volatile_paths: tuple[tuple[tuple[str, bool], ...], ...] = field(default=(), repr=False, compare=False)
    _volatile_whole: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @property
    def key(self) -> tuple[str, int]:
        return (self.tool, self.revision)

    @classmethod
    def from_dict(cls, data: Any) -> Contract:
        if not isinstance(data, dict):
            raise ContractError(None, f"a contract must be an object, got {json_type_name(data)}")
        unknown = sorted(set(data) - _CONTRACT_KEYS)
        if unknown:
            raise ContractError(unknown[0], "unknown key in a contract")
        tool = data.get("tool")
        if not isinstance(tool, str) or not tool.strip() or tool != tool.strip():
            raise ContractError("tool", f"must be a non-empty name without surrounding spaces, got {tool!r}")
        revision = data.get("revision")
        if not isinstance(revision, int) or isinstance(revision, bool) or revision < 1:
            raise ContractError("revision", f"must be a positive integer, got {revision!r}")
        effect_class = data.get("effect_class")
        if effect_class not in EFFECT_CLASSES:
            raise ContractError("effect_class", f"must be one of {', '.join(EFFECT_CLASSES)}, got {effect_class!r}")
        raw_fields = data.get("fields", {})
        if not isinstance(raw_fields, dict):
            raise ContractError("fields", "must be an object of field specs")
        fields = {name: FieldSpec.from_dict(name, spec) for name, spec in raw_fields.items()}
        transport = _str_list(data, "transport")
        both = sorted(set(transport) & set(fields))
        if both:
            raise ContractError(f"transport.{both[0]}", "a field cannot be both semantic and transport-only")
        fault_stages = _str_list(data, "fault_stages", FAULT_STAGES)
        if effect_class == "read" and "after_world_mutation" in fault_stages:
            raise ContractError("fault_stages", "a read contract cannot fail after a world mutation it never makes")
        outcomes = _str_list(data, "outcomes", RESULT_OUTCOMES) if "outcomes" in data else ("ok",)
        if not outcomes:
            raise ContractError("outcomes", "a contract must name at least one outcome")
        produces = data.get("produces", "result")
        if produces not in PRODUCES:
            raise ContractError("produces", f"must be one of {', '.join(PRODUCES)}, got {produces!r}")
        migrations = _migrations_from(data.get("migrations_from", {}), revision, fields, outcomes)
        volatile = _str_list(data, "volatile")
        paths = tuple(_volatile_path(path, fields) for path in volatile)
        max_output = data.get("max_output_bytes")
        if max_output is not None and (
            not isinstance(max_output, int) or isinstance(max_output, bool) or max_output < 1
        ):
            raise ContractError("max_output_bytes", f"must be a positive integer (bytes), got {max_output!r}")
        key_field = _idempotency(data.get("idempotency"), effect_class, fields)
        return cls(
            tool=tool,
            revision=revision,
            effect_class=effect_class,
            fields=fields,
            transport=frozenset(transport),
            fault_stages=fault_stages,
            outcomes=outcomes,
            produces=produces,
            migrations_from=migrations,
            volatile=volatile,
            max_output_bytes=max_output,
            idempotency_key_field=key_field,
            _order=tuple(sorted(fields)),
            _volatile_paths=paths,
            _volatile_whole=frozenset(p[0][0] for p in paths if len(p) == 1 and not p[0][1]),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "revision": self.revision,
            "effect_class": self.effect_class,
            "fields": {name: self.fields[name].to_dict() for name in sorted(self.fields)},
            "transport": sorted(self.transport),
            "fault_stages": list(self.fault_stages),
            "outcomes": list(self.outcomes),
            "produces": self.produces,
            # Only when declared, so a contract without migrations keeps the dict (and digest) it always had.
            **(
                {
                    "migrations_from": {
                        str(rev): [dict(op) for op in ops] for rev, ops in sorted(self.migrations_from.items())
                    }
                }
                if self.migrations_from
                else {}
            ),
            # Likewise only when declared.
            **({"volatile": list(self.volatile)} if self.volatile else {}),
            **({"max_output_bytes": self.max_output_bytes} if self.max_output_bytes is not None else {}),
            **({"idempotency": {"key_field": self.idempotency_key_field}} if self.idempotency_key_field else {}),
        }

    def normalize(self, args: Any) -> dict[str, Any]:
        return normalize(self, args)

    def digest(self, args: Any) -> tuple[dict[str, Any], str]:
        """(normalized request, its request digest)."""
        normalized = normalize(self, args)
        return normalized, canonical.request_digest(normalized)


def _idempotency(value: Any, effect_class: str, fields: Mapping[str, FieldSpec]) -> str | None:
    """The request field a mutation's idempotency key rides in (`{"key_field": name}`), or None when undeclared."""
    if value is None:
        return None
    if effect_class != "mutation":
        raise ContractError("idempotency", "only a mutation has an idempotency behaviour (a read changes nothing)")
    if not isinstance(value, dict) or set(value) != {"key_field"}:
        raise ContractError("idempotency", 'must be {"key_field": <the request field carrying the key>}')
    name = value["key_field"]
    if not isinstance(name, str) or name not in fields:
        raise ContractError("idempotency.key_field", f"{name!r} is not a semantic field of the contract")
    return name


def _migrations_from(
    value: Any, revision: int, fields: Mapping[str, FieldSpec], outcomes: tuple[str, ...]
) -> dict[int, tuple[dict[str, Any], ...]]:
    """`migrations_from`, checked against this (the target) revision; see MIGRATION_OPERATIONS."""
    if not isinstance(value, dict):
        raise ContractError("migrations_from", "must be an object {earlier revision: [operation, ...]}")
    out: dict[int, tuple[dict[str, Any], ...]] = {}
    for key, ops in value.items():
        where = f"migrations_from.{key}"
        if not (isinstance(key, str) and key.isdigit() and key == str(int(key)) and 1 <= int(key) < revision):
            raise ContractError(where, f"a key is an earlier revision of this tool (1 to {revision - 1})")
        if not isinstance(ops, list) or not ops:
            raise ContractError(where, "must be a non-empty list of operations")
        out[int(key)] = tuple(_migration_op(op, f"{where}[{i}]", fields, outcomes) for i, op in enumerate(ops))
    return out


def _migration_op(op: Any, where: str, fields: Mapping[str, FieldSpec], outcomes: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(op, dict):
        raise ContractError(where, f"an operation must be an object, got {json_type_name(op)}")
    kind = op.get("op")
    if kind not in MIGRATION_OPERATIONS:
        raise ContractError(f"{where}.op", f"unknown operation {kind!r}; one of {', '.join(MIGRATION_OPERATIONS)}")
    keys = MIGRATION_OPERATIONS[kind]
    missing = sorted(keys - set(op))
    if missing:
        raise ContractError(f"{where}.{missing[0]}", f"{kind} needs it")
    unknown = sorted(set(op) - keys - {"op", "meaning_bearing", "note"})
    if unknown:
        raise ContractError(f"{where}.{unknown[0]}", f"unknown key for {kind}")
    if "meaning_bearing" in op and not isinstance(op["meaning_bearing"], bool):
        raise ContractError(f"{where}.meaning_bearing", "must be true or false")
    if "note" in op and not isinstance(op["note"], str):
        raise ContractError(f"{where}.note", "must be a string")
    for key in keys - {"value"}:
        if not isinstance(op[key], str) or not op[key] or op[key] != op[key].strip():
            raise ContractError(f"{where}.{key}", "must be a non-empty name without surrounding spaces")
    if kind == "rename_field":
        if op["to"] not in fields:
            raise ContractError(f"{where}.to", f"{op['to']!r} is not a field of this revision")
        if op["from"] in fields:
            raise ContractError(f"{where}.from", f"{op['from']!r} is still a field of this revision: not a rename")
    elif kind == "add_field":
        if op["field"] not in fields:
            raise ContractError(f"{where}.field", f"{op['field']!r} is not a field of this revision")
        fields[op["field"]].canonicalize(op["value"], f"{where}.value")
    elif kind == "drop_field":
        if op["field"] in fields:
            raise ContractError(f"{where}.field", f"{op['field']!r} is still a field of this revision: not a drop")
    elif kind == "move":
        for key in ("from", "to"):
            if any(not part for part in op[key].split(".")):
                raise ContractError(f"{where}.{key}", "a body path is dotted object keys, none empty")
        a, b = op["from"], op["to"]
        if a == b or b.startswith(a + ".") or a.startswith(b + "."):
            raise ContractError(where, "a value cannot move onto itself or inside itself")
    elif kind == "map_outcome":
        if op["from"] not in RESULT_OUTCOMES:
            raise ContractError(f"{where}.from", f"{op['from']!r} is not an outcome")
        if op["to"] not in outcomes:
            raise ContractError(f"{where}.to", f"{op['to']!r} is not an outcome of this revision")
        if op["from"] == op["to"]:
            raise ContractError(where, "an outcome mapped to itself changes nothing")
        if op.get("meaning_bearing") is False:
            raise ContractError(
                f"{where}.meaning_bearing", "an outcome reported as another changes meaning: it is always reviewed"
            )
    return copy_json(op)


def _volatile_path(path: str, fields: Mapping[str, FieldSpec]) -> tuple[tuple[str, bool], ...]:
    """A declared volatile path, checked against the contract's fields: ((name, each item), ...)."""
    where = f"volatile.{path}"
    segments: list[tuple[str, bool]] = []
    for part in path.split("."):
        match = _PATH_SEGMENT.match(part)
        if match is None:
            raise ContractError(where, "a path is dotted names, each optionally followed by [] (each item)")
        segments.append((match.group(1), match.group(2) is not None))
    (name, each), below = segments[0], segments[1:]
    spec = fields.get(name)
    if spec is None:
        raise ContractError(where, f"{name!r} is not a field of the contract")
    if each and spec.type != "array":
        raise ContractError(where, f"{name!r} is not an array ({spec.type}): [] has no items to take")
    if each and not below:
        raise ContractError(where, f"the items of {name!r} are typed: declare the parts of them that vary")
    if below and not (spec.type == "object" or (each and spec.items == "object")):
        raise ContractError(where, f"{name!r} has no untyped parts to go into (an object, or [] of objects)")
    if {"unique", "sort"} & set(spec.canonical):
        raise ContractError(where, f"{name!r} is sorted or deduplicated: a volatile part would decide its order")
    return tuple(segments)


def _mark_volatile(container: dict[str, Any], segments: tuple[tuple[str, bool], ...]) -> None:
    """Replace the part at `segments` (where `container` has it) by VOLATILE, in place."""
    (name, each), rest = segments[0], segments[1:]
    if name not in container:
        return
    value = container[name]
    if each:
        if not isinstance(value, list):
            return
        if not rest:
            container[name] = [VOLATILE] * len(value)
            return
        for item in value:
            if isinstance(item, dict):
                _mark_volatile(item, rest)
    elif not rest:
        container[name] = VOLATILE
    elif isinstance(value, dict):
        _mark_volatile(value, rest)


def normalize(contract: Contract, args: Any) -> dict[str, Any]:
    """The normalized request for `args` under `contract`, or `ContractError` naming the field at fault."""
    if not isinstance(args, dict):
        raise ContractError(None, f"{contract.tool}: a request must be an object, got {json_type_name(args)}")
    for name in args:
        if not isinstance(name, str):
            raise ContractError(None, f"{contract.tool}: request keys must be strings, got {name!r}")
        if name not in contract.fields and name not in contract.transport:
            raise ContractError(name, f"unknown field for {contract.tool} revision {contract.revision}")
    out: dict[str, Any] = {}
    whole = contract._volatile_whole
    for name in contract._order or sorted(contract.fields):
        spec = contract.fields[name]
        if name in args:
            if whole and name in whole and args[name] == VOLATILE:  # already normalized: the marker stands for it
                out[name] = VOLATILE
                continue
            out[name] = spec.canonicalize(args[name])
        elif spec.has_default:
            out[name] = spec.canonicalize(spec.default)
        elif spec.required:
            raise ContractError(name, f"required by {contract.tool} revision {contract.revision} and missing")
    for path in contract._volatile_paths:
        _mark_volatile(out, path)
    return out


def request_digest(normalized_request: Any) -> str:
    """The fixture-key digest of a normalized request: exactly `canonical.request_digest`."""
    return canonical.request_digest(normalized_request)


class ContractSet:
    """The contracts a scenario pins: one revision per tool. An unknown tool is refused, never guessed."""

    def __init__(self, contracts: Iterable[Contract]) -> None:
        self._by_tool: dict[str, Contract] = {}
        for contract in contracts:
            if contract.tool in self._by_tool:
                raise ContractError(
                    "tool",
                    f"{contract.tool} is pinned twice (revisions "
                    f"{self._by_tool[contract.tool].revision} and {contract.revision})",
                )
            self._by_tool[contract.tool] = contract

    @classmethod
    def from_dicts(cls, items: Iterable[Any]) -> ContractSet:
        return cls(Contract.from_dict(item) for item in items)

    def get(self, tool: str) -> Contract:
        contract = self._by_tool.get(tool)
        if contract is None:
            raise ContractError("tool", f"unknown tool {tool!r}: the scenario pins no contract for it")
        return contract

    def __contains__(self, tool: object) -> bool:
        return tool in self._by_tool

    def __iter__(self):
        return iter(self._by_tool.values())

    def __len__(self) -> int:
        return len(self._by_tool)
