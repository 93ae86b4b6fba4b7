"""OpenTelemetry traces (OTLP, protobuf or JSON) -> N17Q runs, one per trace (issue 17, points 2 and 3).

Three span conventions are read, each mapped to the bundle vocabulary as docs/formats/otlp.md tabulates:
OpenTelemetry GenAI (`gen_ai.*`: invoke_agent, chat, execute_tool, usage, messages), OpenInference
(`openinference.span.kind`, `llm.*`, `tool.*`, `input.value`/`output.value`), and `n17q.*` span attributes and span
events, with which a harness can write any event of the vocabulary (workspaces, receipts, admissions, approvals,
effects, claims) and so get N17Q's lineage checks. Command-execution spans (`process.*`) become command receipts.

The pipeline is three public steps, so the OTLP/HTTP receiver can buffer between them: `decode_otlp` (bytes ->
resourceSpans in the OTLP JSON mapping), `flatten_spans` (-> one plain dict per span, ids in hex, attributes as
Python values, its resource and scope attached), `convert_trace` (one trace's flat spans -> one `ConvertedRun`).
`convert_otlp` chains them for a whole file.

Why the protobuf is not turned into a dict by `json_format.MessageToDict`: measured on 100,000 SDK spans it takes
6 s, more than the whole import's budget (DESIGN §9: a 100,000-span file imported in under 10 s); the walk below
reads the parsed message's fields directly (about 0.5 s) and gives the same dict (tests/engine/test_format_otlp.py
compares it with MessageToDict on the real exporter's output), except that ids are hex as OTLP/JSON writes them.

Nothing is dropped: every span, whole, is kept in the run's `source-trace` blobs (JSON, a few dozen spans each, so
the event panel can show the one an event came from); every event names its span and that blob in its `otlp`
field; what no mapping reads is counted in `report.unmapped`.
"""

from __future__ import annotations

import base64
import binascii
import gc
import json
import math
import re
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from n17q_engine import vocabulary as v
from n17q_engine.bundle import BundleError, title_problem, validate_event
from n17q_engine.canonical import canonical_json, digest_bytes, digest_json, request_digest
from n17q_engine.identifiers import id_problem, run_id_problem

from .. import ConversionError, ConversionReport, ConvertedRun

PROTOBUF = "application/x-protobuf"
JSON_TYPE = "application/json"

# The original file is kept as a blob only up to the size the importer's secret scan reads whole
# (runs/secret_scan.py MAX_SCANNED_BLOB_BYTES); a larger one is still converted, its spans kept in the
# source-trace blobs, and a report note says so.
MAX_ORIGINAL_BLOB_BYTES = 64 * 1024 * 1024
# A source-trace blob holds spans up to about this many bytes of JSON: the event panel previews 64 KiB of a blob
# (runs/blob_preview.py), so the span an event names is on screen, not only in a download.
SOURCE_CHUNK_BYTES = 32 * 1024
# Payloads (messages, tool arguments shown beside the request, outputs) larger than this become blobs.
INLINE_PAYLOAD_BYTES = 1024
# Short strings a person reads in an event (a reason, an error message) are cut here; the whole is in the span.
MAX_TEXT_CHARS = 500
MAX_ANY_DEPTH = 32

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

_SPAN_KINDS = {
    0: "unspecified",
    1: "internal",
    2: "server",
    3: "client",
    4: "producer",
    5: "consumer",
}
_SPAN_KIND_NAMES = {f"SPAN_KIND_{name.upper()}": name for name in _SPAN_KINDS.values()}
_STATUS_CODES = {0: "unset", 1: "ok", 2: "error"}
_STATUS_NAMES = {"STATUS_CODE_UNSET": "unset", "STATUS_CODE_OK": "ok", "STATUS_CODE_ERROR": "error"}
_HEX32 = re.compile(r"^[0-9a-fA-F]{32}$")
_HEX16 = re.compile(r"^[0-9a-fA-F]{16}$")
_UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")
_NOT_ONE_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]+")
_RUN_ID_BAD = re.compile(r"[^\w.:@+=-]+")
_INDEX = re.compile(r"\.\d+(?=\.|$)")

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


# ------------------------------------------------------------------------------------------------------ decoding


