"""The attribute conventions the OTLP format reads, and how a span's attributes are read under each: the names of
OpenTelemetry GenAI (`gen_ai.*`), OpenInference (`openinference.span.kind`, `llm.*`, `tool.*`), the process
conventions (`process.*`) and N17Q's own (`n17q.*`); a span's role by its convention (`_role`, `_is_command`), its
token usage (`_usage`), messages in each convention's form turned into the GenAI parts form (`_openai_message`,
`_oi_message`, `_legacy_messages`, `_unflatten`), and n17q event attributes as vocabulary fields (`_field_value`).
docs/formats/otlp.md tabulates the mapping."""

from __future__ import annotations

import json
import re
from typing import Any

from n17q_engine import vocabulary as v
from n17q_engine.json_values import json_values_bound

from .. import ConversionError
from .text import _scalar_text

# ------------------------------------------------------------------------------------------------ convention names

# OpenTelemetry GenAI semantic conventions (open-telemetry/semantic-conventions, docs/gen-ai/gen-ai-spans.md and
# gen-ai-agent-spans.md, as of April 2026; the conventions now live in semantic-conventions-genai).
GEN_AI_OPERATION = "gen_ai.operation.name"
AGENT_OPERATIONS = frozenset({"invoke_agent", "invoke_workflow"})
MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
TOOL_OPERATIONS = frozenset({"execute_tool"})
EMBEDDING_OPERATIONS = frozenset({"embeddings"})
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_AGENT_ID = "gen_ai.agent.id"
GEN_AI_AGENT_VERSION = "gen_ai.agent.version"
GEN_AI_AGENT_DESCRIPTION = "gen_ai.agent.description"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_PROVIDER = "gen_ai.provider.name"
GEN_AI_SYSTEM = "gen_ai.system"  # deprecated for gen_ai.provider.name
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
GEN_AI_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
GEN_AI_TOOL_DEFINITIONS = "gen_ai.tool.definitions"
GEN_AI_PROMPT = "gen_ai.prompt"  # deprecated: a string, or indexed gen_ai.prompt.<n>.<field> (OpenLLMetry)
GEN_AI_COMPLETION = "gen_ai.completion"  # deprecated, likewise
GEN_AI_USAGE_INPUT = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_PROMPT = "gen_ai.usage.prompt_tokens"  # deprecated
GEN_AI_USAGE_COMPLETION = "gen_ai.usage.completion_tokens"  # deprecated
GEN_AI_USAGE_DETAILS = {
    "gen_ai.usage.cache_read.input_tokens": "cache_read_input_tokens",
    "gen_ai.usage.cache_creation.input_tokens": "cache_creation_input_tokens",
    "gen_ai.usage.reasoning.output_tokens": "reasoning_output_tokens",
}
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_RESULT = "gen_ai.tool.call.result"
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
GEN_AI_TOOL_DESCRIPTION = "gen_ai.tool.description"
ERROR_TYPE = "error.type"
# Span events of the deprecated GenAI event conventions, recorded on the span.
GEN_AI_INPUT_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
GEN_AI_CHOICE_EVENT = "gen_ai.choice"
GEN_AI_CONTENT_PROMPT_EVENT = "gen_ai.content.prompt"
GEN_AI_CONTENT_COMPLETION_EVENT = "gen_ai.content.completion"
EXCEPTION_EVENT = "exception"

