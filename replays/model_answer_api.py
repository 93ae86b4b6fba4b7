"""`POST /api/v1/replays/<id>/missing/model-answer/` (issue 36, docs/agents.md "Model fixtures"): stage a proposed
answer to the model request a replay stopped on, for review. The API door of `replays.model_answers`, beside the
command `stage_model_answer` and the missing-fixture page's form; kept in its own module (the replays API's other
operations are another module's)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.auth import READ_RUNS, requires_perm, scoped
from accounts.models import HarnessToken
from fixtures_review.model_answers import MAX_ANSWER_BYTES, parse_answer
from fixtures_review.review_rules import CAPTURE_PERM

from .model_answers import ModelAnswerForbidden, ModelAnswerNotFound, ModelAnswerRefused, replay_model_answer_stage

_FIELDS = ("answer", "content", "tool_calls", "copy_similar", "missing")
# The body is an answer and a few fields: a little more than the largest answer, read at most that far.
MAX_BODY_BYTES = MAX_ANSWER_BYTES + 64 * 1024


class BoundedJsonParser(BaseParser):
    """The body as bytes, read at most MAX_BODY_BYTES + 1 far: `parse_answer` parses (and refuses) it in one line,
    a body nested too deeply included (DRF's own JSON parser lets that RecursionError out as a 500)."""

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        return stream.read(MAX_BODY_BYTES + 1) if stream is not None else b""


class ReplayModelAnswerApi(APIView):
    """POST: stage, for review, the exact model request replay `replay_id` stopped on (the normalized request of its
    `model.chat` tool.call) with a proposed answer: typed (`answer`: a chat completion or an assistant message;
    or `content` and/or `tool_calls`, built into a completion) or `copy_similar: true` (the nearest model answer of
    the replay's scenario version; `copied_from` says which). Redacted, scanned and reviewed like any capture;
    approving it (another reviewer) mints the next scenario version, against which the replay gets past the request.
    `missing` picks one of the replay's missing fixtures (default: its model request)."""

    parser_classes = [BoundedJsonParser]
    # It stages (captures:create) and answers with what the replay's run holds (its request's digest, the staged
    # content's findings): reading a run too, as staging a run's results does.
    permission_classes = [
        requires_perm(CAPTURE_PERM),
        requires_perm("runs.view_run"),
        scoped(HarnessToken.Scope.CAPTURE, READ_RUNS),
    ]

    @extend_schema(
        request=inline_serializer(
            "ModelAnswerRequest",
            {
                "answer": serializers.JSONField(
                    required=False,
                    help_text="a chat completion ({choices: [{message}]}) or an assistant message "
                    "({role: assistant, content, tool_calls})",
                ),
                "content": serializers.CharField(required=False, help_text="the assistant's text"),
                "tool_calls": serializers.ListField(
                    child=serializers.DictField(),
                    required=False,
                    help_text="the assistant's tool calls: {name, arguments} or OpenAI tool calls",
                ),
                "copy_similar": serializers.BooleanField(
                    required=False, help_text="copy the nearest model answer of the scenario version instead"
                ),
                "missing": serializers.IntegerField(
                    required=False, min_value=0, help_text="which missing fixture (default: the model request)"
                ),
            },
        ),
        examples=[
            OpenApiExample("typed", value={"content": "The checks failed; I stop before the review request."}),
            OpenApiExample("copied", value={"copy_similar": True}),
        ],
        responses={
            201: inline_serializer(
                "ModelAnswerResult",
                {
                    "staged": serializers.CharField(),
                    "redactions": serializers.ListField(child=serializers.DictField()),
                    "findings": serializers.ListField(child=serializers.DictField()),
                    "promotable": serializers.BooleanField(),
                    "blockers": serializers.ListField(child=serializers.CharField()),
                    "scenario": serializers.CharField(),
                    "tool": serializers.CharField(),
                    "request_digest": serializers.CharField(),
                    "run": serializers.CharField(),
                    "missing": serializers.CharField(),
                    "answer": serializers.ChoiceField(choices=["typed", "copied"]),
                    "copied_from": serializers.DictField(allow_null=True),
                },
            ),
            400: inline_serializer("ModelAnswerError", {"error": serializers.CharField()}),
            403: inline_serializer("ModelAnswerForbidden", {"error": serializers.CharField()}),
            404: inline_serializer("ModelAnswerNotFound", {"error": serializers.CharField()}),
        },
    )
    def post(self, request: Request, replay_id: str) -> Response:
        try:
            raw: Any = request.data
            fields = _fields(parse_answer(raw if isinstance(raw, bytes) else b"", "the body", MAX_BODY_BYTES))
            staged = replay_model_answer_stage(
                replay_id=replay_id,
                user=request.user,
                token=request.auth if isinstance(request.auth, HarnessToken) else None,
                request=request,
                **fields,
            )
        except ModelAnswerNotFound as exc:
            return Response({"error": str(exc)}, status=status.HTTP_404_NOT_FOUND)
        except ModelAnswerForbidden as exc:
            return Response({"error": str(exc)}, status=status.HTTP_403_FORBIDDEN)
        except ModelAnswerRefused as exc:
            return Response({"error": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        return Response(staged.to_json(), status=status.HTTP_201_CREATED)


def _fields(data: Any) -> dict[str, Any]:
    """The request's fields, each of its type; ModelAnswerRefused (400) naming the first that is not."""
    if not isinstance(data, dict):
        raise ModelAnswerRefused("the body must be a JSON object")
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise ModelAnswerRefused(f"{unknown[0]}: not a field of a model answer ({', '.join(_FIELDS)})")
    content = data.get("content")
    if content is not None and not isinstance(content, str):
        raise ModelAnswerRefused("content: text")
    tool_calls = data.get("tool_calls")
    if tool_calls is not None and not isinstance(tool_calls, list):
        raise ModelAnswerRefused("tool_calls: a list of tool calls")
    copy_similar = data.get("copy_similar", False)
    if not isinstance(copy_similar, bool):
        raise ModelAnswerRefused("copy_similar: true or false")
    missing = data.get("missing")
    if missing is not None and (not isinstance(missing, int) or isinstance(missing, bool) or missing < 0):
        raise ModelAnswerRefused("missing: the number of one of the replay's missing fixtures (0 or more)")
    return {
        "answer": data.get("answer"),
        "content": content,
        "tool_calls": tool_calls,
        "copy_similar": copy_similar,
        "index": missing,
    }
