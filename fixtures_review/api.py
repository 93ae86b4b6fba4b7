"""REST API for captures under /api/v1/ (DESIGN §7, §8)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiTypes, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.auth import requires_perm, scoped
from accounts.models import HarnessToken

from .intake import CaptureError
from .services import CAPTURE_PERM, capture_stage

MAX_CAPTURE_BYTES = 64 * 1024 * 1024


class RawJsonParser(BaseParser):
    """The body as bytes: intake parses (and refuses) it itself, so the error names the capture's field."""

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        data = stream.read(MAX_CAPTURE_BYTES + 1) if stream is not None else b""
        if len(data) > MAX_CAPTURE_BYTES:
            raise CaptureError(f"the capture is larger than {MAX_CAPTURE_BYTES} bytes")
        return data


class CaptureCollectionApi(APIView):
    """POST a capture (`n17q.capture/1` JSON): it is redacted, scanned and staged for review."""

    parser_classes = [RawJsonParser]
    permission_classes = [requires_perm(CAPTURE_PERM), scoped(HarnessToken.Scope.CAPTURE)]

    @extend_schema(
        request=OpenApiTypes.OBJECT,
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
        try:
            raw = request.data
            result = capture_stage(
                raw=raw if isinstance(raw, bytes | str) else b"",
                user=request.user,
                token=request.auth if isinstance(request.auth, HarnessToken) else None,
            )
        except CaptureError as exc:
            return Response({"error": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        return Response(result.to_json(), status=status.HTTP_201_CREATED)
