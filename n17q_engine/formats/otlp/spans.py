"""What each span maps to (`_SpanMapper`): a model call -> model.proposal and budget.charged, a tool call ->
tool.call and tool.result, a command-execution span -> command.receipt (and the workspace it ran in), an `n17q.*`
span event -> the event of the vocabulary it names; and what any span says of its agent and of an error it ended in.
The attribute names and the reading of each convention are `conventions`'."""

from __future__ import annotations

from typing import Any

from n17q_engine import vocabulary as v
from n17q_engine.bundle import BundleError, validate_event
from n17q_engine.canonical import canonical_json, digest_json, request_digest
from n17q_engine.identifiers import id_problem

from .. import ConversionError
from .conventions import (
    _ERROR_TYPE_OUTCOMES,
    _RESERVED_FIELDS,
    ERROR_TYPE,
    EXCEPTION_EVENT,
    GEN_AI_AGENT_DESCRIPTION,
    GEN_AI_AGENT_ID,
    GEN_AI_AGENT_NAME,
    GEN_AI_AGENT_VERSION,
    GEN_AI_CHOICE_EVENT,
    GEN_AI_COMPLETION,
    GEN_AI_CONTENT_COMPLETION_EVENT,
    GEN_AI_CONTENT_PROMPT_EVENT,
    GEN_AI_FINISH_REASONS,
    GEN_AI_INPUT_EVENTS,
    GEN_AI_INPUT_MESSAGES,
    GEN_AI_OPERATION,
    GEN_AI_OUTPUT_MESSAGES,
    GEN_AI_PROMPT,
    GEN_AI_PROVIDER,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_RESPONSE_ID,
    GEN_AI_RESPONSE_MODEL,
    GEN_AI_SYSTEM,
    GEN_AI_SYSTEM_INSTRUCTIONS,
    GEN_AI_TOOL_ARGUMENTS,
    GEN_AI_TOOL_CALL_ID,
    GEN_AI_TOOL_DEFINITIONS,
    GEN_AI_TOOL_DESCRIPTION,
    GEN_AI_TOOL_NAME,
    GEN_AI_TOOL_RESULT,
    GEN_AI_TOOL_TYPE,
    N17Q_ATTEMPT,
    N17Q_COMMAND,
    N17Q_CONTRACT_REVISION,
    N17Q_EVENT,
    N17Q_ID,
    N17Q_KIND,
    N17Q_TOOL_OUTCOME,
    N17Q_WORKSPACE,
    OI_AGENT_NAME,
    OI_INPUT_MESSAGES,
    OI_INPUT_MIME_TYPE,
    OI_INPUT_VALUE,
    OI_INVOCATION_PARAMETERS,
    OI_MIME_JSON,
    OI_MODEL_NAME,
    OI_OUTPUT_MESSAGES,
    OI_OUTPUT_MIME_TYPE,
    OI_OUTPUT_VALUE,
    OI_PROVIDER,
    OI_SPAN_KIND,
    OI_SYSTEM,
    OI_TOKEN_DETAILS_PREFIX,
    OI_TOOL_CALL_ID,
    OI_TOOL_DESCRIPTION,
    OI_TOOL_ID,
    OI_TOOL_NAME,
    OI_TOOL_PARAMETERS,
    OI_TOOLS,
    PROCESS_COMMAND,
    PROCESS_COMMAND_ARGS,
    PROCESS_COMMAND_LINE,
    PROCESS_EXECUTABLE_NAME,
    PROCESS_EXIT_CODE,
    _as_list,
    _as_object,
    _field_value,
    _has_prefix,
    _is_command,
    _legacy_messages,
    _oi_message,
    _openai_message,
    _parse_json_text,
    _post_tree,
    _role,
    _tool_from_span_name,
    _unflatten,
    _usage,
)
from .events import INLINE_PAYLOAD_BYTES, MAX_TEXT_CHARS, _EventWriter, _Span
from .text import _iso, _one_line, _scalar_text, _storable, _str_or_none


