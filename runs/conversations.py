"""A model call as a conversation (issue 38 point 2): what the model was asked, with which tools, and what it
answered, laid out for the event detail panel.

One model call is either
- an imported `model.proposal` (OTLP GenAI or OpenInference chat spans, Inspect model events): its recorded messages,
  tools and parameters read back as an OpenAI chat request and completion by `n17q_engine.recorded_chat` (the one
  reader of those conventions; fields held as blobs are read through the storage gate's reader, `run_blob_open`);
- a native replay's `tool.call` of `model.chat`: its request is the chat request the agent sent (as the scenario's
  contract normalized it), its `tool.result`'s blob the completion that answered it;
- a `model.proposal` that recorded no messages (a native recording): what it proposed, and a sentence saying the
  messages were not recorded.

Tokens: an OTLP span's `budget.charged` beside its proposal (`<span>.tokens`), an Inspect call's own `usage`, a
native call's completion's `usage`. Cost: `n17q_engine.pricing.call_cost` with the `N17Q_MODEL_PRICES` table; a model
without a price, or a call whose tokens were not recorded, says so and has no cost (never 0).

Bounded: at most WINDOW messages from each end of the conversation are laid out (the count of the rest is said), a
message's text past TEXT_CHARS is cut (the count of the rest said), a blob past BLOB_BYTES is not parsed (its size
is said, the download is the panel's blob list), at most TOOLS_SHOWN tools are listed, and the tool calls a message
names are linked to the run's own `tool.call`/`tool.result` events by two bounded queries over the LINK_SPAN events
around the call. Nothing here marks text safe: the template escapes every string.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from n17q_engine.agent.model import MODEL_TOOL
from n17q_engine.pricing import Cost, call_cost
from n17q_engine.recorded_chat import RecordedChatError, blob_fields, recorded_chat

from .blob_access import run_blob_open
from .models import Edge, Event, Run, RunBlob

WINDOW = 20  # messages laid out from each end of a long conversation
TEXT_CHARS = 20_000  # characters of one message's text (or a call's arguments) laid out
FOLD_CHARS = 800  # a text longer than this is folded (a <details>, its first line shown)
BLOB_BYTES = 8 * 1024 * 1024  # a conversation blob larger than this is not read
TOOLS_SHOWN = 50
LINK_SPAN = 2_000  # events before and after the call searched for the tool calls its messages name
LINK_ROWS = 400
ROLE_LABELS = {
    "system": "System",
    "developer": "Developer",
    "user": "User",
    "assistant": "Assistant",
    "tool": "Tool result",
}


@dataclass
class ToolCallView:
    id: str | None
    name: str
    arguments: str  # pretty-printed JSON text, or the text as recorded
    arguments_cut: int = 0
    call_event: str | None = None  # the run's tool.call of this id
    result_event: str | None = None  # and its tool.result
    outcome: str | None = None


@dataclass
class MessageView:
    position: int  # 1-based place in the conversation
    role: str
    text: str | None
    text_cut: int = 0  # characters not laid out
    tool_calls: list[ToolCallView] = field(default_factory=list)
    tool_call_id: str | None = None  # a tool result: the call it answers
    answers: str | None = None  # that call's tool name, from the conversation
    call_event: str | None = None
    result_event: str | None = None
    other_parts: int = 0  # content parts that are not text (images, audio): counted, not shown

    @property
    def label(self) -> str:
        return ROLE_LABELS.get(self.role, self.role.capitalize() or "Message")

    @property
    def folded(self) -> bool:
        return bool(self.text) and (len(self.text or "") > FOLD_CHARS or (self.text or "").count("\n") > 12)

    @property
    def first_line(self) -> str:
        line = (self.text or "").strip().split("\n", 1)[0]
        return line if len(line) <= 160 else line[:159] + "\u2026"


@dataclass
class ToolOffered:
    name: str
    description: str
    parameters: str  # pretty-printed JSON schema, "" when none


@dataclass
class Conversation:
    origin: str  # "recorded" (an imported trace's call), "native" (a replay's model.chat call), "proposal-only"
    model: str | None
    provider: str | None = None
    head: list[MessageView] = field(default_factory=list)
    tail: list[MessageView] = field(default_factory=list)
    hidden: int = 0  # messages between head and tail not laid out
    total: int = 0
    tools: list[ToolOffered] | None = None  # None: the call recorded no tool definitions
    tools_more: int = 0
    tools_note: str = ""  # why `tools` is None, where the reader knows
    completion: MessageView | None = None
    finish_reason: str | None = None
    parameters: list[tuple[str, str]] = field(default_factory=list)
    tokens_in: int | None = None
    tokens_out: int | None = None
    tokens_from: str = ""
    cost: Cost | None = None
    cost_note: str = ""  # why there is no cost: "no price for …", "tokens not recorded"
    notes: list[str] = field(default_factory=list)  # what the trace did not record, what could not be read
    result_event: str | None = None  # native: the tool.result holding the completion

    @property
    def messages(self) -> list[MessageView]:
        return self.head + self.tail

    @property
    def note_rows(self) -> list[tuple[str, str]]:
        """Each note with its badge word: what the trace did not record, or what the panel could not show."""
        return [("not recorded" if "recorded" in n else "not shown", n) for n in self.notes]

    @property
    def gap_first(self) -> int:
        return len(self.head) + 1

    @property
    def gap_last(self) -> int:
        return len(self.head) + self.hidden


def is_model_call(event: Event) -> bool:
    return event.kind == "model.proposal" or (event.kind == "tool.call" and event.body.get("tool") == MODEL_TOOL)


def conversation_of(run: Run, event: Event) -> Conversation | None:
    """The conversation of one model call (module docstring); None when the event is no model call."""
    if event.kind == "model.proposal":
        conversation = _recorded(run, event)
    elif event.kind == "tool.call" and event.body.get("tool") == MODEL_TOOL:
        conversation = _native(run, event)
    else:
        return None
    _link_calls(run, event, conversation)
    _price(conversation)
    return conversation


# --- reading -------------------------------------------------------------------------------------------------------


def _read_json(run: Run, digests: dict[str, str], notes: list[str]) -> dict[str, Any]:
    """The JSON values of the named blobs the run still holds (one query), each read whole up to BLOB_BYTES."""
    if not digests:
        return {}
    rows = {
        rb.blob.digest: rb
        for rb in RunBlob.objects.filter(run=run, blob__digest__in=sorted(set(digests.values()))[:8]).select_related(
            "blob", "hold"
        )
    }
    out: dict[str, Any] = {}
    for name, digest in digests.items():
        rb = rows.get(digest)
        if rb is None:
            notes.append(f"{name.replace('_', ' ')}: the run does not hold its blob")
            continue
        if rb.blob.size > BLOB_BYTES:
            notes.append(
                f"{name.replace('_', ' ')}: its blob is {rb.blob.size:,} bytes, more than the {BLOB_BYTES:,} this "
                "panel reads: download it below"
            )
            continue
        handle = run_blob_open(rb)
        if handle is None:
            notes.append(f"{name.replace('_', ' ')}: its bytes are no longer held (retention)")
            continue
        with handle:
            data = handle.read(BLOB_BYTES + 1)
        try:
            out[name] = json.loads(data)
        except ValueError:
            notes.append(f"{name.replace('_', ' ')}: its blob is not JSON")
    return out


def _usage_of(run: Run, event: Event) -> dict[str, Any] | None:
    """An OTLP span's token counts: its `budget.charged` beside the proposal (`<span>.tokens`), one query."""
    if not event.event_id.endswith(".proposal"):
        return None
    sibling = event.event_id[: -len(".proposal")] + ".tokens"
    row = Event.objects.filter(run=run, event_id=sibling, kind="budget.charged").values_list("body", flat=True).first()
    return row if isinstance(row, dict) else None


