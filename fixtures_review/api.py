"""REST API for captures under /api/v1/ (DESIGN §7, §8): captures, recording files (HAR, VCR.py cassettes), and a
run's tool results staged as recordings (docs/formats/recordings.md)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.parsers import BaseParser, FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.auth import READ_RUNS, requires_perm, scoped
from accounts.models import HarnessToken
from console.api_parsers import BoundedJSONParser
from console.upload_budget import UPLOAD_BUDGET_STATUS, BudgetExceeded, upload_budget
from n17q_engine.budget import checkpoint
from runs.models import Run

from . import intake, recordings
from .intake import CaptureError
from .record_policy import RESULT_CLASSES
from .run_staging import STAGE_WHATS, model_tools_parse, run_stage
from .services import (
    CAPTURE_PERM,
    FailedCapture,
    ReviewRefused,
    capture_receive,
    contract_revisions_parse,
    recordings_stage,
)

MAX_CAPTURE_BYTES = 64 * 1024 * 1024


class RawJsonParser(BaseParser):
    """The body as bytes: intake parses (and refuses) it itself, so the error names the capture's field."""

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        data = stream.read(MAX_CAPTURE_BYTES + 1) if stream is not None else b""
        if len(data) > MAX_CAPTURE_BYTES:
            raise CaptureError(f"the capture is larger than {MAX_CAPTURE_BYTES} bytes")
        return data


class RawHarParser(RawJsonParser):
    media_type = "application/har+json"


class RawYamlParser(RawJsonParser):
    """A YAML cassette as bytes (`recordings.load` reads it with a safe loader)."""

    media_type = "application/yaml"


class RawXYamlParser(RawJsonParser):
    media_type = "application/x-yaml"


class RawTextYamlParser(RawJsonParser):
    media_type = "text/yaml"