# OpenInference (Arize-ai/openinference, spec/semantic_conventions.md). Written here rather than imported: the
# openinference-semantic-conventions package is a dev dependency, and the product must read OpenInference spans
# without it; tests/engine/test_format_otlp.py checks each name against the package's constants.
OI_SPAN_KIND = "openinference.span.kind"
OI_AGENT, OI_CHAIN, OI_LLM, OI_TOOL, OI_EMBEDDING = "AGENT", "CHAIN", "LLM", "TOOL", "EMBEDDING"
OI_MODEL_NAME = "llm.model_name"
OI_PROVIDER = "llm.provider"
OI_SYSTEM = "llm.system"
OI_INVOCATION_PARAMETERS = "llm.invocation_parameters"
OI_INPUT_MESSAGES = "llm.input_messages"
OI_OUTPUT_MESSAGES = "llm.output_messages"
OI_TOOLS = "llm.tools"  # llm.tools.<n>.tool.json_schema: the tools the request offered
OI_TOKENS_PROMPT = "llm.token_count.prompt"
OI_TOKENS_COMPLETION = "llm.token_count.completion"
OI_TOKENS_TOTAL = "llm.token_count.total"
OI_TOKEN_DETAILS_PREFIX = "llm.token_count."
OI_MESSAGE_ROLE = "message.role"
OI_MESSAGE_CONTENT = "message.content"
OI_MESSAGE_TOOL_CALLS = "message.tool_calls"
OI_TOOL_CALL_ID = "tool_call.id"
OI_TOOL_CALL_FUNCTION_NAME = "tool_call.function.name"
OI_TOOL_CALL_FUNCTION_ARGUMENTS = "tool_call.function.arguments"
OI_TOOL_NAME = "tool.name"
OI_TOOL_DESCRIPTION = "tool.description"
OI_TOOL_PARAMETERS = "tool.parameters"
OI_TOOL_ID = "tool.id"
OI_INPUT_VALUE = "input.value"
OI_INPUT_MIME_TYPE = "input.mime_type"
OI_OUTPUT_VALUE = "output.value"
OI_OUTPUT_MIME_TYPE = "output.mime_type"
OI_AGENT_NAME = "agent.name"
OI_SESSION_ID = "session.id"
OI_MIME_JSON = "application/json"

# Process (command execution) attributes of the OpenTelemetry process conventions.
PROCESS_COMMAND_LINE = "process.command_line"
PROCESS_COMMAND = "process.command"
PROCESS_COMMAND_ARGS = "process.command_args"
PROCESS_EXECUTABLE_NAME = "process.executable.name"
PROCESS_EXIT_CODE = "process.exit.code"

# N17Q's own attributes (docs/formats/otlp.md, "n17q.* attributes and events").
N17Q_RUN_ID = "n17q.run.id"
N17Q_RUN_TITLE = "n17q.run.title"
N17Q_TASK_ID = "n17q.task.id"
N17Q_TASK_REVISION = "n17q.task.revision"
N17Q_POLICY_REVISION = "n17q.policy_revision"
N17Q_WORKSPACE = "n17q.workspace.id"
N17Q_CONTRACT_REVISION = "n17q.contract_revision"
N17Q_TOOL_OUTCOME = "n17q.tool.outcome"
N17Q_COMMAND = "n17q.command."  # prefix: line, tool, suites, pre_tree, post_tree, completion, results, output, ...
N17Q_EVENT = "n17q.event"
N17Q_KIND = "n17q.kind"
N17Q_ID = "n17q.id"
N17Q_ATTEMPT = "n17q.attempt"
_RUN_LEVEL_KEYS = (N17Q_RUN_ID, N17Q_RUN_TITLE, N17Q_TASK_ID, N17Q_TASK_REVISION, N17Q_POLICY_REVISION)
# Envelope fields an n17q span event cannot set by name (the converter writes them), and the converter's own field.
_RESERVED_FIELDS = frozenset(v.ENVELOPE) | {"otlp"}
_MARKERS = frozenset({"gen_ai.operation.name", "openinference.span.kind"})
_RUN_ID_BAD = re.compile(r"[^\w.:@+=-]+")


# Tool outcomes from `error.type` (lower-cased, substring): the first that matches wins; anything else is `error`.
_ERROR_TYPE_OUTCOMES = (
    ("timeout", "timeout"),
    ("timed_out", "timeout"),
    ("deadline", "timeout"),
    ("not_found", "not_found"),
    ("notfound", "not_found"),
    ("filenotfound", "not_found"),
    ("404", "not_found"),
    ("permission", "denied"),
    ("forbidden", "denied"),
    ("denied", "denied"),
    ("unauthorized", "denied"),
    ("403", "denied"),
    ("401", "denied"),
)


def _role(attrs: dict[str, Any]) -> str:
    op = attrs.get(GEN_AI_OPERATION)
    oi = attrs.get(OI_SPAN_KIND)
    oi = oi.upper() if isinstance(oi, str) else None
    if op in AGENT_OPERATIONS or oi == OI_AGENT:
        return "agent"
    if op in MODEL_OPERATIONS or oi == OI_LLM:
        return "model"
    if op in TOOL_OPERATIONS or oi == OI_TOOL:
        return "tool"
    if op in EMBEDDING_OPERATIONS or oi == OI_EMBEDDING:
        return "embedding"
    if op is None and oi is None and GEN_AI_REQUEST_MODEL in attrs:
        return "model"  # older instrumentations write a model request without an operation name
    return "other"