def _recorded(run: Run, event: Event) -> Conversation:
    body = event.body
    conv = Conversation(
        origin="recorded",
        model=body.get("model") if isinstance(body.get("model"), str) else _run_model(run),
        provider=body.get("provider") if isinstance(body.get("provider"), str) else None,
    )
    held = blob_fields(body)
    # A proposal whose only chat field is its tool catalogue (a native replay's, issue 39) recorded no messages.
    has_chat = any(k in body for k in ("input_messages", "output_messages", "messages_form")) or any(
        name != "tools" for name in held
    )
    usage = _usage_of(run, event)
    if usage is None and isinstance(body.get("usage"), dict):
        usage = body["usage"]
        conv.tokens_from = "the call's recorded usage"
    elif usage is not None:
        conv.tokens_from = f"the span's token charge ({event.event_id[: -len('.proposal')]}.tokens)"
    if usage is not None:
        conv.tokens_in, conv.tokens_out = _count(usage, "input_tokens"), _count(usage, "output_tokens")
    if not has_chat:
        conv.origin = "proposal-only"
        conv.notes.append(
            "this run recorded no messages for this model call (only its context digest): what it proposed is shown"
        )
        conv.completion = _proposal_message(body)
        conv.finish_reason = _proposal_finish(body)
        _catalogue(run, body, held, conv)
        return conv
    resolved = _read_json(run, held, conv.notes)
    request = completion = None
    try:
        request, completion, missing = recorded_chat(body, resolved=resolved, usage=usage)
        if missing == ["tools"]:
            conv.tools_note = "not recorded: the instrumentation records no tool definitions"
            request, completion, missing = recorded_chat(body, resolved=resolved, tools=[], usage=usage)
    except RecordedChatError as exc:
        conv.notes.append(f"the call cannot be read as a chat request: {exc}")
        missing = []
    said = {
        "messages": "its input messages were not recorded (message content capture was off)",
        "answer": "its answer was not recorded (message content capture was off)",
    }
    conv.notes.extend(said.get(m, f"{m} was not recorded") for m in missing if m != "tools")
    if request is None or completion is None:
        conv.completion = _proposal_message(body)
        conv.finish_reason = _proposal_finish(body)
        return conv
    _lay_out(conv, request, completion)
    return conv