def _tool_message(value: Any) -> dict[str, Any] | None:
    """The fields of a LangChain ToolMessage recorded as a tool span's output (`{type: tool, data: {content,
    tool_call_id, ...}}`, or LangChain's serialized `{lc: 1, type: constructor, id: [..., ToolMessage], kwargs}`),
    else None."""
    if not (isinstance(value, str) and value.lstrip()[:1] == "{" and '"tool_call_id"' in value):
        return None
    parsed = _parse_json_text(value)
    if not isinstance(parsed, dict):
        return None
    if parsed.get("type") == "tool":
        data = parsed.get("data")
    elif parsed.get("lc") == 1 and isinstance(parsed.get("id"), list) and parsed["id"][-1:] == ["ToolMessage"]:
        data = parsed.get("kwargs")
    else:
        return None
    if isinstance(data, dict) and "content" in data and "tool_call_id" in data:
        return data
    return None


# Python's traceback header: a status description holding one is a traceback, not a message.
_TRACEBACK = "Traceback (most recent call last)"


def _ends_kept(text: str) -> str:
    """An error message on one line within MAX_TEXT_CHARS: a longer one keeps its start and its end (where a
    traceback or a chained error says what failed), the middle replaced by an ellipsis."""
    line = _one_line(text, len(text) + 1)
    if len(line) <= MAX_TEXT_CHARS:
        return line
    tail = MAX_TEXT_CHARS // 3
    return line[: MAX_TEXT_CHARS - tail - 3] + " \u2026 " + line[-tail:]