_HEADERS = {
    "type": "object",
    "additionalProperties": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
    "description": "header name -> value (or values); secret ones (Authorization, cookies, *-token…) are redacted "
    "on intake whatever their value",
}
_BODY = {
    "description": "JSON (any value, null for none), text, or bytes as {encoding, data}; JSON bodies are redacted "
    "by field name at any depth, every string is secret-scanned",
    "anyOf": [
        {"type": "object", "additionalProperties": True},
        {"type": "array", "items": {}},
        {"type": "string"},
        {"type": "number"},
        {"type": "boolean"},
        {
            "type": "object",
            "required": ["encoding", "data"],
            "properties": {
                "encoding": {"type": "string", "enum": list(intake.BODY_ENCODINGS)},
                "data": {"type": "string", "description": "base64 of the bytes (gzip-compressed for gzip+base64)"},
            },
        },
    ],
    "nullable": True,
}
# `n17q.capture/1` (DESIGN §7) as fixtures_review.intake.parse_capture checks it, field by field.
CAPTURE_SCHEMA: dict = {
    "type": "object",
    "title": "n17q.capture/1",
    "additionalProperties": False,
    "required": [
        "format",
        "scenario",
        "tool",
        "contract_revision",
        "connection",
        "captured_at",
        "effect_class",
        "request",
        "response",
        "world_revision",
    ],
    "properties": {
        "format": {"type": "string", "enum": [intake.CAPTURE_FORMAT]},
        "scenario": {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,99}$", "description": "the scenario name"},
        "tool": {"type": "string", "maxLength": 200, "description": "the tool whose response this is"},
        "contract_revision": {"type": "integer", "minimum": 1, "description": "the tool contract's revision"},
        "connection": {"type": "string", "maxLength": 200, "description": "the reviewed connection it came through"},
        "captured_at": {"type": "string", "format": "date-time"},
        "source_revision": {"type": "string", "nullable": True, "description": "the source's own version, if any"},
        "effect_class": {"type": "string", "enum": list(intake.EFFECT_CLASSES)},
        "request": {
            "type": "object",
            "additionalProperties": False,
            "required": ["method", "url", "args"],
            "properties": {
                "method": {"type": "string", "minLength": 1},
                "url": {"type": "string", "minLength": 1, "description": "signed-URL parameters are redacted"},
                "headers": _HEADERS,
                "body": _BODY,
                "args": {
                    "type": "object",
                    "additionalProperties": True,
                    "description": "the tool call's arguments: normalized by the contract, they are the fixture key",
                },
            },
        },
        "response": {
            "type": "object",
            "nullable": True,
            "additionalProperties": False,
            "required": ["status"],
            "properties": {
                "status": {"type": "integer", "minimum": 100, "maximum": 599},
                "headers": _HEADERS,
                "body": _BODY,
            },
        },
        "proposed_transition": {
            "type": "object",
            "nullable": True,
            "additionalProperties": True,
            "description": "for a mutation: the world change it made ({resource, revision_before, revision_after, "
            "change}); must be null for a read",
        },
        "world_revision": {"type": "integer", "minimum": 0, "description": "the world revision it was captured at"},
        # The record policy's additive keys (docs/record-policy.md): resolved from the connection when left out and
        # the connection allows exactly one value.
        "source_class": {"type": "string", "nullable": True, "description": "the source class recorded"},
        "account_scope": {
            "nullable": True,
            "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
            "description": "the one account it was recorded under (several, or a pattern, is refused as ambiguous)",
        },
        "result_class": {
            "type": "string",
            "nullable": True,
            "enum": list(RESULT_CLASSES),
            "description": "how sensitive the result is; the connection's capture policy says which it keeps",
        },
        "capture_failure": {
            "type": "string",
            "nullable": True,
            "description": "the read happened but its response could not be kept: why (then `response` is null); "
            "only the safe request observation is kept and no fixture results",
        },
    },
    # The example of ../shared/examples/capture.json (its token is a placeholder; intake redacts the header anyway).
    "example": {
        "format": "n17q.capture/1",
        "scenario": "docs-research",
        "tool": "status.lookup",
        "contract_revision": 2,
        "connection": "status-service",
        "captured_at": "2026-07-01T09:00:05Z",
        "source_revision": "status@118",
        "effect_class": "read",
        "request": {
            "method": "GET",
            "url": "https://status.example/api/requests/req-7781",
            "headers": {"Accept": "application/json", "Authorization": "Bearer EXAMPLE-NOT-A-REAL-TOKEN"},
            "body": None,
            "args": {"request_id": "req-7781"},
        },
        "response": {"status": 404, "headers": {"Content-Type": "application/json"}, "body": {"error": "not_found"}},
        "proposed_transition": None,
        "world_revision": 4,
    },
}
_RECORDING_FILE = {
    "type": "object",
    "additionalProperties": True,
    "description": "A HAR file (`{log: {entries}}`) or a VCR.py cassette (`{interactions, version}`); the recording "
    "fields in the query string (scenario, tool, contract_revision, effect_class…). See docs/formats/recordings.md.",
}
_REQUEST_JSON = {
    "anyOf": [CAPTURE_SCHEMA, _RECORDING_FILE],
    "description": "An n17q.capture/1 capture (schema and example below), or a HAR file or VCR.py cassette.",
}
_REQUEST_YAML = {"type": "string", "description": "A VCR.py cassette in YAML (its default serializer)."}
_REQUEST_MULTIPART = {
    "type": "object",
    "required": ["file"],
    "properties": {
        "file": {"type": "string", "format": "binary", "description": "the capture, HAR file or cassette"},
        "mapping": {"type": "string", "description": "rules (YAML or JSON) mapping exchanges to tools"},
        "scenario": {"type": "string"},
        "tool": {"type": "string"},
        "contract_revision": {"type": "integer"},
        "effect_class": {"type": "string", "enum": list(intake.EFFECT_CLASSES)},
    },
}