def _catalogue(run: Run, body: dict[str, Any], held: dict[str, str], conv: Conversation) -> None:
    """The tools offered at a proposal that recorded no messages: its tool catalogue (`tools_blob`, or `tools`
    inline), read through the storage gate's reader; says it was not recorded where the proposal names none."""
    tools = body.get("tools")
    if "tools" in held:
        tools = _read_json(run, {"tools": held["tools"]}, conv.notes).get("tools")
        if tools is not None and not isinstance(tools, list):
            conv.notes.append("tools: its blob is not a list of tool definitions")
            tools = None
    elif not isinstance(tools, list):
        conv.tools_note = "not recorded: this proposal names no tool catalogue"
        return
    if isinstance(tools, list):
        defined = [t for t in tools if isinstance(t, dict)]
        conv.tools = [_tool(t) for t in defined[:TOOLS_SHOWN]]
        conv.tools_more = max(0, len(defined) - TOOLS_SHOWN)


def _native(run: Run, event: Event) -> Conversation:
    body = event.body
    request = body.get("request") if isinstance(body.get("request"), dict) else {}
    conv = Conversation(origin="native", model=request.get("model") if isinstance(request.get("model"), str) else None)
    result = (
        Edge.objects.filter(target_event=event, field="call_id", source__kind="tool.result")
        .order_by("id")
        .values_list("source__event_id", "source__body")
        .first()
    )
    completion: dict[str, Any] | None = None
    if result is None:
        conv.notes.append("no tool.result answers this call in the run: the model did not answer")
    else:
        conv.result_event = result[0]
        rbody = result[1] if isinstance(result[1], dict) else {}
        digest = rbody.get("blob")
        if rbody.get("outcome") != "ok":
            conv.notes.append(f"the call's result is {rbody.get('outcome')!s}: no completion")
        elif isinstance(digest, str):
            held = _read_json(run, {"completion": digest}, conv.notes).get("completion")
            if isinstance(held, dict) and isinstance(held.get("choices"), list):
                completion = held
            elif held is not None:
                conv.notes.append("the result's blob is not a chat completion")
        else:
            conv.notes.append("the call's result holds no body")
    if completion is not None and isinstance(completion.get("usage"), dict):
        usage = completion["usage"]
        conv.tokens_in, conv.tokens_out = _count(usage, "prompt_tokens"), _count(usage, "completion_tokens")
        conv.tokens_from = "the completion's usage, as the fixture that answered holds it"
    _lay_out(conv, request, completion)
    return conv


