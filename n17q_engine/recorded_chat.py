"""A recorded model call as a model fixture (issue 37 point 2): one `model.proposal` of an imported run (OTLP GenAI
or OpenInference chat spans, Inspect model events) read back as the OpenAI chat-completions request an
OpenAI-client agent sends for that conversation, and the chat completion it was answered with.

`recorded_chat(body, ...)` returns `(request, completion, missing)`:
- `request`: model, messages (system/user/assistant with `tool_calls`, tool messages with `tool_call_id`), `tools`
  ([{type: function, function: {name, description, parameters}}]) when the trace recorded them or the caller
  supplies them, and the parameters the trace recorded (temperature, top_p, max_tokens, seed, stop, tool_choice, ...)
  under their OpenAI names. It is the request before the `model.chat` contract normalizes it (the caller does that,
  with the scenario's contract: `agent.model.contract_for`).
- `completion`: a `chat.completion` body (choices[0].message with content and tool_calls, finish_reason, usage when
  recorded).
- `missing`: what the trace did not record that a request or an answer needs, never invented: "messages" (content
  capture was off), "answer" (the reply was not recorded), "tools" (the conversation used tools but the trace
  holds no definitions: GenAI's openai-v2 instrumentation does not record them; give them as `tools`).
  `request`/`completion` are None when anything is missing.

Tool call arguments are written as compact JSON text (`json.dumps(..., separators=(",", ":"))`, key order kept) in
both the completion and the later requests that echo it: an agent replayed against these fixtures receives the
completion's text and sends it back, so the next request's digest is the one recorded here.

Numbers keep the JSON type the trace recorded (OTLP intValue/doubleValue, OpenInference's JSON text, Inspect's
GenerateConfig floats): DESIGN §3's digest is the canonical JSON text, in which `0` and `0.0` differ, so a recorded
`temperature: 0.0` keys a request that says `0.0`, not one that says `0` (docs/formats/recordings.md).

`RecordedChatError`: the call cannot be a model fixture (a tool choice the `model.chat` contract cannot hold)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .canonical import digest_json

# The model.proposal fields that may ride as blobs (`<name>_blob`): the caller resolves them (`blob_fields`).
BLOB_FIELDS = ("input_messages", "output_messages", "tools", "config")

# OpenTelemetry GenAI `gen_ai.request.<name>` (as the converter keeps them, prefix removed) -> the OpenAI field.
_GENAI_PARAMETERS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "max_tokens": "max_tokens",
    "max_completion_tokens": "max_completion_tokens",
    "seed": "seed",
    "stop_sequences": "stop",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "choice.count": "n",
}
# The OpenAI chat-completions request's own parameters: an invocation parameter outside them is the instrumented
# framework's (LangChain's `_type`, `model_name`) and never reached the provider, so it is not part of the request;
# a parameter recorded as null was not sent (the OpenAI clients omit what is not given).
_OPENAI_PARAMETERS = frozenset(
    {
        "temperature", "top_p", "max_tokens", "max_completion_tokens", "seed", "stop", "n", "presence_penalty",
        "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "response_format", "parallel_tool_calls",
        "tool_choice", "user", "metadata", "store", "service_tier", "reasoning_effort", "modalities", "audio",
        "prediction", "web_search_options", "verbosity", "prompt_cache_key", "safety_identifier",
    }
)  # fmt: skip
# Inspect GenerateConfig -> the OpenAI field (Inspect's own settings, timeouts, retries, connections, are not sent).
_INSPECT_CONFIG = {
    "temperature": "temperature",
    "top_p": "top_p",
    "max_tokens": "max_tokens",
    "seed": "seed",
    "stop_seqs": "stop",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "parallel_tool_calls": "parallel_tool_calls",
    "logprobs": "logprobs",
    "top_logprobs": "top_logprobs",
    "num_choices": "n",
    "reasoning_effort": "reasoning_effort",
}
_INSPECT_STOP = {"max_tokens": "length", "model_length": "length", "tool_calls": "tool_calls", "stop": "stop"}
_GENAI_FINISH = {"tool_call": "tool_calls", "tool_calls": "tool_calls"}


class RecordedChatError(ValueError):
    """A recorded model call that cannot become a model fixture: one line saying why."""


def blob_fields(body: Mapping[str, Any]) -> dict[str, str]:
    """The fields of a model.proposal `body` held as JSON blobs: {field: blob digest}, for the caller to read."""
    return {name: body[f"{name}_blob"] for name in BLOB_FIELDS if isinstance(body.get(f"{name}_blob"), str)}


def arguments_text(arguments: Any) -> str:
    """A tool call's arguments as the JSON text a fixture's completion holds and the next request echoes."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps({} if arguments is None else arguments, ensure_ascii=False, separators=(",", ":"))