def _is_command(attrs: dict[str, Any]) -> bool:
    return (
        PROCESS_COMMAND_LINE in attrs
        or PROCESS_EXECUTABLE_NAME in attrs
        or PROCESS_COMMAND in attrs
        or (N17Q_COMMAND + "line") in attrs
    )


def _usage(attrs: dict[str, Any]) -> dict[str, Any] | None:
    def count(key: str) -> int | None:
        value = attrs.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    keys: list[str] = []

    def first(*names: str) -> int | None:
        """The first of `names` (the current GenAI name, then older and OpenInference ones) that holds a count."""
        for name in names:
            value = count(name)
            if value is not None:
                keys.append(name)
                return value
        return None

    input_tokens = first(GEN_AI_USAGE_INPUT, GEN_AI_USAGE_PROMPT, OI_TOKENS_PROMPT)
    output_tokens = first(GEN_AI_USAGE_OUTPUT, GEN_AI_USAGE_COMPLETION, OI_TOKENS_COMPLETION)
    total = first(OI_TOKENS_TOTAL)
    if input_tokens is None and output_tokens is None and total is None:
        return None
    out: dict[str, Any] = {"amount": total if total is not None else (input_tokens or 0) + (output_tokens or 0)}
    if input_tokens is not None:
        out["input_tokens"] = input_tokens
    if output_tokens is not None:
        out["output_tokens"] = output_tokens
    for key, name in GEN_AI_USAGE_DETAILS.items():
        value = count(key)
        if value is not None:
            out[name] = value
            keys.append(key)
    out["_keys"] = keys
    return out


def _field_value(value: Any, spec: v.Field | None, where: str) -> Any:
    """An n17q event attribute as the vocabulary's field: objects and arrays arrive as JSON text (or as OTLP
    kvlist/array values); anything else is taken as it came, and validate_event judges it."""
    wanted = spec.type if spec is not None else v.ANY
    if isinstance(value, str) and wanted in (v.DICT, v.LIST, v.ANY):
        stripped = value.lstrip()
        if wanted != v.ANY or stripped[:1] in ("{", "["):
            try:
                return json.loads(value)
            except (ValueError, RecursionError):
                if wanted != v.ANY:
                    raise ConversionError(
                        f"{where} must be a JSON {'object' if wanted == v.DICT else 'array'} (as text)"
                    ) from None
    return value


# A JSON text an attribute holds (messages, tool arguments and results) is read as JSON up to this many values, counted
# on its text before it is parsed (`json_values_bound`); past it, it stays the text it is. Issue 35: 6.8 MB of
# `[{"role":"u"},...]` in one attribute took the converting process to 260 MB once parsed; this many are ~20 MB.
MAX_JSON_TEXT_VALUES = 100_000


def _parse_json_text(value: str) -> Any:
    """A JSON string as its value, or the string itself when it is not JSON (or holds more than
    MAX_JSON_TEXT_VALUES values)."""
    stripped = value.lstrip()
    if stripped[:1] in ("{", "[", '"') or stripped in ("true", "false", "null") or stripped[:1].isdigit():
        if len(value) > MAX_JSON_TEXT_VALUES and json_values_bound(value, MAX_JSON_TEXT_VALUES) > MAX_JSON_TEXT_VALUES:
            return value
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


def _post_tree(value: Any, completion: str) -> str | None:
    """The receipt's post-run tree: what the span says, else "unknown" for a completed command (which must name one)
    and null for any other completion."""
    if value:
        return str(value)
    return "unknown" if completion == "completed" else None


def _as_list(value: Any) -> list[Any]:
    if isinstance(value, str):
        value = _parse_json_text(value)
    if isinstance(value, list):
        return value
    return [value]


def _as_object(value: Any, name: str) -> dict[str, Any]:
    if isinstance(value, str):
        value = _parse_json_text(value)
    return value if isinstance(value, dict) else {name: value}


def _legacy_messages(value: Any, role: str) -> list[Any]:
    """`gen_ai.prompt` / `gen_ai.completion` (deprecated): OpenAI-style messages as JSON, or plain text."""
    parsed = _parse_json_text(value) if isinstance(value, str) else value
    if isinstance(parsed, list) and all(isinstance(m, dict) for m in parsed):
        return [_openai_message(m) for m in parsed]
    if isinstance(parsed, dict):
        return [_openai_message(parsed)]
    return [{"role": role, "parts": [{"type": "text", "content": _scalar_text(value)}]}]