def _run_model(run: Run) -> str | None:
    model = (run.manifest_run or {}).get("model")
    name = model.get("name") if isinstance(model, dict) else None
    return name if isinstance(name, str) and name else None


def _count(usage: dict[str, Any], name: str) -> int | None:
    value = usage.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


# --- laying out ----------------------------------------------------------------------------------------------------


def _lay_out(conv: Conversation, request: dict[str, Any], completion: dict[str, Any] | None) -> None:
    messages = [m for m in request.get("messages") or [] if isinstance(m, dict)]
    conv.total = len(messages)
    names: dict[str, str] = {}
    if len(messages) > 2 * WINDOW:
        head, tail = messages[:WINDOW], messages[-WINDOW:]
        conv.hidden = len(messages) - 2 * WINDOW
        for m in messages[WINDOW:-WINDOW]:  # the tool names of calls answered in the shown tail
            for call in m.get("tool_calls") or []:
                if isinstance(call, dict) and isinstance(call.get("id"), str):
                    names[call["id"]] = str((call.get("function") or {}).get("name") or "")
    else:
        head, tail = messages, []
    conv.head = [_message(m, i + 1, names) for i, m in enumerate(head)]
    start = len(messages) - len(tail)
    conv.tail = [_message(m, start + i + 1, names) for i, m in enumerate(tail)]
    tools = request.get("tools")
    if isinstance(tools, list):
        conv.tools = [_tool(t) for t in tools[:TOOLS_SHOWN] if isinstance(t, dict)]
        conv.tools_more = max(0, len(tools) - TOOLS_SHOWN)
    skip = {"model", "messages", "tools"}
    conv.parameters = [(k, _json_text(v, indent=None)[0]) for k, v in request.items() if k not in skip][:30]
    if completion is not None:
        choices = completion.get("choices") or []
        choice = choices[0] if choices and isinstance(choices[0], dict) else {}
        message: dict[str, Any] = (
            choice["message"] if isinstance(choice.get("message"), dict) else {"role": "assistant"}
        )
        conv.completion = _message(message, len(messages) + 1, names)
        reason = choice.get("finish_reason")
        conv.finish_reason = reason if isinstance(reason, str) else None
        if isinstance(completion.get("model"), str) and completion["model"] and not conv.model:
            conv.model = completion["model"]


def _message(m: dict[str, Any], position: int, names: dict[str, str]) -> MessageView:
    role = str(m.get("role") or "user")
    content = m.get("content")
    other = 0
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                other += 1
        content = "\n\n".join(texts) if texts else None
    elif content is not None and not isinstance(content, str):
        content = _json_text(content)[0]
    text, cut = _cut(content)
    calls = []
    for call in m.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        function: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else {}
        name = str(function.get("name") or "")
        cid = call.get("id") if isinstance(call.get("id"), str) else None
        if cid:
            names[cid] = name
        arguments, arguments_cut = _json_text(function.get("arguments"))
        calls.append(ToolCallView(id=cid, name=name, arguments=arguments, arguments_cut=arguments_cut))
    tool_call_id = m.get("tool_call_id") if isinstance(m.get("tool_call_id"), str) else None
    return MessageView(
        position=position,
        role=role,
        text=text,
        text_cut=cut,
        tool_calls=calls,
        tool_call_id=tool_call_id,
        answers=names.get(tool_call_id or "") or None,
        other_parts=other,
    )


def _cut(text: str | None) -> tuple[str | None, int]:
    if text is None or len(text) <= TEXT_CHARS:
        return text, 0
    return text[:TEXT_CHARS], len(text) - TEXT_CHARS