def recorded_chat(
    body: Mapping[str, Any],
    *,
    resolved: Mapping[str, Any] | None = None,
    tools: list[Any] | None = None,
    usage: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any] | None, dict[str, Any] | None, list[str]]:
    """`(request, completion, missing)` for one recorded model.proposal `body` (module docstring). `resolved`: the
    values of its blob-held fields (`blob_fields`), read by the caller; `tools`: tool definitions (OpenAI form, or
    {name, description, parameters}) for a call whose trace recorded none (used only then); `usage`: the call's
    token counts where the run keeps them beside it (an OTLP span's `budget.charged`: input_tokens,
    output_tokens, amount), else the body's own (Inspect's)."""
    fields = {name: body.get(name) for name in BLOB_FIELDS}
    fields.update({k: v for k, v in (resolved or {}).items() if k in BLOB_FIELDS})
    counts = usage if usage is not None else (body["usage"] if isinstance(body.get("usage"), dict) else None)
    if body.get("messages_form") == "inspect":
        return _inspect(body, fields, tools, _openai_usage(counts))
    return _genai(body, fields, tools, _openai_usage(counts))


def _openai_usage(counts: Mapping[str, Any] | None) -> dict[str, int] | None:
    """Token counts (input_tokens, output_tokens, total_tokens or amount) as a completion's `usage`."""
    if not counts:
        return None

    def count(*names: str) -> int | None:
        for name in names:
            value = counts.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
        return None

    prompt, answer = count("input_tokens", "prompt_tokens"), count("output_tokens", "completion_tokens")
    if prompt is None and answer is None:
        return None
    total = count("total_tokens", "amount")
    return {
        "prompt_tokens": prompt or 0,
        "completion_tokens": answer or 0,
        "total_tokens": total if total is not None else (prompt or 0) + (answer or 0),
    }


# --- OTLP: messages in the GenAI parts form ------------------------------------------------------------------------