def decode_otlp(body: bytes, *, content_type: str) -> list[dict[str, Any]]:
    """The resourceSpans of an ExportTraceServiceRequest (`application/x-protobuf` or `application/json`, already
    un-gzipped), in the OTLP JSON mapping (camelCase keys, int64 as strings, enums by name, as MessageToDict gives)
    with traceId/spanId/parentSpanId as lowercase hex. ConversionError (one line) for anything else."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media in ("application/x-protobuf", "application/protobuf", "application/vnd.google.protobuf"):
        with _bulk():
            return _proto_resource_spans(_parse_proto(body))
    if media == "application/json" or media.endswith("+json"):
        with _bulk():
            return _json_resource_spans(_parse_json(body))
    raise ConversionError(
        f"content type {content_type[:80]!r} is not OTLP: send application/x-protobuf or application/json"
    )


def _parse_proto(body: bytes) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise ConversionError(
            f"the body is not an OTLP ExportTraceServiceRequest in protobuf (truncated or corrupt: {_short(exc)})"
        ) from None
    return request


def _parse_json(body: bytes) -> Any:
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConversionError(f"the OTLP JSON is not UTF-8 (invalid byte at {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConversionError(
            f"the OTLP JSON does not parse ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except RecursionError:
        raise ConversionError("the OTLP JSON is nested too deeply to read") from None
    except ValueError as exc:
        raise ConversionError(f"the OTLP JSON does not parse ({_short(exc)})") from None


def _short(exc: BaseException) -> str:
    return _one_line(str(exc) or exc.__class__.__name__, 200)


# ---- protobuf -> the OTLP JSON mapping (the fields MessageToDict writes, in its forms)


def _proto_resource_spans(request: ExportTraceServiceRequest) -> list[dict[str, Any]]:
    out = []
    for rs in request.resource_spans:
        item: dict[str, Any] = {}
        if rs.HasField("resource"):
            item["resource"] = _proto_attr_holder(rs.resource)
        scopes = []
        for ss in rs.scope_spans:
            scope_item: dict[str, Any] = {}
            if ss.HasField("scope"):
                scope = _proto_attr_holder(ss.scope)
                if ss.scope.name:
                    scope["name"] = ss.scope.name
                if ss.scope.version:
                    scope["version"] = ss.scope.version
                scope_item["scope"] = scope
            if len(ss.spans):
                scope_item["spans"] = [_proto_span(span) for span in ss.spans]
            if ss.schema_url:
                scope_item["schemaUrl"] = ss.schema_url
            scopes.append(scope_item)
        if scopes:
            item["scopeSpans"] = scopes
        if rs.schema_url:
            item["schemaUrl"] = rs.schema_url
        out.append(item)
    return out


def _proto_attr_holder(message: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if len(message.attributes):
        out["attributes"] = [_proto_kv(kv) for kv in message.attributes]
    if message.dropped_attributes_count:
        out["droppedAttributesCount"] = message.dropped_attributes_count
    return out


def _proto_kv(kv: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if kv.key:
        out["key"] = kv.key
    if kv.HasField("value"):
        out["value"] = _proto_any(kv.value, 0)
    return out


def _proto_any(value: Any, depth: int) -> dict[str, Any]:
    which = value.WhichOneof("value")
    if which == "string_value":
        return {"stringValue": value.string_value}
    if which == "int_value":
        return {"intValue": str(value.int_value)}
    if which == "bool_value":
        return {"boolValue": value.bool_value}
    if which == "double_value":
        d = value.double_value
        return {"doubleValue": d if math.isfinite(d) else ("NaN" if d != d else ("Infinity" if d > 0 else "-Infinity"))}
    if depth > MAX_ANY_DEPTH:
        raise ConversionError(f"an attribute value is nested deeper than {MAX_ANY_DEPTH} levels")
    if which == "array_value":
        values = [_proto_any(item, depth + 1) for item in value.array_value.values]
        return {"arrayValue": {"values": values} if values else {}}
    if which == "kvlist_value":
        kvs = []
        for kv in value.kvlist_value.values:
            item: dict[str, Any] = {"key": kv.key} if kv.key else {}
            if kv.HasField("value"):
                item["value"] = _proto_any(kv.value, depth + 1)
            kvs.append(item)
        return {"kvlistValue": {"values": kvs} if kvs else {}}
    if which == "bytes_value":
        return {"bytesValue": base64.b64encode(value.bytes_value).decode("ascii")}
    return {}


def _proto_span(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if span.trace_id:
        out["traceId"] = span.trace_id.hex()
    if span.span_id:
        out["spanId"] = span.span_id.hex()
    if span.trace_state:
        out["traceState"] = span.trace_state
    if span.parent_span_id:
        out["parentSpanId"] = span.parent_span_id.hex()
    if span.flags:
        out["flags"] = span.flags
    if span.name:
        out["name"] = span.name
    if span.kind:
        out["kind"] = _KIND_ENUM_NAMES.get(span.kind, span.kind)
    if span.start_time_unix_nano:
        out["startTimeUnixNano"] = str(span.start_time_unix_nano)
    if span.end_time_unix_nano:
        out["endTimeUnixNano"] = str(span.end_time_unix_nano)
    if len(span.attributes):
        out["attributes"] = [_proto_kv(kv) for kv in span.attributes]
    if span.dropped_attributes_count:
        out["droppedAttributesCount"] = span.dropped_attributes_count
    if len(span.events):
        events = []
        for event in span.events:
            item: dict[str, Any] = {}
            if event.time_unix_nano:
                item["timeUnixNano"] = str(event.time_unix_nano)
            if event.name:
                item["name"] = event.name
            item.update(_proto_attr_holder(event))
            events.append(item)
        out["events"] = events
    if span.dropped_events_count:
        out["droppedEventsCount"] = span.dropped_events_count
    if len(span.links):
        links = []
        for link in span.links:
            item = {}
            if link.trace_id:
                item["traceId"] = link.trace_id.hex()
            if link.span_id:
                item["spanId"] = link.span_id.hex()
            if link.trace_state:
                item["traceState"] = link.trace_state
            item.update(_proto_attr_holder(link))
            if link.flags:
                item["flags"] = link.flags
            links.append(item)
        out["links"] = links
    if span.dropped_links_count:
        out["droppedLinksCount"] = span.dropped_links_count
    if span.HasField("status"):
        status: dict[str, Any] = {}
        if span.status.message:
            status["message"] = span.status.message
        if span.status.code:
            status["code"] = _STATUS_ENUM_NAMES.get(span.status.code, span.status.code)
        out["status"] = status
    return out


_KIND_ENUM_NAMES = {number: f"SPAN_KIND_{name.upper()}" for number, name in _SPAN_KINDS.items()}
_STATUS_ENUM_NAMES = {0: "STATUS_CODE_UNSET", 1: "STATUS_CODE_OK", 2: "STATUS_CODE_ERROR"}


# ---- where each span sits in a protobuf original

# A protobuf original kept whole (role `source-otlp`) already holds every span, byte for byte: the run names each
# event's span by its byte range in it instead of keeping the spans a second time as JSON (a 100,000-span file's
# source-trace blobs were 55 MB of JSON beside a 26 MB original, written, hashed and secret-scanned again).


class SpanBytes(NamedTuple):
    """Where one span sits in a protobuf ExportTraceServiceRequest: (offset, length) of its Span message, and of
    the Resource and InstrumentationScope it was sent under (None when the request had none)."""

    span: tuple[int, int]
    resource: tuple[int, int] | None
    scope: tuple[int, int] | None


class _WireError(ValueError):
    pass


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _WireError
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _wire_fields(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(field number, start, end) of each length-delimited field of the message in data[start:end]; the other wire
    types are stepped over. _WireError for anything a parser would refuse (truncation, groups, a bad wire type)."""
    pos = start
    while pos < end:
        key = data[pos]
        if key < 0x80:  # a one-byte key (fields 1..15), as OTLP's are: read here, not through a call
            pos += 1
        else:
            key, pos = _varint(data, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise _WireError
        if wire == 2:
            size = data[pos] if pos < end else 0x80
            if size < 0x80:
                pos += 1
            else:
                size, pos = _varint(data, pos, end)
            value = pos
            pos += size
            if pos > end:
                raise _WireError
            yield number, value, pos
        elif wire == 0:
            _value, pos = _varint(data, pos, end)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise _WireError
        if pos > end:
            raise _WireError


def _span_ids(data: bytes, start: int, end: int) -> tuple[bytes, bytes]:
    """A Span's trace id and span id (fields 1 and 2). Every SDK writes them first, in that order: that layout is
    read directly; any other is walked field by field (the last occurrence wins, as a parser decides)."""
    if end - start >= 28 and data[start : start + 2] == b"\x0a\x10" and data[start + 18 : start + 20] == b"\x12\x08":
        return data[start + 2 : start + 18], data[start + 20 : start + 28]
    trace = span = b""
    for number, s, e in _wire_fields(data, start, end):
        if number == 1:
            trace = data[s:e]
        elif number == 2:
            span = data[s:e]
    return trace, span


def _head_and_items(data: bytes, start: int, end: int) -> tuple[tuple[int, int] | None, list[tuple[int, int]]]:
    """A message's singular field 1 as (offset, length) and its repeated field 2 as (start, end) each. _WireError
    when field 1 appears twice: a parser merges the two, so no one range stands for it."""
    head: tuple[int, int] | None = None
    items: list[tuple[int, int]] = []
    for number, s, e in _wire_fields(data, start, end):
        if number == 1:
            if head is not None:
                raise _WireError
            head = (s, e - s)
        elif number == 2:
            items.append((s, e))
    return head, items


def span_byte_ranges(body: bytes) -> dict[tuple[str, str], SpanBytes] | None:
    """Where each span of a protobuf ExportTraceServiceRequest sits: {(trace id, span id) in hex: SpanBytes}, the
    first copy of a span sent twice. None when the request is laid out in a way a byte range cannot stand for
    (a Resource or scope sent twice in one message, which a parser merges) or does not walk: the caller then keeps
    the spans as JSON instead. Only the three outer levels are walked (about 0.1 s for 100,000 spans)."""
    found: dict[tuple[str, str], SpanBytes] = {}
    try:
        for number, rs_start, rs_end in _wire_fields(body, 0, len(body)):
            if number != 1:
                continue
            # ResourceSpans and ScopeSpans alike: field 1 what the items were sent under, field 2 the items.
            resource, scopes = _head_and_items(body, rs_start, rs_end)
            for ss_start, ss_end in scopes:
                scope, spans = _head_and_items(body, ss_start, ss_end)
                for s, e in spans:
                    trace, span = _span_ids(body, s, e)
                    found.setdefault((trace.hex(), span.hex()), SpanBytes((s, e - s), resource, scope))
    except _WireError:
        return None
    return found


def otlp_strings(body: bytes) -> tuple[list[str], bool] | None:
    """Every text an OTLP protobuf request holds (keys, string and bytes values at any depth, names, trace states,
    status messages, scope names and versions, schema URLs, entity references), each whole, and whether that is
    all of them (False when the request carries fields this schema does not know: a newer exporter's); None when
    `body` is not such a request.

    For the secret scan of a kept protobuf original (runs/secret_scan.py): in the raw bytes a string sits between
    framing bytes (a length, the next field's tag) that may be letters or digits, so a token glued to them fails the
    boundaries a rule asks for, and a mask widened over "its" token would overwrite the framing. Scanned as the texts
    they are, the values are found whole, then overwritten in the raw bytes exactly where they occur."""
    try:
        request = ExportTraceServiceRequest.FromString(body)
    except (DecodeError, ValueError, RuntimeError):
        return None
    # Fields the schema does not know are kept by the parser as bytes no walk below reads: dropped, the request
    # encodes to fewer bytes than it came in.
    complete = len(body) == _known_size(request)
    out: list[str] = []
    add = out.append

    def value_texts(value: Any, depth: int) -> None:
        which = value.WhichOneof("value")
        if which == "string_value":
            add(value.string_value)
        elif which == "bytes_value":
            add(value.bytes_value.decode("latin-1"))
        elif depth < MAX_ANY_DEPTH and which == "array_value":
            for item in value.array_value.values:
                value_texts(item, depth + 1)
        elif depth < MAX_ANY_DEPTH and which == "kvlist_value":
            attrs(value.kvlist_value.values, depth + 1)

    def attrs(kvs: Any, depth: int = 0) -> None:
        for kv in kvs:
            add(kv.key)
            value = kv.value  # each access makes a new wrapper: once
            if value.WhichOneof("value") == "string_value":
                add(value.string_value)  # the common case, without the call
            else:
                value_texts(value, depth)

    for rs in request.resource_spans:
        attrs(rs.resource.attributes)
        for entity in rs.resource.entity_refs:
            out += (entity.schema_url, entity.type, *entity.id_keys, *entity.description_keys)
        add(rs.schema_url)
        for ss in rs.scope_spans:
            add(ss.scope.name)
            add(ss.scope.version)
            attrs(ss.scope.attributes)
            add(ss.schema_url)
            for span in ss.spans:
                add(span.name)
                add(span.trace_state)
                add(span.status.message)
                attrs(span.attributes)
                for event in span.events:
                    add(event.name)
                    attrs(event.attributes)
                for link in span.links:
                    add(link.trace_state)
                    attrs(link.attributes)
    return out, complete


def _known_size(request: ExportTraceServiceRequest) -> int:
    request.DiscardUnknownFields()
    return int(request.ByteSize())


def byte_range_text(at: tuple[int, int]) -> str:
    """A byte range as an event's `otlp` field writes it: "offset+length"."""
    return f"{at[0]}+{at[1]}"


_BYTE_RANGE = re.compile(r"(\d{1,15})\+(\d{1,15})")


def parse_byte_range(value: Any) -> tuple[int, int] | None:
    """(offset, length) from "offset+length"; None for anything else."""
    match = _BYTE_RANGE.fullmatch(value) if isinstance(value, str) else None
    return (int(match[1]), int(match[2])) if match else None


def source_span_from_bytes(span: bytes, resource: bytes | None, scope: bytes | None) -> dict[str, Any]:
    """One span of a protobuf original, read from its byte ranges: {span, scope, resource} with the span as
    `flatten_spans` writes it (what the converter read), so it reads the same as a span kept in a source-trace blob.
    ConversionError when the bytes do not decode (the secret scan overwrote part of the original, say)."""
    request = ExportTraceServiceRequest()
    try:
        held = request.resource_spans.add()
        if resource is not None:
            held.resource.ParseFromString(resource)
        scoped = held.scope_spans.add()
        if scope is not None:
            scoped.scope.ParseFromString(scope)
        scoped.spans.add().ParseFromString(span)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise ConversionError(f"the span's bytes do not decode ({_short(exc)})") from None
    with _bulk():
        [flat] = _flat_from_proto(request)
    resource, scope = flat.pop("resource"), flat.pop("scope")
    return {"span": flat, "scope": scope, "resource": resource}


def source_span_from_chunk(chunk: bytes, span_id: str) -> dict[str, Any] | None:
    """One span of a `source-trace` blob (the JSON form `_keep_spans_as_json` writes): {span, scope, resource}, as
    `source_span_from_bytes` gives; None when the blob holds no span of that id. ConversionError when the blob is not
    that JSON."""
    try:
        doc = json.loads(chunk)
    except (ValueError, RecursionError) as exc:
        raise ConversionError(f"the source-trace blob does not parse ({_short(exc)})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("spans"), list):
        raise ConversionError("the source-trace blob is not a list of spans")
    resources = doc.get("resources")
    for span in doc["spans"]:
        if isinstance(span, dict) and span.get("span_id") == span_id:
            span = dict(span)
            key = span.pop("resource", None)
            resource = resources.get(key) if isinstance(resources, dict) and isinstance(key, str) else None
            return {"span": span, "scope": span.pop("scope", None), "resource": resource}
    return None


# ---- protobuf -> flat spans directly (convert_otlp's path: the intermediate mapping would cost as much again)


def _flat_from_proto(request: ExportTraceServiceRequest) -> list[dict[str, Any]]:
    """Every span of the request, flat, in the request's order."""
    return _flat_proto_spans(
        [
            (r, s, i, span)
            for r, rs in enumerate(request.resource_spans)
            for s, ss in enumerate(rs.scope_spans)
            for i, span in enumerate(ss.spans)
        ],
        request,
    )


# A span of a parsed request by where it sits: (resource index, scope index, span index, the span message).
_ProtoSpan = tuple[int, int, int, Any]


def _proto_traces(request: ExportTraceServiceRequest) -> dict[str, list[_ProtoSpan]]:
    """The request's spans by trace id, in the order each trace first appears, not yet flattened: a file's traces
    are flattened one at a time as their runs are converted (`_flat_proto_spans`), so that the first run is ready
    after its own spans are read, not after the whole file's (and only one trace's flat spans are in memory)."""
    traces: dict[str, list[_ProtoSpan]] = {}
    for r, rs in enumerate(request.resource_spans):
        for s, ss in enumerate(rs.scope_spans):
            for i, span in enumerate(ss.spans):
                raw = span.trace_id
                trace_id = (
                    raw.hex()
                    if len(raw) == 16 and any(raw)
                    else _proto_id(raw, 16, f"resourceSpans[{r}] span {i}: traceId", required=True)
                )
                traces.setdefault(trace_id, []).append((r, s, i, span))
    return traces


def _flat_proto_spans(spans: list[_ProtoSpan], request: ExportTraceServiceRequest) -> list[dict[str, Any]]:
    flat: list[dict[str, Any]] = []
    append = flat.append
    resources: dict[int, dict[str, Any]] = {}
    scopes: dict[tuple[int, int], dict[str, Any]] = {}
    for r, s, i, span in spans:
        resource = resources.get(r)
        if resource is None:
            resource = resources[r] = _proto_attrs(request.resource_spans[r].resource.attributes)
        scope = scopes.get((r, s))
        if scope is None:
            ss = request.resource_spans[r].scope_spans[s]
            scope = scopes[(r, s)] = {
                "name": _storable(ss.scope.name),
                "version": _storable(ss.scope.version),
                "attributes": _proto_attrs(ss.scope.attributes),
            }
        where = f"resourceSpans[{r}] span {i}"
        trace_id = _proto_id(span.trace_id, 16, f"{where}: traceId", required=True)
        span_id = _proto_id(span.span_id, 8, f"{where}: spanId", required=True)
        parent = _proto_id(span.parent_span_id, 8, f"{where}: parentSpanId", required=False)
        out: dict[str, Any] = {
            "trace_id": trace_id,
            "span_id": span_id,
            "parent_span_id": parent or None,
            "name": _storable(span.name),
            "kind": _SPAN_KINDS.get(span.kind, "unspecified"),
            "start_ns": span.start_time_unix_nano,
            "end_ns": span.end_time_unix_nano,
            "attributes": _proto_attrs(span.attributes) if len(span.attributes) else {},
            "events": [
                {
                    "name": _storable(e.name),
                    "time_ns": e.time_unix_nano,
                    "attributes": _proto_attrs(e.attributes),
                }
                for e in span.events
            ]
            if len(span.events)
            else [],
            "links": [
                {
                    "trace_id": _proto_id(link.trace_id, 16, f"{where}: link traceId", required=False),
                    "span_id": _proto_id(link.span_id, 8, f"{where}: link spanId", required=False),
                    "attributes": _proto_attrs(link.attributes),
                }
                for link in span.links
            ]
            if len(span.links)
            else [],
            "status": {
                "code": _STATUS_CODES.get(span.status.code, "unset"),
                "message": _storable(span.status.message),
            },
            "resource": resource,
            "scope": scope,
        }
        if span.dropped_attributes_count or span.dropped_events_count or span.dropped_links_count:
            out["dropped"] = {
                name: count
                for name, count in (
                    ("attributes", span.dropped_attributes_count),
                    ("events", span.dropped_events_count),
                    ("links", span.dropped_links_count),
                )
                if count
            }
        append(out)
    return flat


def _proto_id(raw: bytes, size: int, where: str, *, required: bool) -> str:
    if len(raw) == size and any(raw):
        return raw.hex()
    if not raw and not required:
        return ""
    if not raw:
        raise ConversionError(f"{where} is missing (an OTLP span needs a {size}-byte id)")
    raise ConversionError(
        f"{where} is {len(raw)} bytes{' of zeros' if not any(raw) else ''}, not a valid {size}-byte id"
    )


def _proto_attrs(kvs: Any) -> dict[str, Any]:
    return {(_storable(kv.key)): _proto_value(kv.value, 0) for kv in kvs}


def _proto_value(value: Any, depth: int) -> Any:
    which = value.WhichOneof("value")
    if which == "string_value":
        return _storable(value.string_value)
    if which == "int_value":
        return value.int_value
    if which == "bool_value":
        return value.bool_value
    if which == "double_value":
        d = value.double_value
        return d if math.isfinite(d) else ("NaN" if d != d else ("Infinity" if d > 0 else "-Infinity"))
    if depth > MAX_ANY_DEPTH:
        raise ConversionError(f"an attribute value is nested deeper than {MAX_ANY_DEPTH} levels")
    if which == "array_value":
        return [_proto_value(item, depth + 1) for item in value.array_value.values]
    if which == "kvlist_value":
        return {_storable(kv.key): _proto_value(kv.value, depth + 1) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    return None


# ---- OTLP/JSON -> the same mapping: shape checked, snake_case names read too, ids checked and lower-cased

# OTLP/JSON receivers must accept the protobuf field names as well as lowerCamelCase (the OTLP specification).
_SNAKE = {
    "resource_spans": "resourceSpans",
    "scope_spans": "scopeSpans",
    "schema_url": "schemaUrl",
    "trace_id": "traceId",
    "span_id": "spanId",
    "parent_span_id": "parentSpanId",
    "trace_state": "traceState",
    "start_time_unix_nano": "startTimeUnixNano",
    "end_time_unix_nano": "endTimeUnixNano",
    "time_unix_nano": "timeUnixNano",
    "dropped_attributes_count": "droppedAttributesCount",
    "dropped_events_count": "droppedEventsCount",
    "dropped_links_count": "droppedLinksCount",
}


def _camel(obj: dict[str, Any]) -> dict[str, Any]:
    if any(key in _SNAKE for key in obj):
        return {_SNAKE.get(key, key): value for key, value in obj.items()}
    return obj


def _json_resource_spans(doc: Any) -> list[dict[str, Any]]:
    if not isinstance(doc, dict):
        raise ConversionError(f"the OTLP JSON is a {_json_type(doc)}, not an object with resourceSpans")
    doc = _camel(doc)
    resource_spans = doc.get("resourceSpans")
    if resource_spans is None:
        raise ConversionError("the OTLP JSON has no resourceSpans (not an OTLP trace export)")
    out = []
    for r, rs in enumerate(_list(resource_spans, "resourceSpans")):
        where = f"resourceSpans[{r}]"
        rs = _camel(_obj(rs, where))
        scopes = []
        for s, ss in enumerate(_list(rs.get("scopeSpans", []), f"{where}.scopeSpans")):
            swhere = f"{where}.scopeSpans[{s}]"
            ss = _camel(_obj(ss, swhere))
            spans = []
            for i, span in enumerate(_list(ss.get("spans", []), f"{swhere}.spans")):
                spans.append(_json_span(_camel(_obj(span, f"{swhere}.spans[{i}]")), f"{swhere}.spans[{i}]"))
            item = dict(ss)
            item["spans"] = spans
            if "scope" in ss:
                item["scope"] = _obj(ss["scope"], f"{swhere}.scope")
            scopes.append(item)
        item = dict(rs)
        item["scopeSpans"] = scopes
        if "resource" in rs:
            item["resource"] = _obj(rs["resource"], f"{where}.resource")
        out.append(item)
    return out


def _json_span(span: dict[str, Any], where: str) -> dict[str, Any]:
    out = dict(span)
    out["traceId"] = _json_id(span.get("traceId"), 16, f"{where}.traceId", required=True)
    out["spanId"] = _json_id(span.get("spanId"), 8, f"{where}.spanId", required=True)
    parent = _json_id(span.get("parentSpanId"), 8, f"{where}.parentSpanId", required=False)
    if parent:
        out["parentSpanId"] = parent
    else:
        out.pop("parentSpanId", None)
    links = span.get("links")
    if links is not None:
        fixed = []
        for j, link in enumerate(_list(links, f"{where}.links")):
            link = dict(_camel(_obj(link, f"{where}.links[{j}]")))
            link["traceId"] = _json_id(link.get("traceId"), 16, f"{where}.links[{j}].traceId", required=False)
            link["spanId"] = _json_id(link.get("spanId"), 8, f"{where}.links[{j}].spanId", required=False)
            fixed.append(link)
        out["links"] = fixed
    events = span.get("events")
    if events is not None:
        out["events"] = [
            _camel(_obj(event, f"{where}.events[{j}]")) for j, event in enumerate(_list(events, f"{where}.events"))
        ]
    return out


def _json_id(value: Any, size: int, where: str, *, required: bool) -> str:
    """An id as lowercase hex: OTLP/JSON writes hex; base64 (what MessageToDict writes for bytes) is read too."""
    if value is None or value == "":
        if required:
            raise ConversionError(f"{where} is missing (an OTLP span needs a {size}-byte id)")
        return ""
    if not isinstance(value, str):
        raise ConversionError(f"{where} must be a hex string, got {_json_type(value)}")
    if len(value) == size * 2 and (_HEX32 if size == 16 else _HEX16).match(value):
        if value.strip("0") == "":
            raise ConversionError(f"{where} is all zeros, which OTLP defines as invalid")
        return value.lower()
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) == size:
        return raw.hex()
    raise ConversionError(f"{where} is not a {size}-byte id in hex ({value[:40]!r})")


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ConversionError(f"{where} must be a list, got {_json_type(value)}")
    return value


def _obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConversionError(f"{where} must be an object, got {_json_type(value)}")
    return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "object", list: "list", str: "string", bool: "boolean", int: "number", float: "number"}.get(
        type(value), type(value).__name__
    )


# ------------------------------------------------------------------------------------------------------ flattening


def flatten_spans(resource_spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One plain dict per span, in the order the export holds them:

    `trace_id`, `span_id` (hex), `parent_span_id` (hex or None), `name`, `kind` (internal | server | client |
    producer | consumer | unspecified), `start_ns`, `end_ns` (int), `attributes` (key -> Python value: AnyValue
    decoded, kvlist -> dict, array -> list, bytes -> base64 text, a non-finite double -> "NaN"/"Infinity" text),
    `events` [{name, time_ns, attributes}], `links` [{trace_id, span_id, attributes}], `status` {code: unset | ok |
    error, message}, `resource` (attributes), `scope` {name, version, attributes}, and `dropped` {attributes, events,
    links} when the producer dropped any. JSON-serialisable, so the receiver can buffer it anywhere. Spans of one
    resource share its `resource` dict (not copied per span)."""
    with _bulk():
        return _flatten(resource_spans)


def _flatten(resource_spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    flat: list[dict[str, Any]] = []
    for r, rs in enumerate(_list(resource_spans, "resourceSpans")):
        where = f"resourceSpans[{r}]"
        rs = _camel(_obj(rs, where))
        resource = _attributes(_obj(rs.get("resource") or {}, f"{where}.resource").get("attributes"), where)
        for s, ss in enumerate(_list(rs.get("scopeSpans") or [], f"{where}.scopeSpans")):
            swhere = f"{where}.scopeSpans[{s}]"
            ss = _camel(_obj(ss, swhere))
            scope_raw = _obj(ss.get("scope") or {}, f"{swhere}.scope")
            scope = {
                "name": _text(scope_raw.get("name")),
                "version": _text(scope_raw.get("version")),
                "attributes": _attributes(scope_raw.get("attributes"), f"{swhere}.scope"),
            }
            for i, span in enumerate(_list(ss.get("spans") or [], f"{swhere}.spans")):
                flat.append(
                    _flat_span(_camel(_obj(span, f"{swhere}.spans[{i}]")), resource, scope, f"{swhere}.spans[{i}]")
                )
    return flat


def _flat_span(span: dict[str, Any], resource: dict[str, Any], scope: dict[str, Any], where: str) -> dict[str, Any]:
    trace_id = _flat_id(span.get("traceId"), 32, f"{where}.traceId", required=True)
    span_id = _flat_id(span.get("spanId"), 16, f"{where}.spanId", required=True)
    parent = _flat_id(span.get("parentSpanId"), 16, f"{where}.parentSpanId", required=False)
    status_raw = span.get("status") or {}
    status_raw = _obj(status_raw, f"{where}.status")
    code = status_raw.get("code", 0)
    status = {
        "code": _STATUS_CODES.get(code) if isinstance(code, int) else _STATUS_NAMES.get(code, "unset"),
        "message": _text(status_raw.get("message")),
    }
    if status["code"] is None:
        status["code"] = "unset"
    kind = span.get("kind", 0)
    out: dict[str, Any] = {
        "trace_id": trace_id,
        "span_id": span_id,
        "parent_span_id": parent or None,
        "name": _text(span.get("name")),
        "kind": _SPAN_KINDS.get(kind, "unspecified")
        if isinstance(kind, int)
        else _SPAN_KIND_NAMES.get(kind, "unspecified"),
        "start_ns": _ns(span.get("startTimeUnixNano"), f"{where}.startTimeUnixNano"),
        "end_ns": _ns(span.get("endTimeUnixNano"), f"{where}.endTimeUnixNano"),
        "attributes": _attributes(span.get("attributes"), where),
        "events": [],
        "links": [],
        "status": status,
        "resource": resource,
        "scope": scope,
    }
    events = span.get("events")
    if events:
        for j, event in enumerate(_list(events, f"{where}.events")):
            event = _camel(_obj(event, f"{where}.events[{j}]"))
            out["events"].append(
                {
                    "name": _text(event.get("name")),
                    "time_ns": _ns(event.get("timeUnixNano"), f"{where}.events[{j}].timeUnixNano"),
                    "attributes": _attributes(event.get("attributes"), f"{where}.events[{j}]"),
                }
            )
    links = span.get("links")
    if links:
        for j, link in enumerate(_list(links, f"{where}.links")):
            link = _camel(_obj(link, f"{where}.links[{j}]"))
            out["links"].append(
                {
                    "trace_id": _flat_id(link.get("traceId"), 32, f"{where}.links[{j}].traceId", required=False),
                    "span_id": _flat_id(link.get("spanId"), 16, f"{where}.links[{j}].spanId", required=False),
                    "attributes": _attributes(link.get("attributes"), f"{where}.links[{j}]"),
                }
            )
    dropped = {
        name: count
        for name, key in (
            ("attributes", "droppedAttributesCount"),
            ("events", "droppedEventsCount"),
            ("links", "droppedLinksCount"),
        )
        if isinstance(count := span.get(key), int) and count > 0
    }
    if dropped:
        out["dropped"] = dropped
    return out


def _flat_id(value: Any, hex_len: int, where: str, *, required: bool) -> str:
    """Ids here come from decode_otlp (lowercase hex); hex in other cases and base64 are accepted as well."""
    if isinstance(value, str) and len(value) == hex_len and value.islower() and value.isalnum():
        try:
            int(value, 16)
        except ValueError:
            pass
        else:
            if required and value.strip("0") == "":
                raise ConversionError(f"{where} is all zeros, which OTLP defines as invalid")
            return value
    return _json_id(value, hex_len // 2, where, required=required)


def _ns(value: Any, where: str) -> int:
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif (isinstance(value, str) and value.isdigit()) or (isinstance(value, float) and value.is_integer()):
        number = int(value)
    else:
        raise ConversionError(f"{where} must be an integer number of nanoseconds, got {str(value)[:40]!r}")
    if not 0 <= number < 2**64:
        raise ConversionError(f"{where} is out of range for a uint64")
    return number


def _text(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        value = str(value)
    return _storable(value)


def _storable(text: str) -> str:
    """Text the store can hold: NUL and lone UTF-16 surrogates (which JSON may carry) become U+FFFD."""
    if text.isascii() and "\x00" not in text:  # most texts, without the search (ASCII holds no surrogate)
        return text
    return _UNSTORABLE.sub("\ufffd", text) if _UNSTORABLE.search(text) else text


def _attributes(kvs: Any, where: str) -> dict[str, Any]:
    if not kvs:
        return {}
    if not isinstance(kvs, list):
        raise ConversionError(f"{where}.attributes must be a list of {{key, value}}, got {_json_type(kvs)}")
    out: dict[str, Any] = {}
    for kv in kvs:
        if not isinstance(kv, dict):
            raise ConversionError(f"{where}.attributes holds a {_json_type(kv)}, not a {{key, value}} object")
        key = kv.get("key")
        if not isinstance(key, str):
            raise ConversionError(f"{where}.attributes holds an attribute without a string key")
        out[_storable(key)] = _any_value(kv.get("value"), f"{where}.attributes[{key[:60]!r}]", 0)
    return out


def _any_value(value: Any, where: str, depth: int) -> Any:
    """An AnyValue (OTLP JSON mapping) as a plain Python value; an empty AnyValue is None."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ConversionError(f"{where} must be an AnyValue object, got {_json_type(value)}")
    if not value:
        return None
    (key, inner), *rest = value.items()
    if rest:
        raise ConversionError(f"{where} holds more than one value ({', '.join(sorted(value))[:80]})")
    if key in ("stringValue", "string_value"):
        if not isinstance(inner, str):
            raise ConversionError(f"{where}.stringValue must be a string")
        return _storable(inner)
    if key in ("intValue", "int_value"):
        if isinstance(inner, bool) or not isinstance(inner, (int, str)):
            raise ConversionError(f"{where}.intValue must be an integer")
        try:
            number = int(inner)
        except ValueError:
            raise ConversionError(f"{where}.intValue must be an integer, got {str(inner)[:40]!r}") from None
        if not -(2**63) <= number < 2**63:
            raise ConversionError(f"{where}.intValue is out of range for an int64")
        return number
    if key in ("boolValue", "bool_value"):
        if not isinstance(inner, bool):
            raise ConversionError(f"{where}.boolValue must be true or false")
        return inner
    if key in ("doubleValue", "double_value"):
        if isinstance(inner, bool):
            raise ConversionError(f"{where}.doubleValue must be a real")
        if isinstance(inner, (int, float)):
            real = float(inner)
            return (
                real if math.isfinite(real) else ("NaN" if real != real else ("Infinity" if real > 0 else "-Infinity"))
            )
        if inner in ("NaN", "Infinity", "-Infinity"):
            return inner
        raise ConversionError(f"{where}.doubleValue must be a real")
    if depth >= MAX_ANY_DEPTH:
        raise ConversionError(f"{where} is nested deeper than {MAX_ANY_DEPTH} levels")
    if key in ("arrayValue", "array_value"):
        items = _obj(inner, f"{where}.arrayValue").get("values") or []
        return [_any_value(item, f"{where}[{i}]", depth + 1) for i, item in enumerate(_list(items, f"{where}.values"))]
    if key in ("kvlistValue", "kvlist_value"):
        items = _obj(inner, f"{where}.kvlistValue").get("values") or []
        out: dict[str, Any] = {}
        for kv in _list(items, f"{where}.values"):
            kv = _obj(kv, f"{where}.values[]")
            name = kv.get("key")
            if not isinstance(name, str):
                raise ConversionError(f"{where}.kvlistValue holds an entry without a string key")
            out[_storable(name)] = _any_value(kv.get("value"), f"{where}.{name[:60]}", depth + 1)
        return out
    if key in ("bytesValue", "bytes_value"):
        if not isinstance(inner, str):
            raise ConversionError(f"{where}.bytesValue must be base64 text")
        return inner
    raise ConversionError(f"{where} has an unknown value type {key[:40]!r}")


# ------------------------------------------------------------------------------------------------- recognition


def looks_like_otlp(data: bytes) -> str | None:
    """ "json" for an OTLP/JSON trace export, "protobuf" for an ExportTraceServiceRequest in protobuf, else None.

    JSON: an object whose first 64 KiB name `resourceSpans` (or `resource_spans`) as a list. Protobuf is only tried
    on bytes that start as that message does (field 1, length-delimited: 0x0a) and is taken only when it parses,
    holds at least one span, and every span has a 16-byte trace id and an 8-byte span id: random bytes, zips,
    gzip and text fail one of these."""
    if not data:
        return None
    head = data[: 64 * 1024].lstrip(b"\xef\xbb\xbf \t\r\n")
    if head[:1] == b"{":
        text = head.decode("utf-8", errors="replace")
        return "json" if re.search(r'"resource_?[sS]pans"\s*:\s*\[', text) else None
    if data[:1] != b"\x0a":
        return None
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError):
        return None
    spans = 0
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                if len(span.trace_id) != 16 or len(span.span_id) != 8 or not any(span.trace_id):
                    return None
                spans += 1
    return "protobuf" if spans else None


# -------------------------------------------------------------------------------------------------- conversion


def convert_otlp(body: bytes, *, content_type: str) -> list[ConvertedRun]:
    """A whole OTLP file or request: one run per trace id, in the order the traces first appear."""
    return list(iter_convert_otlp(body, content_type=content_type))


def iter_convert_otlp(body: bytes, *, content_type: str) -> Iterator[ConvertedRun]:
    """As `convert_otlp`, one run at a time: a trace's run is built only when the caller asks for it, and the
    trace's spans are let go once it is, so that a caller importing each run before asking for the next holds one
    converted trace at a time, not the whole file's (a 100,000-span file: ~200,000 events). A protobuf file's
    spans are flattened trace by trace too (`_proto_traces`)."""
    media_name = content_type.split(";", 1)[0].strip().lower()
    protobuf = media_name in ("application/x-protobuf", "application/protobuf", "application/vnd.google.protobuf")
    with _bulk():
        if protobuf:
            request = _parse_proto(body)
            traces: list[list[Any]] = list(_proto_traces(request).values())
        else:
            traces = list(iter_traces(flatten_spans(decode_otlp(body, content_type=content_type))))
    if not traces:
        raise ConversionError("the OTLP export holds no spans")
    # The original is kept by every run of the file: walked and hashed once, not once per trace.
    kept = len(body) <= MAX_ORIGINAL_BLOB_BYTES
    with _bulk():
        ranges = span_byte_ranges(body) if kept and protobuf else None
    digest = digest_bytes(body) if kept else None
    traces.reverse()
    while traces:
        spans = traces.pop()  # let go of as its run is made
        if protobuf:
            with _bulk():
                spans = _flat_proto_spans(spans, request)
        yield convert_trace(
            spans,
            original=body,
            original_media_type=PROTOBUF if protobuf else JSON_TYPE,
            span_bytes=ranges,
            original_digest=digest,
        )


def convert_trace(
    spans: list[dict[str, Any]],
    *,
    original: bytes | None = None,
    original_media_type: str = PROTOBUF,
    span_bytes: dict[tuple[str, str], SpanBytes] | None = None,
    original_digest: str | None = None,
) -> ConvertedRun:
    """One trace's flat spans (from `flatten_spans`, all with one trace id) -> one run.

    `original`: the file or request bytes, kept as a blob of the run (role `source-otlp`) up to
    MAX_ORIGINAL_BLOB_BYTES. Every span stays viewable from its events: by its byte range in a kept protobuf
    original (`span_bytes`, from `span_byte_ranges(original)`: computed here when not given), else as JSON in
    `source-trace` blobs. `original_digest`: the original's digest, when the caller has it (a file of many traces)."""
    if not spans:
        raise ConversionError("a trace with no spans cannot become a run")
    with _bulk():
        return _TraceConverter(spans, original, original_media_type, span_bytes, original_digest).convert()


@contextmanager
def _bulk() -> Iterator[None]:
    """The cyclic garbage collector paused while a conversion builds its (acyclic) dicts: with hundreds of
    thousands of live objects, its repeated full passes cost more than the conversion itself (measured: 100,000
    spans in 10.3 s with it, 8.3 s without, before the direct protobuf path)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Span:
    """A flat span and what the walk learns about it."""

    __slots__ = ("attrs", "blob", "depth", "index", "order", "parent", "raw", "ref", "role", "used", "used_prefixes")

    def __init__(self, raw: dict[str, Any], index: int):
        self.raw = raw
        self.index = index
        self.attrs: dict[str, Any] = raw["attributes"]
        self.depth = 0
        self.parent: _Span | None = None
        self.order = 0
        self.blob = ""
        self.used: set[str] = set()
        self.used_prefixes: list[str] = []
        self.role = ""
        self.ref: dict[str, str] = {}

    @property
    def hex(self) -> str:
        return str(self.raw["span_id"])

    @property
    def name(self) -> str:
        return str(self.raw["name"])

    def take(self, key: str) -> Any:
        """The attribute's value, marking it mapped."""
        value = self.attrs.get(key)
        if value is not None:
            self.used.add(key)
        return value

    def where(self) -> str:
        return f"span {_one_line(self.name, 80)!r} ({self.hex})"


class _TraceConverter:
    def __init__(
        self,
        spans: list[dict[str, Any]],
        original: bytes | None,
        original_media_type: str,
        span_bytes: dict[tuple[str, str], SpanBytes] | None = None,
        original_digest: str | None = None,
    ):
        trace_id = spans[0].get("trace_id")
        self.trace_id = str(trace_id)
        self.report = ConversionReport("otlp")
        self.spans: list[_Span] = []
        seen: dict[str, _Span] = {}
        duplicates = 0
        for i, raw in enumerate(spans):
            if not isinstance(raw, dict) or "span_id" not in raw or "attributes" not in raw:
                raise ConversionError(f"spans[{i}] is not a flat span (from flatten_spans)")
            if raw.get("trace_id") != trace_id:
                raise ConversionError(
                    f"spans[{i}] belongs to trace {raw.get('trace_id')}, not {trace_id}: one run is one trace"
                )
            if raw["span_id"] in seen:
                # An exporter that retried, or a file concatenated twice: the first copy is mapped, every copy kept.
                duplicates += 1
                continue
            span = _Span(raw, i)
            seen[raw["span_id"]] = span
            self.spans.append(span)
        if duplicates:
            self.report.unmapped["duplicate span (same span id; the first is mapped, all are kept)"] += duplicates
        self.by_id = seen
        self.original = original
        self.original_media_type = original_media_type
        self.span_bytes = span_bytes
        self.known_original_digest = original_digest
        # (sort key, event) pairs; the key orders them, seq and times come after sorting.
        self.pending: list[tuple[tuple[int, int, int, int, int], dict[str, Any]]] = []
        self.ids: set[str] = set()
        self.attempt = "attempt-1"
        self.workspace_default: str | None = None
        self.charged_below: set[int] = set()

    # ---- the run

    def convert(self) -> ConvertedRun:
        self._link_tree()
        ordered = sorted(self.spans, key=lambda s: (s.raw["start_ns"], s.depth, s.index))
        for order, span in enumerate(ordered):
            span.order = order
        self.ordered = ordered
        self.root = next((s for s in ordered if s.parent is None), ordered[0])
        self.run = self._run_object()
        self.converted = ConvertedRun(self.run, [], self.report)
        self._keep_sources()
        self._mark_usage()
        self._attempt_start()
        for span in ordered:
            self._map_span(span)
        self._attempt_end()
        for span in ordered:
            self._count_unmapped(span)
        self._finish()
        return self.converted

    def _link_tree(self) -> None:
        orphans = 0
        for span in self.spans:
            parent_id = span.raw.get("parent_span_id")
            if parent_id:
                span.parent = self.by_id.get(parent_id)
                if span.parent is None:
                    orphans += 1
        # Depth by walking up once per span, memoised; a cycle (a corrupt export) is cut where it closes.
        depth: dict[int, int] = {}
        for span in self.spans:
            while True:
                chain: list[_Span] = []
                on_chain: set[int] = set()
                node: _Span | None = span
                while node is not None and node.index not in depth and node.index not in on_chain:
                    chain.append(node)
                    on_chain.add(node.index)
                    node = node.parent
                if node is not None and node.index in on_chain:
                    node.parent = None
                    self.report.notes.append(f"{node.where()} is its own ancestor (a corrupt export): read as a root")
                    continue
                base = depth[node.index] + 1 if node is not None else 0
                for offset, item in enumerate(reversed(chain)):
                    depth[item.index] = base + offset
                break
        for span in self.spans:
            span.depth = depth.get(span.index, 0)
        if orphans:
            self.report.notes.append(
                f"{orphans} span{'s name' if orphans != 1 else ' names'} a parent the trace does not hold "
                "(not received, or not ended): read as roots"
            )

    def _run_object(self) -> dict[str, Any]:
        root = self.root
        resource = root.raw["resource"]

        def run_attr(key: str) -> Any:
            value = root.take(key)
            if value is None:
                value = resource.get(key)
            return value

        run_id = run_attr(N17Q_RUN_ID)
        if run_id is None:
            run_id = f"otlp-{self.trace_id}"
        problem = run_id_problem(run_id)
        if problem is not None:
            raise ConversionError(f"{root.where()}: attribute {N17Q_RUN_ID} {problem}")
        agent_name = _str_or_none(self._first_attr(GEN_AI_AGENT_NAME)) or _str_or_none(self._first_attr(OI_AGENT_NAME))
        title = run_attr(N17Q_RUN_TITLE)
        if title is not None:
            problem = title_problem(title)
            if problem is not None:
                raise ConversionError(f"{root.where()}: attribute {N17Q_RUN_TITLE} {problem}")
            title = title.strip()
        else:
            title = _one_line(root.name or agent_name or f"OpenTelemetry trace {self.trace_id}", 300)
        task = run_attr(N17Q_TASK_ID)
        if not isinstance(task, str) or not task:
            service = resource.get("service.name")
            task = (
                agent_name or (service if isinstance(service, str) and service else None) or root.name or "otlp-trace"
            )
        revision = run_attr(N17Q_TASK_REVISION)
        if revision is None:
            revision = self._first_attr(GEN_AI_AGENT_VERSION) or "unknown"
        policy = run_attr(N17Q_POLICY_REVISION)
        model_name, model_version = self._model()
        created = min(s.raw["start_ns"] for s in self.spans)
        return {
            "id": run_id,
            "title": title,
            "task": {"id": _one_line(task, 200), "revision": _one_line(revision, 200)},
            "environment": "live",
            "mode": "recorded",
            "scenario": None,
            "model": {"name": model_name, "version": model_version},
            "policy_revision": _one_line(policy, 200) if isinstance(policy, str) and policy else "otlp:none",
            "created_at": _iso(created),
            "parent_run": None,
        }

    def _first_attr(self, key: str) -> Any:
        for span in self.ordered:
            value = span.attrs.get(key)
            if value is not None:
                return value
        return None

    def _model(self) -> tuple[str, str]:
        for span in self.ordered:
            if _role(span.attrs) == "model":
                name = span.attrs.get(GEN_AI_REQUEST_MODEL) or span.attrs.get(OI_MODEL_NAME)
                version = span.attrs.get(GEN_AI_RESPONSE_MODEL) or name
                if isinstance(name, str) and name:
                    return _one_line(name, 200), _one_line(version if isinstance(version, str) else name, 200)
        return "unknown", "unknown"

    def _keep_sources(self) -> None:
        """Keep every span viewable from its events, once: the original whole (when it may be a blob), each event
        naming its span's byte range in it; else (a JSON original, one too large, no original, or a protobuf laid
        out so that a range cannot stand for a span) the spans as JSON in source-trace blobs."""
        self.original_digest: str | None = None
        if self.original is not None:
            if len(self.original) <= MAX_ORIGINAL_BLOB_BYTES:
                self.original_digest = self.converted.add_blob(
                    self.original, self.original_media_type, "source-otlp", digest=self.known_original_digest
                )
            else:
                self.report.notes.append(
                    f"the original export ({len(self.original)} bytes) is larger than a blob may be "
                    f"({MAX_ORIGINAL_BLOB_BYTES} bytes): not kept whole; every span is kept in the source-trace blobs"
                )
        if self.original_digest is not None and self.original_media_type == PROTOBUF and self._refs_into_original():
            return
        self._keep_spans_as_json()

    def _refs_into_original(self) -> bool:
        """Name each span by its byte range in the kept protobuf original; False (nothing named) when a span of the
        trace is not found there (the spans did not come from these bytes)."""
        ranges = self.span_bytes
        if ranges is None:
            assert self.original is not None
            ranges = span_byte_ranges(self.original)
            if ranges is None:
                return False
        located = []
        for span in self.spans:
            at = ranges.get((self.trace_id, span.hex))
            if at is None:
                return False
            located.append((span, at))
        for span, at in located:
            # Ranges as "offset+length" text: two hundred thousand events parse three short strings faster than
            # three lists of two numbers each (and the lineage reader walks fewer nodes).
            ref: dict[str, Any] = {"span": span.hex, "blob": self.original_digest, "bytes": byte_range_text(at.span)}
            if at.resource is not None:
                ref["resource_bytes"] = byte_range_text(at.resource)
            if at.scope is not None:
                ref["scope_bytes"] = byte_range_text(at.scope)
            span.ref = ref
            span.blob = self.original_digest or ""
        return True

    def _keep_spans_as_json(self) -> None:
        """The spans as JSON, cut into blobs of about SOURCE_CHUNK_BYTES; each span learns the blob that holds it."""
        chunk: list[bytes] = []
        members: list[_Span] = []
        resources: dict[int, tuple[str, dict[str, Any]]] = {}
        size = 0

        def flush() -> None:
            nonlocal chunk, members, resources, size
            if not members:
                return
            head = {"trace_id": self.trace_id, "resources": {key: value for key, value in resources.values()}}
            data = canonical_json(head)[:-1] + b',"spans":[\n' + b",\n".join(chunk) + b"\n]}"
            digest = self.converted.add_blob(data, "application/json", "source-trace")
            for member in members:
                member.blob = digest
            chunk, members, resources, size = [], [], {}, 0

        for span in self.ordered:
            raw = span.raw
            res = raw["resource"]
            entry = resources.get(id(res))
            if entry is None:
                entry = (f"r{len(resources)}", res)
                resources[id(res)] = entry
            body = {key: value for key, value in raw.items() if key != "resource"}
            body["resource"] = entry[0]
            line = canonical_json(body)
            chunk.append(line)
            members.append(span)
            size += len(line)
            if size >= SOURCE_CHUNK_BYTES:
                flush()
        flush()
        for span in self.spans:
            span.ref = {"span": span.hex, "blob": span.blob}

    def _mark_usage(self) -> None:
        """Which spans have a model span below them that charges tokens: an agent span's usage is the sum of its
        model calls, and charging both would count the tokens twice."""
        for span in self.spans:
            if _role(span.attrs) in ("model", "embedding") and _usage(span.attrs) is not None:
                node = span.parent
                while node is not None and node.index not in self.charged_below:
                    self.charged_below.add(node.index)
                    node = node.parent

    # ---- writing events

    def _emit(
        self,
        span: _Span,
        kind: str,
        fields: dict[str, Any],
        *,
        at_end: bool = False,
        at_ns: int | None = None,
        sub: int = 0,
        suffix: str,
        mapped: str,
        event_id: str | None = None,
    ) -> str:
        raw = span.raw
        if at_ns is not None:
            when = min(max(at_ns, raw["start_ns"]), max(raw["end_ns"], raw["start_ns"]))
            key = (when, 0, span.depth, span.order, 10 + sub)
        elif at_end:
            when = max(raw["end_ns"], raw["start_ns"])
            key = (when, 1, -span.depth, span.order, sub)
        else:
            when = raw["start_ns"]
            key = (when, 0, span.depth, span.order, sub)
        event_id = event_id or f"{span.hex}.{suffix}"
        if event_id in self.ids:
            raise ConversionError(f"{span.where()}: event id {event_id!r} is used twice in the trace")
        self.ids.add(event_id)
        event = {"id": event_id, "kind": kind, "attempt": self.attempt, "_ns": when, **fields}
        event.setdefault("otlp", span.ref)
        self.pending.append((key, event))
        self.report.mapped[mapped] += 1
        return event_id

    def _finish(self) -> None:
        self.pending.sort(key=lambda item: item[0])
        events = self.converted.events
        proposals_by_call: dict[str, str] = {}
        open_calls_by_tool: dict[str, list[str]] = {}
        for seq, (_key, event) in enumerate(self.pending, start=1):
            when = _iso(event.pop("_ns"))
            out = {"seq": seq, "id": event.pop("id"), "kind": event.pop("kind"), "at": {"logical": when, "wall": when}}
            out["attempt"] = event.pop("attempt")
            calls = event.pop("_proposed", None)
            call = event.pop("_call", None)
            out.update(event)
            if calls:
                for call_id, tool in calls:
                    if call_id:
                        proposals_by_call[call_id] = out["id"]
                    if tool:
                        open_calls_by_tool.setdefault(tool, []).append(out["id"])
            if out["kind"] == "tool.call" and out.get("proposal_id") is None and call is not None:
                call_id, tool = call
                proposal = proposals_by_call.pop(call_id, None) if call_id else None
                if proposal is None and not call_id:
                    # No call id on the span: the latest earlier proposal of this tool is the one it ran.
                    waiting = open_calls_by_tool.get(tool)
                    proposal = waiting.pop() if waiting else None
                out["proposal_id"] = proposal
            events.append(out)

    # ---- the attempt

    def _attempt_start(self) -> None:
        root = self.root
        fields: dict[str, Any] = {
            "number": 1,
            "reason": _one_line(f"OpenTelemetry trace {self.trace_id}, root span {root.name!r}", MAX_TEXT_CHARS),
            "parent_attempt_id": None,
            "trace": self.trace_id,
            "root_span": root.hex,
            "spans": len(self.spans),
        }
        if self.original_digest is not None:
            fields["source_blob"] = self.original_digest
        agent = self._agent_fields(root)
        if agent:
            fields["agent"] = agent
        conversation = root.take(GEN_AI_CONVERSATION_ID) or root.take(OI_SESSION_ID)
        if conversation is not None:
            fields["conversation"] = _scalar_text(conversation)
        self._emit(
            root,
            "attempt.started",
            fields,
            sub=-2,
            suffix="attempt",
            mapped="root span -> attempt.started",
            event_id="attempt-1.started",
        )

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

    def _attempt_end(self) -> None:
        root = self.root
        error = self._error(root)
        if error is not None:
            state, outcome = "failed", "error"
            reason = _one_line(
                f"the root span ended in an error: {error.get('message') or error.get('type')}", MAX_TEXT_CHARS
            )
        else:
            state, outcome, reason = "completed", "completed", "the root span ended"
        self._emit(
            root,
            "run.state",
            {"state": state, "reason": reason},
            at_end=True,
            sub=1000,
            suffix="state",
            mapped="root span end -> run.state",
            event_id="run.state",
        )
        fields: dict[str, Any] = {"outcome": outcome}
        if error is not None:
            fields["error"] = error
        self._emit(
            root,
            "attempt.ended",
            fields,
            at_end=True,
            sub=1001,
            suffix="attempt-end",
            mapped="root span end -> attempt.ended",
            event_id="attempt-1.ended",
        )

    def _error(self, span: _Span) -> dict[str, Any] | None:
        """{type, message} when the span ended in an error (status ERROR, or an `error.type`), else None."""
        status = span.raw["status"]
        error_type = span.take(ERROR_TYPE)
        if status["code"] != "error" and error_type is None:
            return None
        out: dict[str, Any] = {"type": _scalar_text(error_type) if error_type is not None else None}
        message = status["message"] or None
        for event in span.raw["events"]:
            if event["name"] == EXCEPTION_EVENT:
                attrs = event["attributes"]
                out["type"] = out["type"] or _str_or_none(attrs.get("exception.type"))
                message = message or _str_or_none(attrs.get("exception.message"))
                break
        out["message"] = _one_line(message, MAX_TEXT_CHARS) if message else None
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
        fields["_proposed"] = [
            (
                c.get("call") if isinstance(c.get("call"), str) else None,
                c.get("tool") if isinstance(c.get("tool"), str) else None,
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
        arguments = span.take(GEN_AI_TOOL_ARGUMENTS)
        schema = None
        if arguments is None and attrs.get(OI_INPUT_VALUE) is not None:
            arguments = span.take(OI_INPUT_VALUE)
            if span.take(OI_INPUT_MIME_TYPE) == OI_MIME_JSON or isinstance(arguments, str):
                arguments = _parse_json_text(arguments) if isinstance(arguments, str) else arguments
        if attrs.get(OI_TOOL_PARAMETERS) is not None:
            schema = span.take(OI_TOOL_PARAMETERS)
            schema = _parse_json_text(schema) if isinstance(schema, str) else schema
            if arguments is None:
                # Some instrumentations put the call's arguments here rather than the tool's parameter schema.
                arguments = schema
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
        call_event = self._emit(span, "tool.call", fields, suffix="call", mapped=self._label(span, "tool.call"))
        self._tool_result(span, call_event)

    def _tool_result(self, span: _Span, call_event: str) -> None:
        error = self._error(span)
        outcome = self._outcome(span, error)
        result = span.take(GEN_AI_TOOL_RESULT)
        media = None
        if result is None and span.attrs.get(OI_OUTPUT_VALUE) is not None:
            result = span.take(OI_OUTPUT_VALUE)
            media = span.take(OI_OUTPUT_MIME_TYPE)
        fields: dict[str, Any] = {"call_id": call_event, "origin": "historical", "outcome": outcome, "absent": {}}
        if result is None:
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

    # ---- helpers

    def _inline_or_blob(self, fields: dict[str, Any], name: str, value: Any, role: str) -> None:
        if len(canonical_json(value)) <= INLINE_PAYLOAD_BYTES:
            fields[name] = value
        else:
            fields[f"{name}_blob"] = self.converted.add_json_blob(value, role)

    def _count_unmapped(self, span: _Span) -> None:
        used, prefixes = span.used, tuple(span.used_prefixes)
        unmapped = self.report.unmapped
        for key in span.attrs:
            if key in used or (prefixes and key.startswith(prefixes)):
                continue
            unmapped[f"span attribute {_INDEX.sub('.N', key)}"] += 1
        if span.raw["links"]:
            unmapped["span link"] += len(span.raw["links"])
        if span.role == "other" and not _is_command(span.attrs) and span.used <= _MARKERS and span is not self.root:
            unmapped["span without a mapped convention (kept in the run's source blobs)"] += 1


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


def _parse_json_text(value: str) -> Any:
    """A JSON string as its value, or the string itself when it is not JSON."""
    stripped = value.lstrip()
    if stripped[:1] in ("{", "[", '"') or stripped in ("true", "false", "null") or stripped[:1].isdigit():
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


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _scalar_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _one_line(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else _scalar_text(value)
    line = _NOT_ONE_LINE.sub(" ", text).strip()
    return line if len(line) <= limit else line[: limit - 1] + "\u2026"


_SECOND_CACHE: dict[int, str] = {}


def _iso(ns: int) -> str:
    """Nanoseconds since the epoch as ISO-8601 UTC with microseconds (the bundle's time form)."""
    seconds, rest = divmod(ns, 1_000_000_000)
    base = _SECOND_CACHE.get(seconds)
    if base is None:
        if len(_SECOND_CACHE) > 4096:
            _SECOND_CACHE.clear()
        base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        _SECOND_CACHE[seconds] = base
    return f"{base}.{rest // 1000:06d}+00:00"


def iter_traces(spans: Iterable[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """Flat spans grouped by trace id, in the order each trace first appears."""
    traces: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        traces.setdefault(span["trace_id"], []).append(span)
    yield from traces.values()


__all__ = [
    "convert_otlp",
    "convert_trace",
    "decode_otlp",
    "flatten_spans",
    "iter_convert_otlp",
    "iter_traces",
    "looks_like_otlp",
]