def _openai_message(message: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI-style message ({role, content, tool_calls[{id, function{name, arguments}}]}, as the deprecated
    conventions and OpenLLMetry's indexed attributes write it) in the GenAI parts form."""
    if "parts" in message and isinstance(message["parts"], list):
        return message
    parts: list[dict[str, Any]] = []
    content = message.get("content")
    if isinstance(content, str) and content:
        parts.append({"type": "text", "content": content})
    elif isinstance(content, list):
        for item in content:
            if isinstance(item, dict) and isinstance(item.get("text"), str):
                parts.append({"type": "text", "content": item["text"]})
            elif isinstance(item, str):
                parts.append({"type": "text", "content": item})
    calls = message.get("tool_calls")
    if isinstance(calls, str):
        calls = _parse_json_text(calls)
    for call in calls if isinstance(calls, list) else []:
        if not isinstance(call, dict):
            continue
        function: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else call
        arguments = function.get("arguments")
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": function.get("name"),
                "arguments": _parse_json_text(arguments) if isinstance(arguments, str) else arguments,
            }
        )
    if message.get("tool_call_id") is not None or (message.get("id") is not None and message.get("role") == "tool"):
        return {
            "role": message.get("role") or "tool",
            "parts": [
                {
                    "type": "tool_call_response",
                    "id": message.get("tool_call_id") or message.get("id"),
                    "response": content,
                }
            ],
        }
    out: dict[str, Any] = {"role": message.get("role") or "assistant", "parts": parts}
    if message.get("finish_reason") is not None:
        out["finish_reason"] = message["finish_reason"]
    return out


def _oi_message(item: dict[str, Any]) -> dict[str, Any]:
    """An OpenInference message ({message: {role, content, tool_calls: [{tool_call: {id, function: {name,
    arguments}}}]}}, unflattened from llm.*_messages.<n>.message.*) in the GenAI parts form."""
    message: dict[str, Any] = item["message"] if isinstance(item.get("message"), dict) else {}
    calls = []
    for call in _seq(message.get("tool_calls")):
        inner = call.get("tool_call") if isinstance(call, dict) else None
        if isinstance(inner, dict):
            function: dict[str, Any] = inner["function"] if isinstance(inner.get("function"), dict) else {}
            calls.append({"id": inner.get("id"), "function": function})
    body = {"role": message.get("role"), "content": message.get("content"), "tool_calls": calls}
    if message.get("tool_call_id") is not None:
        body["tool_call_id"] = message["tool_call_id"]
    return _openai_message(body)


def _has_prefix(attrs: dict[str, Any], prefix: str) -> bool:
    for key in attrs:  # noqa: SIM110 - a loop, not any() over a generator: called for every span, several times
        if key.startswith(prefix):
            return True
    return False


def _unflatten(attrs: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """`<prefix><n>.a.b` attributes as a list (by n) of nested dicts; numbered levels inside become lists too."""
    root: dict[str, Any] = {}
    for key, value in attrs.items():
        if not key.startswith(prefix):
            continue
        node = root
        parts = key[len(prefix) :].split(".")
        for part in parts[:-1]:
            nxt = node.get(part)
            if not isinstance(nxt, dict):
                nxt = {}
                node[part] = nxt
            node = nxt
        node[parts[-1]] = value
    return [item for item in _seq(root) if isinstance(item, dict)]


def _seq(node: Any) -> list[Any]:
    """A dict keyed by numbers as the list it stands for (recursively); a list as it is."""
    if isinstance(node, list):
        return node
    if not isinstance(node, dict):
        return []
    numbered = sorted((int(k), val) for k, val in node.items() if k.isdigit())
    out = []
    for _n, val in numbered:
        if isinstance(val, dict):
            val = {
                k: (_seq(x) if isinstance(x, dict) and x and all(s.isdigit() for s in x) else _nest(x))
                for k, x in val.items()
            }
        out.append(val)
    return out


def _nest(value: Any) -> Any:
    if isinstance(value, dict):
        if value and all(k.isdigit() for k in value):
            return _seq(value)
        return {k: _nest(x) for k, x in value.items()}
    return value


def _tool_from_span_name(name: str) -> str:
    return name.removeprefix("execute_tool ").strip() or "unknown"