class _SpanMapper(_EventWriter):
    """The trace converter's mapping of one span (`_map_span`) and of its span events."""

    # ---- what any span says

    def _agent_fields(self, span: _Span) -> dict[str, Any]:
        agent = {
            name: _scalar_text(value)
            for name, key in (
                ("name", GEN_AI_AGENT_NAME),
                ("id", GEN_AI_AGENT_ID),
                ("version", GEN_AI_AGENT_VERSION),
                ("description", GEN_AI_AGENT_DESCRIPTION),
            )
            if (value := span.take(key)) is not None
        }
        if "name" not in agent and (oi_name := span.take(OI_AGENT_NAME)) is not None:
            agent["name"] = _scalar_text(oi_name)
        provider = span.take(GEN_AI_PROVIDER) or span.take(GEN_AI_SYSTEM)
        if provider is not None:
            agent["provider"] = _scalar_text(provider)
        return agent

    def _error(self, span: _Span) -> dict[str, Any] | None:
        """{type, message} when the span ended in an error (status ERROR, or an `error.type`), else None."""
        status = span.raw["status"]
        error_type = span.take(ERROR_TYPE)
        if status["code"] != "error" and error_type is None:
            return None
        out: dict[str, Any] = {"type": _scalar_text(error_type) if error_type is not None else None}
        description = status["message"] or None
        message = description
        for event in span.raw["events"]:
            if event["name"] == EXCEPTION_EVENT:
                attrs = event["attributes"]
                out["type"] = out["type"] or _str_or_none(attrs.get("exception.type"))
                exception_message = _str_or_none(attrs.get("exception.message"))
                if message is None:
                    message = exception_message
                elif exception_message and _TRACEBACK in message:
                    # A status description holding a traceback (OpenInference-for-LangChain writes the exception's
                    # repr and its traceback there): the exception's own message is the error's message.
                    message = exception_message
                break
        out["message"] = _ends_kept(message) if message else None
        if description is not None and out["message"] != _one_line(description, len(description) + 1):
            # What the message does not show of the status description (a traceback, a cut) is kept whole.
            out["description_blob"] = self.converted.add_blob(
                _storable(description).encode("utf-8"), "text/plain; charset=utf-8", "error-description"
            )
        return out

    # ---- spans

    def _map_span(self, span: _Span) -> None:
        attrs = span.attrs
        span.take(GEN_AI_OPERATION)
        span.take(OI_SPAN_KIND)
        role = _role(attrs)
        span.role = role
        if role == "agent" and span is not self.root:
            self.report.mapped["agent span below the root (its spans map into the root's attempt)"] += 1
            self._agent_fields(span)
        if role == "model":
            self._model_span(span)
        elif role == "tool":
            self._tool_span(span)
        elif role == "embedding":
            self._usage_event(span, "embeddings")
        if _is_command(attrs):
            self._command_span(span)
        if role in ("agent", "other"):
            if span.index not in self.charged_below:
                # Usage on a span with no model span below it (an agent framework that reports only totals).
                self._usage_event(span, role)
            elif _usage(attrs) is not None:
                note = (
                    "token usage on agent spans whose model spans also report usage is not charged again "
                    "(it is their sum): counted unmapped, kept in the span"
                )
                if note not in self.report.notes:
                    self.report.notes.append(note)
        for k, event in enumerate(span.raw["events"]):
            self._span_event(span, k, event)

    # model calls

    def _model_span(self, span: _Span) -> None:
        inputs = self._input_messages(span)
        outputs = self._output_messages(span)
        finish = span.take(GEN_AI_FINISH_REASONS)
        calls: list[dict[str, Any]] = []
        texts: list[str] = []
        finish_reason = None
        for message in outputs or []:
            if not isinstance(message, dict):
                continue
            finish_reason = finish_reason or message.get("finish_reason")
            for part in message.get("parts") or []:
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "tool_call":
                    calls.append({"call": part.get("id"), "tool": part.get("name"), "arguments": part.get("arguments")})
                elif part.get("type") == "text" and isinstance(part.get("content"), str):
                    texts.append(part["content"])
        if finish_reason is None and isinstance(finish, list) and finish:
            finish_reason = finish[0]
        text = "\n".join(texts)
        proposal: dict[str, Any]
        if calls:
            proposal = {"type": "tool_call", "tool": calls[0]["tool"], "calls": calls}
            if text:
                proposal["text"] = text
        elif text:
            proposal = {"type": "message", "text": text}
        elif outputs:
            proposal = {"type": "stop"}
        else:
            # GenAI content capture is opt-in: without it the span says a model answered, not what it said.
            proposal = {"type": "message", "text": None, "unrecorded": True}
        if finish_reason is not None:
            proposal["finish_reason"] = finish_reason
        if len(canonical_json(proposal)) > INLINE_PAYLOAD_BYTES:
            proposal = self._cut_proposal(proposal)
        error = self._error(span)
        fields: dict[str, Any] = {
            "context_digest": digest_json(inputs) if inputs is not None else digest_json({"unrecorded": span.hex}),
            "proposal": proposal,
            "accepted": error is None,
            "model": _str_or_none(span.take(GEN_AI_RESPONSE_MODEL))
            or _str_or_none(span.take(GEN_AI_REQUEST_MODEL))
            or _str_or_none(span.take(OI_MODEL_NAME)),
        }
        span.take(GEN_AI_REQUEST_MODEL)
        provider = (
            span.take(GEN_AI_PROVIDER) or span.take(GEN_AI_SYSTEM) or span.take(OI_PROVIDER) or span.take(OI_SYSTEM)
        )
        if provider is not None:
            fields["provider"] = _scalar_text(provider)
        response = span.take(GEN_AI_RESPONSE_ID)
        if response is not None:
            fields["response"] = _scalar_text(response)
        parameters = {
            key.removeprefix("gen_ai.request."): value
            for key, value in span.attrs.items()
            if key.startswith("gen_ai.request.") and key != GEN_AI_REQUEST_MODEL
        }
        if parameters:
            span.used_prefixes.append("gen_ai.request.")
            fields["parameters"] = parameters
        invocation = span.take(OI_INVOCATION_PARAMETERS)
        if invocation is not None:
            fields["parameters"] = {**parameters, **_as_object(invocation, "invocation_parameters")}
        if inputs is not None:
            self._inline_or_blob(fields, "input_messages", inputs, "model-input")
        if outputs is not None:
            self._inline_or_blob(fields, "output_messages", outputs, "model-output")
        if error is not None:
            fields["error"] = error
        # (call id, tool, arguments) of each proposed call: `_finish` links the tool calls to them and takes a call's
        # arguments as the request of a tool span whose recorded input is not an arguments object.
        fields["_proposed"] = [
            (
                c.get("call") if isinstance(c.get("call"), str) else None,
                c.get("tool") if isinstance(c.get("tool"), str) else None,
                _parse_json_text(c["arguments"]) if isinstance(c.get("arguments"), str) else c.get("arguments"),
            )
            for c in calls
        ]
        self._emit(
            span, "model.proposal", fields, at_end=True, suffix="proposal", mapped=self._label(span, "model.proposal")
        )
        self._usage_event(span, "model")

    def _label(self, span: _Span, kind: str) -> str:
        attrs = span.attrs
        op = attrs.get(GEN_AI_OPERATION)
        if isinstance(op, str) and op:
            return f"{op} span -> {kind}"
        oi = attrs.get(OI_SPAN_KIND)
        if isinstance(oi, str) and oi:
            return f"OpenInference {oi.upper()} span -> {kind}"
        return f"{span.role} span -> {kind}"

    def _cut_proposal(self, proposal: dict[str, Any]) -> dict[str, Any]:
        """A proposal too large to show inline: its text cut, the whole kept as a blob it names."""
        digest = self.converted.add_json_blob(proposal, "model-output")
        out = dict(proposal)
        if isinstance(out.get("text"), str) and len(out["text"]) > MAX_TEXT_CHARS:
            out["text"] = out["text"][: MAX_TEXT_CHARS - 1] + "\u2026"
        if "calls" in out:
            out["calls"] = [
                {**call, "arguments": call["arguments"]}
                if len(canonical_json(call.get("arguments"))) <= INLINE_PAYLOAD_BYTES
                else {
                    **call,
                    "arguments": None,
                    "arguments_blob": self.converted.add_json_blob(call["arguments"], "tool-arguments"),
                }
                for call in out["calls"]
            ]
        out["blob"] = digest
        return out

    def _input_messages(self, span: _Span) -> list[Any] | None:
        attrs = span.attrs
        messages: list[Any] | None = None
        value = span.take(GEN_AI_INPUT_MESSAGES)
        if value is not None:
            messages = _as_list(value)
        elif (value := span.take(GEN_AI_PROMPT)) is not None:
            messages = _legacy_messages(value, "user")
        elif _has_prefix(attrs, GEN_AI_PROMPT + "."):
            span.used_prefixes.append(GEN_AI_PROMPT + ".")
            messages = [_openai_message(m) for m in _unflatten(attrs, GEN_AI_PROMPT + ".")]
        elif _has_prefix(attrs, OI_INPUT_MESSAGES + "."):
            span.used_prefixes.append(OI_INPUT_MESSAGES + ".")
            messages = [_oi_message(m) for m in _unflatten(attrs, OI_INPUT_MESSAGES + ".")]
        else:
            for event in span.raw["events"]:
                role = GEN_AI_INPUT_EVENTS.get(event["name"])
                if role is not None:
                    messages = messages or []
                    messages.append(_openai_message({"role": role, **event["attributes"]}))
                elif event["name"] == GEN_AI_CONTENT_PROMPT_EVENT:
                    value = event["attributes"].get(GEN_AI_PROMPT)
                    if value is not None:
                        messages = (messages or []) + _legacy_messages(value, "user")
        instructions = span.take(GEN_AI_SYSTEM_INSTRUCTIONS)
        if instructions is not None:
            messages = [{"role": "system", "parts": _as_list(instructions)}] + (messages or [])
        definitions = span.take(GEN_AI_TOOL_DEFINITIONS)
        if definitions is None and _has_prefix(attrs, OI_TOOLS + "."):
            # OpenInference: llm.tools.<n>.tool.json_schema, each the tool as the request offered it (JSON text).
            span.used_prefixes.append(OI_TOOLS + ".")
            definitions = [
                _parse_json_text(schema) if isinstance(schema, str) else schema
                for item in _unflatten(attrs, OI_TOOLS + ".")
                if (schema := (item.get("tool") or {}).get("json_schema")) is not None
            ]
        if definitions is not None and messages is not None:
            # The tools offered are part of what the model saw: the context digest covers them.
            messages = [*messages, {"role": "tool_definitions", "parts": _as_list(definitions)}]
        if messages is None and (value := span.take(OI_INPUT_VALUE)) is not None:
            span.take(OI_INPUT_MIME_TYPE)
            messages = [{"role": "user", "parts": [{"type": "text", "content": _scalar_text(value)}]}]
        return messages

    def _output_messages(self, span: _Span) -> list[Any] | None:
        attrs = span.attrs
        value = span.take(GEN_AI_OUTPUT_MESSAGES)
        if value is not None:
            return _as_list(value)
        if (value := span.take(GEN_AI_COMPLETION)) is not None:
            return _legacy_messages(value, "assistant")
        if _has_prefix(attrs, GEN_AI_COMPLETION + "."):
            span.used_prefixes.append(GEN_AI_COMPLETION + ".")
            return [_openai_message(m) for m in _unflatten(attrs, GEN_AI_COMPLETION + ".")]
        if _has_prefix(attrs, OI_OUTPUT_MESSAGES + "."):
            span.used_prefixes.append(OI_OUTPUT_MESSAGES + ".")
            return [_oi_message(m) for m in _unflatten(attrs, OI_OUTPUT_MESSAGES + ".")]
        messages: list[Any] | None = None
        for event in span.raw["events"]:
            if event["name"] == GEN_AI_CHOICE_EVENT:
                attrs_e = event["attributes"]
                message = attrs_e.get("message")
                message = _parse_json_text(message) if isinstance(message, str) else message
                body = dict(message) if isinstance(message, dict) else {}
                for key in ("content", "tool_calls", "role"):
                    if key in attrs_e:
                        body.setdefault(key, attrs_e[key])
                body.setdefault("role", "assistant")
                converted = _openai_message(body)
                if attrs_e.get("finish_reason") is not None:
                    converted["finish_reason"] = attrs_e["finish_reason"]
                messages = (messages or []) + [converted]
            elif event["name"] == GEN_AI_CONTENT_COMPLETION_EVENT:
                value = event["attributes"].get(GEN_AI_COMPLETION)
                if value is not None:
                    messages = (messages or []) + _legacy_messages(value, "assistant")
        if messages is None and (value := span.take(OI_OUTPUT_VALUE)) is not None:
            span.take(OI_OUTPUT_MIME_TYPE)
            messages = [{"role": "assistant", "parts": [{"type": "text", "content": _scalar_text(value)}]}]
        return messages

    def _usage_event(self, span: _Span, what: str) -> None:
        usage = _usage(span.attrs)
        if usage is None:
            return
        if span.index in self.charged_below:
            return
        for key in usage.pop("_keys"):
            span.used.add(key)
        span.used_prefixes.append(OI_TOKEN_DETAILS_PREFIX)
        fields = {"resource": "tokens", **usage}
        model = (
            span.attrs.get(GEN_AI_RESPONSE_MODEL)
            or span.attrs.get(GEN_AI_REQUEST_MODEL)
            or span.attrs.get(OI_MODEL_NAME)
        )
        if isinstance(model, str):
            fields["model"] = model
        self._emit(
            span,
            "budget.charged",
            fields,
            at_end=True,
            sub=1,
            suffix="tokens",
            mapped=self._label(span, "budget.charged"),
        )

    # tools

    def _tool_span(self, span: _Span) -> None:
        attrs = span.attrs
        name = span.take(GEN_AI_TOOL_NAME) or span.take(OI_TOOL_NAME) or _tool_from_span_name(span.name)
        call_id = span.take(GEN_AI_TOOL_CALL_ID) or span.take(OI_TOOL_CALL_ID) or span.take(OI_TOOL_ID)
        tool_message = None if attrs.get(GEN_AI_TOOL_RESULT) is not None else _tool_message(attrs.get(OI_OUTPUT_VALUE))
        if call_id is None and tool_message is not None:
            # OpenInference-for-LangChain puts no call id on a tool span; the ToolMessage it records as the output
            # names the call it answers.
            call_id = _str_or_none(tool_message.get("tool_call_id"))
        arguments = span.take(GEN_AI_TOOL_ARGUMENTS)
        recorded = arguments
        schema = None
        if arguments is None and attrs.get(OI_INPUT_VALUE) is not None:
            arguments = recorded = span.take(OI_INPUT_VALUE)
            if span.take(OI_INPUT_MIME_TYPE) == OI_MIME_JSON or isinstance(arguments, str):
                arguments = _parse_json_text(arguments) if isinstance(arguments, str) else arguments
        if attrs.get(OI_TOOL_PARAMETERS) is not None:
            schema = span.take(OI_TOOL_PARAMETERS)
            schema = _parse_json_text(schema) if isinstance(schema, str) else schema
            if arguments is None:
                # Some instrumentations put the call's arguments here rather than the tool's parameter schema.
                arguments = schema
                recorded = attrs[OI_TOOL_PARAMETERS]
                schema = None
        if isinstance(arguments, str):
            arguments = _parse_json_text(arguments)
        request = arguments if isinstance(arguments, dict) else ({} if arguments is None else {"arguments": arguments})
        contract = span.take(N17Q_CONTRACT_REVISION)
        fields: dict[str, Any] = {
            "tool": _one_line(name, 200) if isinstance(name, str) and name else "unknown",
            # No tool contract is known from a trace unless the harness names one: 0 = none recorded.
            "contract_revision": contract if isinstance(contract, int) and not isinstance(contract, bool) else 0,
            "request": request,
            "request_digest": request_digest(request),
            "proposal_id": None,
            "workspace_id": self._workspace(span, create=False),
        }
        if call_id is not None:
            fields["tool_call"] = _scalar_text(call_id)
        for extra, key in (
            ("tool_type", GEN_AI_TOOL_TYPE),
            ("description", GEN_AI_TOOL_DESCRIPTION),
            ("description", OI_TOOL_DESCRIPTION),
        ):
            value = span.take(key)
            if value is not None:
                fields.setdefault(extra, _one_line(value, MAX_TEXT_CHARS))
        if schema is not None:
            self._inline_or_blob(fields, "tool_parameters", schema, "tool-parameters")
        fields["_call"] = (fields.get("tool_call"), fields["tool"])
        # The spans above the tool span, so its call and result can be chosen by any span's subtree (staging).
        span.ref = {**span.ref, "ancestors": span.ancestors()}
        if arguments is not None and not isinstance(arguments, dict):
            # A bare value (OpenInference-for-LangChain records a one-argument tool's input as that argument's
            # value, `Oslo`): `_finish` takes the linked proposal's arguments for this call as the request, the
            # recorded input kept beside it (docs/formats/otlp.md, "Tool input that is not an arguments object").
            fields["_reconcile"] = recorded
        call_event = self._emit(span, "tool.call", fields, suffix="call", mapped=self._label(span, "tool.call"))
        self._tool_result(span, call_event, tool_message)

    def _tool_result(self, span: _Span, call_event: str, tool_message: dict[str, Any] | None) -> None:
        error = self._error(span)
        outcome = self._outcome(span, error)
        result = span.take(GEN_AI_TOOL_RESULT)
        media = None
        if result is None and span.attrs.get(OI_OUTPUT_VALUE) is not None:
            result = span.take(OI_OUTPUT_VALUE)
            media = span.take(OI_OUTPUT_MIME_TYPE)
        fields: dict[str, Any] = {"call_id": call_event, "origin": "historical", "outcome": outcome, "absent": {}}
        if tool_message is not None:
            # The tool's output is the message's content (what the model was given), not LangChain's envelope
            # around it; the whole message stays in the span.
            content = tool_message.get("content")
            fields["result_from"] = "content of the LangChain ToolMessage recorded as output.value"
            self.report.mapped["LangChain ToolMessage output -> tool.result blob: its content"] += 1
            if isinstance(content, str) and content.lstrip()[:1] in ("{", "["):
                content = _parse_json_text(content)
            if isinstance(content, str):
                fields["blob"] = self.converted.add_blob(
                    _storable(content).encode("utf-8"), "text/plain; charset=utf-8", "tool-output"
                )
            else:
                fields["blob"] = self.converted.add_json_blob(content, "tool-output")
        elif result is None:
            fields["blob"] = None
            if outcome == "ok":
                # Tool results are opt-in content in GenAI: not recorded is not "empty".
                fields["absent"] = {"result": "unavailable"}
        elif isinstance(result, str) and media != OI_MIME_JSON:
            fields["blob"] = self.converted.add_blob(result.encode("utf-8"), "text/plain; charset=utf-8", "tool-output")
        else:
            value = _parse_json_text(result) if isinstance(result, str) else result
            fields["blob"] = self.converted.add_json_blob(value, "tool-output")
        if error is not None:
            fields["error"] = error
        self._emit(span, "tool.result", fields, at_end=True, suffix="result", mapped=self._label(span, "tool.result"))

    def _outcome(self, span: _Span, error: dict[str, Any] | None) -> str:
        declared = span.take(N17Q_TOOL_OUTCOME)
        if declared is not None:
            if declared not in v.RESULT_OUTCOMES:
                raise ConversionError(
                    f"{span.where()}: attribute {N17Q_TOOL_OUTCOME} {str(declared)[:40]!r} is not one of "
                    + " | ".join(v.RESULT_OUTCOMES)
                )
            return str(declared)
        if error is None:
            return "ok"
        kind = str(error.get("type") or "").lower()
        for needle, outcome in _ERROR_TYPE_OUTCOMES:
            if needle in kind:
                return outcome
        return "error"

    # commands

    def _command_span(self, span: _Span) -> None:
        attrs = span.attrs
        span.used_prefixes.append(N17Q_COMMAND)
        line = attrs.get(N17Q_COMMAND + "line")
        if line is None:
            line = span.take(PROCESS_COMMAND_LINE)
        if line is None:
            args = span.take(PROCESS_COMMAND_ARGS)
            command = span.take(PROCESS_COMMAND) or span.take(PROCESS_EXECUTABLE_NAME)
            if isinstance(args, list) and args:
                line = " ".join(str(a) for a in args)
            elif command is not None:
                line = str(command)
        else:
            span.take(PROCESS_COMMAND_LINE)
        span.take(PROCESS_COMMAND_ARGS)
        span.take(PROCESS_COMMAND)
        executable = span.take(PROCESS_EXECUTABLE_NAME)
        exit_code = attrs.get(N17Q_COMMAND + "exit_code")
        if exit_code is None:
            exit_code = span.take(PROCESS_EXIT_CODE)
        span.take(PROCESS_EXIT_CODE)
        if not (isinstance(exit_code, int) and not isinstance(exit_code, bool)):
            exit_code = None
        if span.role == "tool":
            call_event: str | None = f"{span.hex}.call"
        else:
            call_event = self._enclosing_call(span)
            if call_event is None:
                tool = attrs.get(N17Q_COMMAND + "tool") or executable or "command"
                request = {"command": str(line or "")}
                call_event = self._emit(
                    span,
                    "tool.call",
                    {
                        "tool": _one_line(tool, 200),
                        "contract_revision": 0,
                        "request": request,
                        "request_digest": request_digest(request),
                        "proposal_id": None,
                        "workspace_id": self._workspace(span, create=True),
                        "_call": (None, _one_line(tool, 200)),
                    },
                    suffix="call",
                    mapped="command span -> tool.call",
                )
        error = self._error(span)
        completion = attrs.get(N17Q_COMMAND + "completion")
        if completion is None:
            completion = (
                "completed" if exit_code is not None else ("termination_unknown" if error is not None else "started")
            )
        elif completion not in v.RECEIPT_COMPLETIONS:
            raise ConversionError(
                f"{span.where()}: attribute {N17Q_COMMAND}completion {str(completion)[:40]!r} is not one of "
                + " | ".join(v.RECEIPT_COMPLETIONS)
            )
        suites = _as_list(attrs.get(N17Q_COMMAND + "suites") or [])
        results = attrs.get(N17Q_COMMAND + "results")
        output = attrs.get(N17Q_COMMAND + "output")
        fields: dict[str, Any] = {
            "call_id": call_event,
            "workspace_id": self._workspace(span, create=True),
            "command": _storable(str(line or "")),
            "suites": [str(s) for s in suites],
            # A span records no file trees unless the harness says: unknown stays unknown (docs/formats/otlp.md).
            "pre_tree": str(attrs.get(N17Q_COMMAND + "pre_tree") or "unknown"),
            # Past an unfinished command there is no tree to name: null (DESIGN §10), never an invented one.
            "post_tree": _post_tree(attrs.get(N17Q_COMMAND + "post_tree"), completion),
            "environment_revision": str(
                attrs.get(N17Q_COMMAND + "environment_revision") or self._environment_revision(span)
            ),
            "completion": completion,
            "exit_code": exit_code,
            "results": _as_object(results, "results") if results is not None else {},
            "output_blob": self.converted.add_blob(
                str(output).encode("utf-8"), "text/plain; charset=utf-8", "command-output"
            )
            if output is not None
            else None,
        }
        if error is not None:
            fields["error"] = error
        self._emit(
            span,
            "command.receipt",
            fields,
            at_end=True,
            sub=-1,
            suffix="receipt",
            mapped="command span -> command.receipt",
        )

    def _enclosing_call(self, span: _Span) -> str | None:
        node = span.parent
        while node is not None:
            if node.role == "tool" or (not node.role and _role(node.attrs) == "tool"):
                return f"{node.hex}.call"
            node = node.parent
        return None

    def _workspace(self, span: _Span, *, create: bool) -> str | None:
        node: _Span | None = span
        while node is not None:
            value = node.attrs.get(N17Q_WORKSPACE)
            if isinstance(value, str) and value:
                span.used.add(N17Q_WORKSPACE)
                return value
            node = node.parent
        if not create:
            return None
        if self.workspace_default is None:
            resource = self.root.raw["resource"]
            host = resource.get("host.name") or resource.get("service.name") or "host"
            self.workspace_default = _one_line(f"otlp-host:{host}", 200)
            self._emit(
                self.root,
                "workspace.created",
                {
                    "workspace_id": self.workspace_default,
                    # Digests of what the trace declares (the resource), not of file trees: none is recorded.
                    "base_digest": digest_json({"resource": resource}),
                    "overlay_digest": digest_json(None),
                    "environment_revision": self._environment_revision(self.root),
                    "derived_from": None,
                },
                sub=-1,
                suffix="workspace",
                mapped="first command span -> workspace.created",
                event_id="otlp-host-workspace",
            )
        return self.workspace_default

    def _environment_revision(self, span: _Span) -> str:
        resource = span.raw["resource"]
        return "otel-resource@" + digest_json(resource)[7:19]

    # n17q events

    def _span_event(self, span: _Span, k: int, event: dict[str, Any]) -> None:
        name = event["name"]
        if name == N17Q_EVENT or (name.startswith("n17q.") and name[5:] in v.KINDS):
            self._n17q_event(span, k, event)
        elif name.startswith("n17q."):
            raise ConversionError(
                f"{span.where()}, span event {name[:80]!r}: {name[5:80]!r} is not a kind of the run vocabulary"
            )
        elif (
            name == EXCEPTION_EVENT
            and span.raw["status"]["code"] == "error"
            and (span.role in ("tool", "model") or span is self.root or _is_command(span.attrs))
        ):
            pass  # read into the error of the event the span maps to
        elif span.role == "model" and (
            name in GEN_AI_INPUT_EVENTS
            or name in (GEN_AI_CHOICE_EVENT, GEN_AI_CONTENT_PROMPT_EVENT, GEN_AI_CONTENT_COMPLETION_EVENT)
        ):
            pass  # read into the proposal's messages
        else:
            self.report.unmapped[f"span event {_one_line(name, 80) or '(unnamed)'}"] += 1

    def _n17q_event(self, span: _Span, k: int, event: dict[str, Any]) -> None:
        attrs = event["attributes"]
        name = event["name"]
        where = f"{span.where()}, span event {name!r}"
        kind = attrs.get(N17Q_KIND) if name == N17Q_EVENT else name[5:]
        if name != N17Q_EVENT and attrs.get(N17Q_KIND) not in (None, kind):
            raise ConversionError(
                f"{where}: attribute {N17Q_KIND} {str(attrs[N17Q_KIND])[:40]!r} contradicts the event name"
            )
        if not isinstance(kind, str) or kind not in v.KINDS:
            raise ConversionError(f"{where}: {N17Q_KIND} {str(kind)[:60]!r} is not a kind of the run vocabulary")
        spec = v.KINDS[kind]
        fields: dict[str, Any] = {}
        for key, value in attrs.items():
            if key in (N17Q_KIND, N17Q_ID, N17Q_ATTEMPT):
                continue
            field = key.removeprefix("n17q.")
            if field in _RESERVED_FIELDS or field.startswith("_"):
                raise ConversionError(
                    f"{where}: attribute {key!r} is written by the converter (use n17q.id / n17q.attempt)"
                )
            fields[field] = _field_value(value, spec.get(field), f"{where}: field {field}")
        for field, field_spec in spec.items():
            if field not in fields and field_spec.nullable:
                # OpenTelemetry attributes cannot be null: an absent nullable field is null.
                fields[field] = None
        if kind == "approval.recorded":
            fields.setdefault("run", self.run["id"])
            fields.setdefault("environment", self.run["environment"])
        event_id = attrs.get(N17Q_ID)
        problem = None if event_id is None else id_problem(event_id, what="an event id")
        if problem is not None:
            raise ConversionError(f"{where}: attribute {N17Q_ID} {problem}")
        if event_id is None:
            event_id = f"{span.hex}.n17q.{k}"
        attempt = attrs.get(N17Q_ATTEMPT, self.attempt)
        when = _iso(event["time_ns"] or span.raw["start_ns"])
        probe = {
            "seq": 1,
            "id": event_id,
            "kind": kind,
            "at": {"logical": when, "wall": when},
            "attempt": attempt,
            **fields,
        }
        try:
            validate_event(probe, line=1)
        except BundleError as exc:
            field_name = f"field {exc.field}: " if exc.field else ""
            raise ConversionError(f"{where}: {field_name}{exc.reason}") from None
        if event_id in self.ids:
            raise ConversionError(f"{where}: {N17Q_ID} {event_id!r} names another event of the trace")
        fields["attempt"] = attempt
        self._emit(
            span,
            kind,
            fields,
            at_ns=event["time_ns"] or span.raw["start_ns"],
            sub=k,
            suffix=f"n17q.{k}",
            mapped=f"n17q span event -> {kind}",
            event_id=event_id,
        )
