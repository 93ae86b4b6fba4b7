"""REST API for captures under /api/v1/ (DESIGN §7, §8): captures, recording files (HAR, VCR.py cassettes), and a
run's tool results staged as recordings (docs/formats/recordings.md)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.parsers import BaseParser, FormParser, JSONParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.auth import requires_perm, scoped
from accounts.models import HarnessToken
from runs.models import Run

from . import recordings
from .intake import CaptureError
from .services import CAPTURE_PERM, ReviewRefused, capture_stage, recordings_stage, run_recordings_stage

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


_REQUEST = {
    "type": "object",
    "description": "An n17q.capture/1 capture, a HAR file or a VCR.py cassette (JSON or YAML) as the body, the "
    "recording fields in the query string; or multipart/form-data with `file`, optional `mapping` and the fields.",
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
        request={"application/json": _REQUEST, "application/yaml": _REQUEST, "multipart/form-data": _REQUEST},
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
            400: inline_serializer("CaptureError", {"error": serializers.CharField()}),
        },
    )
    def post(self, request: Request) -> Response:
        token = request.auth if isinstance(request.auth, HarnessToken) else None
        try:
            try:
                raw, fields, mapping = _capture_input(request)
            except (exceptions.ParseError, exceptions.UnsupportedMediaType) as exc:
                # A malformed multipart body: one line, like every other refusal of this endpoint.
                raise CaptureError(f"the request body cannot be read: {exc.detail}") from None
            source = recordings.load(raw)
            if source is None:
                given = sorted(name for name, value in fields.items() if value not in (None, ""))
                if given or mapping is not None:
                    raise CaptureError(
                        "not a HAR file or a VCR cassette, and the recording fields "
                        f"({', '.join(given) or 'mapping'}) apply only to those"
                    )
                result = capture_stage(raw=raw, user=request.user, token=token).to_json()
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
    """POST: stage a run's recorded tool results as recordings (the trace as the recording), each with its
    provenance, through the same intake and four-eyes review as a capture. Optional `scenario` (required for a run
    that names none), `effect_class` (for tools the scenario pins no contract for), `tool`, `events` (result ids).
    A result staged before is listed in `already`, never staged twice."""

    parser_classes = [JSONParser, FormParser]
    permission_classes = [requires_perm(CAPTURE_PERM), scoped(HarnessToken.Scope.CAPTURE)]

    @extend_schema(
        request=inline_serializer(
            "RunCaptureRequest",
            {
                "scenario": serializers.CharField(required=False),
                "effect_class": serializers.ChoiceField(choices=["read", "mutation"], required=False),
                "tool": serializers.CharField(required=False),
                "events": serializers.ListField(child=serializers.CharField(), required=False),
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
        text = {}
        for name in ("scenario", "effect_class", "tool"):
            value = data.get(name)
            if value is not None and not isinstance(value, str):
                return Response({"error": f"{name}: a string"}, status=status.HTTP_400_BAD_REQUEST)
            text[name] = value or None
        try:
            result = run_recordings_stage(
                run=run,
                user=request.user,
                token=request.auth if isinstance(request.auth, HarnessToken) else None,
                events=events or None,
                **text,
            )
        except (ReviewRefused, CaptureError) as exc:
            return Response({"error": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        return Response(result.to_json(), status=status.HTTP_201_CREATED)