def _genai(
    body: Mapping[str, Any], fields: dict[str, Any], supplied: list[Any] | None, usage: dict[str, int] | None
) -> tuple[dict[str, Any] | None, dict[str, Any] | None, list[str]]:
    missing: list[str] = []
    inputs = fields.get("input_messages")
    outputs = fields.get("output_messages")
    recorded_tools: list[Any] | None = None
    messages: list[dict[str, Any]] = []
    if isinstance(inputs, list):
        for item in inputs:
            if not isinstance(item, dict):
                continue
            if item.get("role") == "tool_definitions":
                recorded_tools = [t for t in item.get("parts") or [] if isinstance(t, dict)]
                continue
            messages.extend(_from_parts(item))
    if not messages:
        missing.append("messages")
    answer = next((m for m in outputs or [] if isinstance(m, dict)), None) if isinstance(outputs, list) else None
    if answer is None:
        missing.append("answer")
    used_tools = any(m.get("role") == "tool" or m.get("tool_calls") for m in messages) or bool(
        answer is not None
        and any(isinstance(p, dict) and p.get("type") == "tool_call" for p in answer.get("parts") or [])
    )
    tools = _tools(recorded_tools if recorded_tools is not None else supplied)
    if tools is None and used_tools:
        missing.append("tools")
    if missing:
        return None, None, missing
    assert answer is not None
    request: dict[str, Any] = {"model": _model(body), "messages": messages}
    if tools:
        request["tools"] = tools
    parameters: dict[str, Any] = body["parameters"] if isinstance(body.get("parameters"), dict) else {}
    for key, value in parameters.items():
        if key in _GENAI_PARAMETERS:
            request[_GENAI_PARAMETERS[key]] = value
        elif key in _OPENAI_PARAMETERS and value is not None:
            request[key] = value  # OpenInference invocation parameters are the client's own names
    if isinstance(parameters.get("model"), str) and parameters["model"]:
        request["model"] = parameters["model"]  # the name the client asked for, not the snapshot that answered
    if isinstance(parameters.get("tools"), list) and "tools" not in request:
        request["tools"] = _tools(parameters["tools"]) or []
    if "tool_choice" in request:
        _check_tool_choice(request)
    reply = _from_parts(answer)[0] if _from_parts(answer) else {"role": "assistant", "content": None}
    reason = answer.get("finish_reason") or (body.get("proposal") or {}).get("finish_reason")
    completion = _completion(request, body, reply, _GENAI_FINISH.get(str(reason), reason), usage)
    return request, completion, []


