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
6 s, more than the whole import's budget (DESIGN §9: a 100,000-span file imported in under 10 s); the walk in
`wire` and `flat` reads the parsed message's fields directly (about 0.5 s) and gives the same dict
(tests/engine/test_format_otlp.py compares it with MessageToDict on the real exporter's output), except that ids are
hex as OTLP/JSON writes them.

Nothing is dropped: every span, whole, is kept in the run's `source-trace` blobs (JSON, a few dozen spans each, so
the event panel can show the one an event came from); every event names its span and that blob in its `otlp`
field; what no mapping reads is counted in `report.unmapped`.

The package's modules, one concern each, each importing only those listed below it (pyproject.toml's import-linter
contract "the OTLP format's modules" holds them to it):

- `mapping`: span -> event mapping for a whole trace (`convert_trace`, `convert_otlp`, `iter_convert_otlp`): the
  run, its originals kept, the attempt, what no mapping read.
- `spans`: what each span maps to (model calls, tool calls, command receipts, `n17q.*` span events).
- `events`: writing the run's events (the converter's state, `_emit`, `_finish`); `conventions`: the attribute
  names of GenAI, OpenInference, `process.*` and `n17q.*`, and the reading of each convention's attributes.
- `sources`: where each span sits in a protobuf original (the fast field walk, `span_byte_ranges`) and a span read
  back from there or from a source-trace blob; `scan`: the texts of a protobuf original for the secret scan
  (`otlp_strings`).
- `flat`: flat spans (`flatten_spans`, the direct protobuf path `flatten_protobuf`, the bounded JSON path
  `flatten_json`, `iter_traces`).
- `wire`: decoding the body (`decode_otlp`), recognising an OTLP file (`looks_like_otlp`).
- `reader`: OTLP/JSON read a piece at a time within caps (`OtlpJsonReader`, issue 35): what `flat.flatten_json`,
  `decode_otlp`, the storage gate's scan of a JSON original and the OTLP/HTTP receiver read, and the caps they share.
- `text`: text forms every step shares.

This module re-exports the names code outside the package uses.
"""

# The names imported below are re-exported (the package's public names, and the two private ones
# tests/engine/test_format_otlp.py reads as otlp._parse_proto and otlp._flat_from_proto), not used here.
# ruff: noqa: F401

from __future__ import annotations

from .conventions import (
    AGENT_OPERATIONS,
    EMBEDDING_OPERATIONS,
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
    GEN_AI_CONVERSATION_ID,
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
    GEN_AI_USAGE_COMPLETION,
    GEN_AI_USAGE_DETAILS,
    GEN_AI_USAGE_INPUT,
    GEN_AI_USAGE_OUTPUT,
    GEN_AI_USAGE_PROMPT,
    MODEL_OPERATIONS,
    N17Q_ATTEMPT,
    N17Q_COMMAND,
    N17Q_CONTRACT_REVISION,
    N17Q_EVENT,
    N17Q_ID,
    N17Q_KIND,
    N17Q_POLICY_REVISION,
    N17Q_RUN_ID,
    N17Q_RUN_TITLE,
    N17Q_TASK_ID,
    N17Q_TASK_REVISION,
    N17Q_TOOL_OUTCOME,
    N17Q_WORKSPACE,
    OI_AGENT,
    OI_AGENT_NAME,
    OI_CHAIN,
    OI_EMBEDDING,
    OI_INPUT_MESSAGES,
    OI_INPUT_MIME_TYPE,
    OI_INPUT_VALUE,
    OI_INVOCATION_PARAMETERS,
    OI_LLM,
    OI_MESSAGE_CONTENT,
    OI_MESSAGE_ROLE,
    OI_MESSAGE_TOOL_CALLS,
    OI_MIME_JSON,
    OI_MODEL_NAME,
    OI_OUTPUT_MESSAGES,
    OI_OUTPUT_MIME_TYPE,
    OI_OUTPUT_VALUE,
    OI_PROVIDER,
    OI_SESSION_ID,
    OI_SPAN_KIND,
    OI_SYSTEM,
    OI_TOKEN_DETAILS_PREFIX,
    OI_TOKENS_COMPLETION,
    OI_TOKENS_PROMPT,
    OI_TOKENS_TOTAL,
    OI_TOOL,
    OI_TOOL_CALL_FUNCTION_ARGUMENTS,
    OI_TOOL_CALL_FUNCTION_NAME,
    OI_TOOL_CALL_ID,
    OI_TOOL_DESCRIPTION,
    OI_TOOL_ID,
    OI_TOOL_NAME,
    OI_TOOL_PARAMETERS,
    PROCESS_COMMAND,
    PROCESS_COMMAND_ARGS,
    PROCESS_COMMAND_LINE,
    PROCESS_EXECUTABLE_NAME,
    PROCESS_EXIT_CODE,
    TOOL_OPERATIONS,
)
from .events import INLINE_PAYLOAD_BYTES, MAX_TEXT_CHARS
from .flat import _flat_from_proto, flatten_json, flatten_protobuf, flatten_spans, iter_traces
from .mapping import MAX_ORIGINAL_BLOB_BYTES, SOURCE_CHUNK_BYTES, convert_otlp, convert_trace, iter_convert_otlp
from .scan import otlp_strings
from .sources import (
    SpanBytes,
    byte_range_text,
    parse_byte_range,
    source_span_from_bytes,
    source_span_from_chunk,
    span_byte_ranges,
)
from .wire import JSON_TYPE, MAX_ANY_DEPTH, PROTOBUF, _parse_proto, decode_otlp, looks_like_otlp

__all__ = [
    "convert_otlp",
    "convert_trace",
    "decode_otlp",
    "flatten_json",
    "flatten_protobuf",
    "flatten_spans",
    "iter_convert_otlp",
    "iter_traces",
    "looks_like_otlp",
]