class CaptureCollectionApi(APIView):
    """POST a capture (`n17q.capture/1` JSON), a HAR file or a VCR.py cassette: each capture or exchange is
    redacted, scanned and staged for review. A recording file takes the fields an HTTP exchange cannot say
    (`scenario`, `tool`, `contract_revision`, `effect_class`, optional `connection`, `world_revision`,
    `source_revision`) as form fields or query parameters, or per exchange from a `mapping` (a file or text field,
    YAML or JSON). The answer for a recording file is the first staged exchange's, plus `format`, `recordings` and
    `skipped`."""

    parser_classes = [RawJsonParser, RawHarParser, RawYamlParser, RawXYamlParser, RawTextYamlParser, MultiPartParser]
    permission_classes = [requires_perm(CAPTURE_PERM), scoped(HarnessToken.Scope.CAPTURE)]

    @extend_schema(
        request={
            "application/json": _REQUEST_JSON,
            "application/yaml": _REQUEST_YAML,
            "multipart/form-data": _REQUEST_MULTIPART,
        },
        responses={
            201: inline_serializer(
                "CaptureResult",
                {
                    "staged": serializers.CharField(),
                    "redactions": inline_serializer(
                        "Redaction", {"path": serializers.CharField(), "rule": serializers.CharField()}, many=True
                    ),
                    "findings": inline_serializer(
                        "SecretFinding",
                        {
                            "rule": serializers.CharField(),
                            "path": serializers.CharField(),
                            "preview": serializers.CharField(),
                        },
                        many=True,
                    ),
                    "promotable": serializers.BooleanField(),
                },
            ),
            202: inline_serializer(
                "FailedCaptureResult",
                {
                    "staged": serializers.CharField(allow_null=True),
                    "promotable": serializers.BooleanField(),
                    "observation": serializers.CharField(),
                    "fixture": serializers.CharField(allow_null=True),
                    "note": serializers.CharField(),
                },
            ),
            400: inline_serializer("CaptureError", {"error": serializers.CharField()}),
            422: inline_serializer("CaptureOverBudget", {"error": serializers.CharField()}),
        },
    )
    def post(self, request: Request) -> Response:
        token = request.auth if isinstance(request.auth, HarnessToken) else None
        try:
            with upload_budget("the capture"):
                return self._receive(request, token)
        except BudgetExceeded as exc:
            return Response({"error": str(exc)}, status=UPLOAD_BUDGET_STATUS)

    def _receive(self, request: Request, token: HarnessToken | None) -> Response:
        try:
            try:
                raw, fields, mapping = _capture_input(request)
            except (exceptions.ParseError, exceptions.UnsupportedMediaType) as exc:
                # A malformed multipart body: one line, like every other refusal of this endpoint.
                raise CaptureError(f"the request body cannot be read: {exc.detail}") from None
            checkpoint(now=True)  # the request's budget (console.upload_budget), between reading and parsing
            source = recordings.load(raw)
            checkpoint(now=True)
            if source is None:
                given = sorted(name for name, value in fields.items() if value not in (None, ""))
                if given or mapping is not None:
                    raise CaptureError(
                        "not a HAR file or a VCR cassette, and the recording fields "
                        f"({', '.join(given) or 'mapping'}) apply only to those"
                    )
                answer = capture_receive(raw=raw, user=request.user, token=token)
                if isinstance(answer, FailedCapture):
                    # Accepted as an observation, not staged: nothing of it can become a fixture.
                    return Response(answer.to_json(), status=status.HTTP_202_ACCEPTED)
                result = answer.to_json()
            else:
                result = recordings_stage(
                    source=source, fields=fields, mapping=mapping, user=request.user, token=token
                ).to_json()
        except CaptureError as exc:
            return Response({"error": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        return Response(result, status=status.HTTP_201_CREATED)


def _capture_input(request: Request) -> tuple[bytes, dict[str, str | None], bytes | None]:
    """(the document's bytes, the recording fields, the mapping's bytes or None), from a raw body with the fields in
    the query string, or from a multipart form (`file`, `mapping`, the fields)."""
    data: Any = request.data
    form: Any = {} if isinstance(data, bytes | str) else data
    fields = {name: form.get(name) or request.query_params.get(name) for name in recordings.FLAGS}
    if isinstance(data, bytes | str):
        raw = data if isinstance(data, bytes) else data.encode("utf-8")
        return raw, fields, None
    upload = request.FILES.get("file")
    if upload is None:
        raise CaptureError("file: required, the capture, HAR file or cassette (multipart/form-data)")
    if upload.size is not None and upload.size > MAX_CAPTURE_BYTES:
        raise CaptureError(f"the file is larger than {MAX_CAPTURE_BYTES} bytes")
    raw = upload.read(MAX_CAPTURE_BYTES + 1)
    mapping_upload = request.FILES.get("mapping")
    mapping: bytes | None = None
    if mapping_upload is not None:
        mapping = mapping_upload.read(recordings.MAX_MAPPING_BYTES + 1)
    elif form.get("mapping"):
        mapping = str(form["mapping"]).encode("utf-8")
    return raw, fields, mapping


class RunCaptureApi(APIView):
    """POST: stage a selection of a run's recorded tool results (and/or, `what`, its model calls as `model.chat`
    recordings, with `model_tools` for a trace that recorded no tool definitions) as recordings (the trace as the
    recording), each with its provenance, through the same intake, record policy and four-eyes review as a capture.
    Optional `scenario` (required for a run that names none), `effect_class` (for tools the scenario pins no contract
    for), `contract_revision` (N, "TOOL=N", or a list of them: for calls that record none), and the selection: `tool`,
    `events` (result ids), `subtree` (a span or event id). Each result is staged, skipped or refused on its own
    (`refused` with the reason); a result staged before is listed in `already`, never staged twice. 201 when
    something was staged, else 200."""

    parser_classes = [BoundedJSONParser, FormParser]
    # It stages (captures:create) and answers with the run's contents, its result events and tools: reading a run
    # (READ_RUNS). A capture token, which reads nothing, is refused (issue 33); a person signed in needs both roles.
    permission_classes = [
        requires_perm(CAPTURE_PERM),
        requires_perm("runs.view_run"),
        scoped(HarnessToken.Scope.CAPTURE, READ_RUNS),
    ]

    @extend_schema(
        request=inline_serializer(
            "RunCaptureRequest",
            {
                "scenario": serializers.CharField(required=False),
                "effect_class": serializers.ChoiceField(choices=["read", "mutation"], required=False),
                "tool": serializers.CharField(required=False),
                "connection": serializers.CharField(
                    required=True, help_text="the reviewed connection the run's tool calls went through"
                ),
                "events": serializers.ListField(child=serializers.CharField(), required=False),
                "subtree": serializers.CharField(
                    required=False, help_text="only the results under this span (a span or event id) of the run"
                ),
                "contract_revision": serializers.ListField(
                    child=serializers.CharField(),
                    required=False,
                    help_text="N (every tool) or TOOL=N, for calls that record no contract revision; a single "
                    "integer or string is taken as a list of one",
                ),
                "what": serializers.ChoiceField(
                    choices=list(STAGE_WHATS),
                    required=False,
                    help_text="the run's tool results (default), its model calls (as model.chat recordings), or all",
                ),
                "model_tools": serializers.ListField(
                    child=serializers.DictField(),
                    required=False,
                    help_text="the tools offered to the model, as the agent offers them (OpenAI tool definitions), "
                    "for a trace that did not record them",
                ),
            },
        ),
        responses={
            201: inline_serializer(
                "RunCaptureResult",
                {
                    "run": serializers.CharField(),
                    "scenario": serializers.CharField(),
                    "recordings": serializers.ListField(child=serializers.DictField()),
                    "skipped": serializers.ListField(child=serializers.DictField()),
                    "already": serializers.ListField(child=serializers.DictField()),
                    "refused": serializers.ListField(child=serializers.DictField()),
                },
            ),
            200: inline_serializer(
                "RunCaptureNothingStaged",
                {
                    "run": serializers.CharField(),
                    "scenario": serializers.CharField(),
                    "recordings": serializers.ListField(child=serializers.DictField()),
                    "skipped": serializers.ListField(child=serializers.DictField()),
                    "already": serializers.ListField(child=serializers.DictField()),
                    "refused": serializers.ListField(child=serializers.DictField()),
                },
            ),
            400: inline_serializer("RunCaptureError", {"error": serializers.CharField()}),
            404: inline_serializer("RunCaptureNotFound", {"error": serializers.CharField()}),
        },
    )
    def post(self, request: Request, run_id: str) -> Response:
        run = Run.objects.filter(run_id=run_id).first()
        if run is None:
            return Response({"error": f"no run {run_id!r}"}, status=status.HTTP_404_NOT_FOUND)
        data: Any = request.data
        if not hasattr(data, "get"):
            return Response({"error": "the body must be an object"}, status=status.HTTP_400_BAD_REQUEST)
        events = data.getlist("events") if hasattr(data, "getlist") else data.get("events")
        if events is not None and (not isinstance(events, list) or not all(isinstance(e, str) and e for e in events)):
            return Response({"error": "events: a list of tool.result ids"}, status=status.HTTP_400_BAD_REQUEST)
        revisions = data.getlist("contract_revision") if hasattr(data, "getlist") else data.get("contract_revision")
        if revisions is not None and not isinstance(revisions, list):
            revisions = [revisions]
        text = {}
        for name in ("scenario", "effect_class", "tool", "connection", "subtree"):
            value = data.get(name)
            if value is not None and not isinstance(value, str):
                return Response({"error": f"{name}: a string"}, status=status.HTTP_400_BAD_REQUEST)
            text[name] = value or None
        what = data.get("what") or "tool-results"
        if not isinstance(what, str):
            return Response({"error": "what: a string"}, status=status.HTTP_400_BAD_REQUEST)
        try:
            result = run_stage(
                run=run,
                what=what,
                user=request.user,
                token=request.auth if isinstance(request.auth, HarnessToken) else None,
                events=events or None,
                contract_revisions=contract_revisions_parse(revisions),
                model_tools=model_tools_parse(data.get("model_tools")),
                **text,
            )
        except (ReviewRefused, CaptureError) as exc:
            return Response({"error": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        code = status.HTTP_201_CREATED if result.staged else status.HTTP_200_OK
        return Response(result.to_json(), status=code)