def _from_parts(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A GenAI parts-form message as OpenAI messages (a tool message per tool_call_response part)."""
    role = message.get("role") or "user"
    parts = [p for p in message.get("parts") or [] if isinstance(p, dict)]
    responses = [p for p in parts if p.get("type") == "tool_call_response"]
    if responses:
        return [
            {"role": "tool", "tool_call_id": p.get("id"), "content": _text_of(p.get("response"))} for p in responses
        ]
    texts = [p["content"] for p in parts if p.get("type") == "text" and isinstance(p.get("content"), str)]
    calls = [
        {
            "id": p.get("id"),
            "type": "function",
            "function": {"name": p.get("name"), "arguments": arguments_text(p.get("arguments"))},
        }
        for p in parts
        if p.get("type") == "tool_call"
    ]
    out: dict[str, Any] = {"role": role, "content": _content(texts)}
    if role == "assistant":
        if calls:
            out["tool_calls"] = calls
    elif out["content"] is None:
        out["content"] = ""
    return [out]


def _content(texts: list[str]) -> Any:
    if not texts:
        return None
    if len(texts) == 1:
        return texts[0]
    return [{"type": "text", "text": t} for t in texts]


def _text_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _tools(items: list[Any] | None) -> list[dict[str, Any]] | None:
    """Tool definitions as OpenAI sends them: [{type: function, function: {name, description, parameters}}]."""
    if items is None:
        return None
    out = []
    for item in items:
        if not isinstance(item, dict):
            continue
        function: dict[str, Any] = item["function"] if isinstance(item.get("function"), dict) else item
        spec = {k: function[k] for k in ("name", "description", "parameters", "strict") if k in function}
        if isinstance(spec.get("name"), str):
            out.append({"type": "function", "function": spec})
    return out


def _model(body: Mapping[str, Any]) -> str:
    model = body.get("model")
    return model if isinstance(model, str) and model else "unknown"


def _check_tool_choice(request: dict[str, Any]) -> None:
    """The `model.chat` contract holds a tool choice as an object; "auto" with tools is OpenAI's default (omitted)."""
    choice = request["tool_choice"]
    if isinstance(choice, str):
        choice = _parse(choice)
    if choice == "auto" and request.get("tools"):
        del request["tool_choice"]
    elif isinstance(choice, dict) or choice is None:
        request["tool_choice"] = choice
    else:
        raise RecordedChatError(
            f"tool_choice {choice!r}: the model.chat contract holds a tool choice as an object (a named function)"
        )


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _completion(
    request: Mapping[str, Any],
    body: Mapping[str, Any],
    message: dict[str, Any],
    finish: Any,
    usage: Mapping[str, Any] | None,
) -> dict[str, Any]:
    reply: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if isinstance(reply["content"], list):  # an answer's text is one string
        reply["content"] = "".join(p.get("text", "") for p in reply["content"] if isinstance(p, dict))
    if message.get("tool_calls"):
        reply["tool_calls"] = message["tool_calls"]
    response = body.get("response")
    out: dict[str, Any] = {
        "id": response
        if isinstance(response, str) and response
        else "chatcmpl-" + digest_json([dict(request), reply]).removeprefix("sha256:")[:24],
        "object": "chat.completion",
        "created": 0,
        "model": _model(body),
        "choices": [
            {
                "index": 0,
                "message": reply,
                "finish_reason": finish
                if isinstance(finish, str)
                else ("tool_calls" if reply.get("tool_calls") else "stop"),
            }
        ],
    }
    if usage:
        out["usage"] = dict(usage)
    return out


# --- Inspect: ChatMessage, ToolInfo, GenerateConfig ----------------------------------------------------------------


def _inspect(
    body: Mapping[str, Any], fields: dict[str, Any], supplied: list[Any] | None, usage: dict[str, int] | None
) -> tuple[dict[str, Any] | None, dict[str, Any] | None, list[str]]:
    missing: list[str] = []
    inputs = fields.get("input_messages")
    messages = [_inspect_message(m) for m in inputs if isinstance(m, dict)] if isinstance(inputs, list) else []
    if not messages:
        missing.append("messages")
    outputs = fields.get("output_messages")
    answer = next((m for m in outputs if isinstance(m, dict)), None) if isinstance(outputs, list) else None
    if answer is None:
        missing.append("answer")
    recorded = fields.get("tools")
    tools = _tools(recorded if isinstance(recorded, list) else supplied)
    if missing:
        return None, None, missing
    assert answer is not None
    model = _model(body)
    request: dict[str, Any] = {"model": model.split("/", 1)[1] if "/" in model else model, "messages": messages}
    if tools:
        request["tools"] = tools
        choice = body.get("tool_choice")
        if isinstance(choice, dict) and isinstance(choice.get("name"), str):
            request["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
        elif choice not in (None, "auto"):
            raise RecordedChatError(
                f"tool_choice {choice!r}: the model.chat contract holds a tool choice as an object (a named function)"
            )
    config: dict[str, Any] = fields["config"] if isinstance(fields.get("config"), dict) else {}
    for key, name in _INSPECT_CONFIG.items():
        if config.get(key) is not None:
            request[name] = config[key]
    reply = _inspect_message(answer)
    reply.pop("tool_call_id", None)
    stop = answer.get("stop_reason")
    completion = _completion(request, {**body, "model": request["model"]}, reply, _INSPECT_STOP.get(str(stop)), usage)
    return request, completion, []


def _inspect_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """An Inspect ChatMessage as the OpenAI message: content as text (or text parts), tool calls with their
    arguments as JSON text, a tool message with its tool_call_id."""
    role = message.get("role") or "user"
    content = message.get("content")
    if isinstance(content, list):
        texts = [p["text"] for p in content if isinstance(p, dict) and p.get("type") == "text" and "text" in p]
        content = _content(texts)
    if role == "tool":
        text = content if isinstance(content, str) else _text_of(content)
        error = message.get("error")
        if isinstance(error, dict) and not text:
            text = str(error.get("message") or "")
        return {"role": "tool", "tool_call_id": message.get("tool_call_id"), "content": text}
    out: dict[str, Any] = {"role": role, "content": content if content != "" or role != "assistant" else None}
    if role == "assistant":
        calls = [
            {
                "id": c.get("id"),
                "type": "function",
                "function": {"name": c.get("function"), "arguments": arguments_text(c.get("arguments"))},
            }
            for c in message.get("tool_calls") or []
            if isinstance(c, dict)
        ]
        if calls:
            out["tool_calls"] = calls
    elif out["content"] is None:
        out["content"] = ""
    return out