def _json_text(value: Any, indent: int | None = 2) -> tuple[str, int]:
    """A value as JSON text for people (a JSON string is parsed first: arguments are JSON text), bounded."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            text, cut = _cut(value)
            return text or "", cut
    text = json.dumps(value, indent=indent, ensure_ascii=False, sort_keys=False)
    cut_text, cut = _cut(text)
    return cut_text or "", cut


def _tool(spec: dict[str, Any]) -> ToolOffered:
    function: dict[str, Any] = spec["function"] if isinstance(spec.get("function"), dict) else spec
    parameters = function.get("parameters")
    return ToolOffered(
        name=str(function.get("name") or ""),
        description=_cut(str(function.get("description") or ""))[0] or "",
        parameters=_json_text(parameters)[0] if parameters is not None else "",
    )


def _proposal_message(body: dict[str, Any]) -> MessageView | None:
    """What a proposal says the model answered, where the call's messages were not recorded."""
    proposal = body.get("proposal")
    if not isinstance(proposal, dict):
        return None
    calls_held: Any = proposal.get("calls")
    if not isinstance(calls_held, list):
        # A native proposal of one call: {type: tool_call, tool, ...arguments}.
        if proposal.get("type") == "tool_call":
            given = {k: v for k, v in proposal.items() if k not in ("type", "tool", "text", "finish_reason")}
            calls_held = [{"call": None, "tool": proposal.get("tool"), "arguments": given}]
        else:
            calls_held = []
    calls = []
    for call in calls_held:
        if isinstance(call, dict):
            arguments, cut = _json_text(call.get("arguments"))
            cid = call.get("call") if isinstance(call.get("call"), str) else None
            calls.append(ToolCallView(id=cid, name=str(call.get("tool") or ""), arguments=arguments, arguments_cut=cut))
    text = proposal.get("text") if isinstance(proposal.get("text"), str) else None
    if text is None and not calls:
        text = {"stop": "(stopped: no message)"}.get(str(proposal.get("type")))
    shown, cut = _cut(text)
    return MessageView(position=0, role="assistant", text=shown, text_cut=cut, tool_calls=calls)


def _proposal_finish(body: dict[str, Any]) -> str | None:
    proposal = body.get("proposal")
    reason = proposal.get("finish_reason") if isinstance(proposal, dict) else None
    return reason if isinstance(reason, str) else None


# --- links to the run's events, and the price ----------------------------------------------------------------------


def _link_calls(run: Run, event: Event, conv: Conversation) -> None:
    """Link each tool call and tool result the conversation shows to the run's own tool.call (by its recorded call id,
    `tool_call`) and that call's tool.result: two queries over the LINK_SPAN events around the model call."""
    shown = conv.messages + ([conv.completion] if conv.completion else [])
    wanted = {c.id for m in shown for c in m.tool_calls if c.id} | {m.tool_call_id for m in shown if m.tool_call_id}
    if not wanted:
        return
    rows = list(
        Event.objects.filter(run=run, kind="tool.call", seq__gte=event.seq - LINK_SPAN, seq__lte=event.seq + LINK_SPAN)
        .order_by("seq")
        .values_list("pk", "event_id", "body__tool_call")[:LINK_ROWS]
    )
    calls = {str(tc): (pk, eid) for pk, eid, tc in rows if isinstance(tc, str) and tc in wanted}
    if not calls:
        return
    results = {
        target: (source, outcome)
        for target, source, outcome in Edge.objects.filter(
            target_event_id__in=[pk for pk, _ in calls.values()], field="call_id"
        )
        .order_by("id")
        .values_list("target_event_id", "source__event_id", "source__body__outcome")[:LINK_ROWS]
    }
    for m in shown:
        for c in m.tool_calls:
            if c.id in calls:
                pk, c.call_event = calls[c.id]
                c.result_event, c.outcome = results.get(pk, (None, None))
        if m.tool_call_id in calls:
            pk, m.call_event = calls[m.tool_call_id]
            m.result_event = results.get(pk, (None, None))[0]


def _price(conv: Conversation) -> None:
    if conv.tokens_in is None or conv.tokens_out is None:
        conv.cost_note = "tokens not recorded for this call: cost not evaluated"
        return
    cost = call_cost(conv.model, conv.tokens_in, conv.tokens_out, settings.N17Q_MODEL_PRICES)
    if cost is None:
        conv.cost_note = f"no price for {conv.model or 'an unnamed model'}: cost not evaluated"
    conv.cost = cost
