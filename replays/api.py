"""REST API for replays under /api/v1/ (issue 36): launch one with the launch form's rule, read its state, read what
it stopped on, and stage an answer to the model request it stopped on. One class per operation; each parses, calls
one service, renders.

Launching is the form's act with the form's rule (replays.confirm): the operator's permission (`runs.launch_replay`),
and a launch goes ahead only with the digest of the summary the server computes now. Reading is a role's, as the
replay pages are (any role reads any replay). A harness token needs `replays:read` to read and `replays:launch` as
well to launch (the launch answers the summary, a reading). Staging a model answer is a capture's act
(`captures:create` and reading runs, the operator or reviewer role), as staging a run's recorded results is.
"""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.generics import get_object_or_404
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.auth import READ_RUNS, requires_perm, scoped
from accounts.models import HarnessToken
from console.api_errors import first_problem
from console.api_parsers import BoundedJSONParser
from console.openapi import ErrorOutput
from fixtures_review.model_answers import MAX_ANSWER_BYTES, parse_answer
from fixtures_review.review_rules import CAPTURE_PERM
from n17q_engine.assessments import DIMENSIONS, AssessmentRefused
from n17q_engine.assessments import SCALE as ASSESSMENT_SCALE
from runs import annotations as annotation_service
from runs import assessments as assessment_service
from runs.api import RUN_ID
from runs.models import Event, Run

from . import model_review as model_review_service
from .confirm import LaunchUnconfirmed, launch_version, replay_launch_confirmed, vary_from_mapping
from .launch import VaryRefused, summary_digest
from .missing import MissingView, missing_fixture_view
from .model_answers import ModelAnswerForbidden, ModelAnswerNotFound, ModelAnswerRefused, replay_model_answer_stage
from .models import Replay
from .services import MODES, ReplayRefused, replay_json
from .trace_scenarios import (
    TraceScenarioRefused,
    trace_scenario_launch,
    trace_scenario_propose,
    trace_scenario_status,
)

LAUNCH, READ = HarnessToken.Scope.LAUNCH_REPLAYS, HarnessToken.Scope.READ_REPLAYS
CAPTURE = HarnessToken.Scope.CAPTURE
LARGEST_ID = 2**63 - 1  # a database's largest id; a larger one finds nothing rather than overflowing the query

REPLAY_ID = OpenApiParameter(
    "replay_id",
    {"type": "integer", "minimum": 1},
    OpenApiParameter.PATH,
    description="the replay's number (`replay` in the launch's answer)",
)


def _replay_or_404(replay_id: str) -> Replay:
    """The replay by its number; anything else in the path (not a number, a number past any id) finds none. The
    route takes any text so that the answer is the API's JSON 404, never the site's page."""
    pk = int(replay_id) if replay_id.isascii() and replay_id.isdigit() else 0
    replay = (
        Replay.objects.select_related("source_run", "scenario_version", "run").filter(pk=pk).first()
        if 0 < pk <= LARGEST_ID
        else None
    )
    if replay is None:
        raise exceptions.NotFound(f"no replay {replay_id!r}")
    return replay


def stop_reason(replay: Replay) -> str | None:
    """Why the replay ended as it did: the launcher's error (refused, failed, interrupted), else the reason its
    run's final `run.state` gives (completed, incomplete test world…); None while it has not ended."""
    if replay.error:
        return replay.error
    if replay.run is None:
        return None
    body = (
        Event.objects.filter(run=replay.run, kind="run.state").order_by("-seq").values_list("body", flat=True).first()
    )
    reason = (body or {}).get("reason")
    return str(reason) if reason else None


def replay_answer(replay: Replay) -> dict[str, Any]:
    """`replay --json`'s shape (DESIGN §8), with keys added: where it came from and what it was asked to do, why
    it stopped, and where to read it."""
    answer = replay_json(replay)
    answer.update(
        source_run=replay.source_run.run_id,
        checkpoint=replay.checkpoint,
        decider=replay.decider,
        model_connection=dict(replay.model_connection) or None,
        ended=replay.ended,
        stop_reason=stop_reason(replay),
        summary_digest=summary_digest(replay.environment),
        created_at=replay.created_at.isoformat() if replay.created_at else None,
        url=reverse("api-replay", args=[replay.pk]),
        page=reverse("replays:replay-detail", args=[replay.pk]),
        missing_url=reverse("api-replay-missing", args=[replay.pk]),
    )
    return answer


def missing_answer(view: MissingView) -> dict[str, Any]:
    """One missing fixture as the missing-fixture page shows it (replays.missing), every value as stored (secrets
    the scan masked stay masked)."""
    record, call = view.record, view.call
    answers = view.answers
    return {
        "index": view.index,
        "page": reverse("replays:missing-fixture", args=[view.replay.pk, view.index]),
        "kind": record.get("kind") or "fixture.missing",
        "event": record.get("id"),
        "tool": record.get("tool"),
        "contract_revision": record.get("contract_revision"),
        "contract": view.contract,
        "request_digest": record.get("request_digest"),
        # The request the replay stopped on, as its run holds it: the call's, normalized by the contract (the key a
        # fixture is looked up by; for model.chat the chat request: model, messages, tools, parameters); for a call
        # stopped before its lookup (no contract, a request that does not fit) the one the missing record carries.
        "request": view.request,
        "call": record.get("call_id"),
        "workspace": (call or {}).get("workspace_id"),
        "world_revision": record.get("world_revision"),
        "checkpoint": record.get("checkpoint_id"),
        "scenario": record.get("scenario"),
        "reason": record.get("reason"),
        "candidates": record.get("candidates") or [],
        "excluded_reason": view.excluded_reason,
        "proposal": {
            "id": view.proposal.get("id"),
            "tool": (view.proposal.get("proposal") or {}).get("tool"),
            "origin": view.proposal.get("origin"),
        }
        if view.proposal
        else None,
        "recorded_call": {
            "id": view.recorded_call.get("id"),
            "request_digest": view.recorded_call.get("request_digest"),
            "outcome": (view.recorded_result or {}).get("outcome"),
            "rests_on_it": [e.get("id") for e in view.rests_on_it],
        }
        if view.recorded_call
        else None,
        "nearby": [
            {
                "what": n.what,
                "label": n.label,
                "tool": n.tool,
                "contract_revision": n.contract_revision,
                "request_digest": n.request_digest,
                "fixture": n.fixture_id,
                "synthetic": n.synthetic,
                "outcome": n.outcome,
                "differing": n.differing,
                "conditions": n.conditions,
                "diff": [
                    {"path": r.path, "missing": r.missing, "nearby": r.nearby, "status": r.status}
                    for r in n.rows
                    if r.status != "same"
                ],
            }
            for n in view.nearby
        ],
        "answers": {
            "staged": [r.public_id for r in answers.staged],
            "candidates": [r.public_id for r in answers.candidates],
            "promoted": [r.public_id for r in answers.promoted],
            "versions": [
                {"scenario": v.ref, "fixture": fixture, "body_expired": expired}
                for v, fixture, expired in answers.answering
            ],
        }
        if answers is not None
        else None,
    }


def _replay_fields() -> dict[str, serializers.Field]:
    """The replay answer's keys, for the schema (fresh fields each time: a field belongs to one serializer)."""
    return {
        "replay": serializers.IntegerField(),
        "run": serializers.CharField(allow_null=True, help_text="the replay's own run, once imported"),
        "mode": serializers.ChoiceField(MODES),
        "state": serializers.CharField(help_text="its run's final state once ended, else the replay's state"),
        "replay_state": serializers.ChoiceField(Replay.State.values),
        "isolation": serializers.CharField(allow_null=True),
        "missing": serializers.ListField(child=serializers.DictField(), help_text="the fixture.missing records"),
        "findings": serializers.ListField(child=serializers.DictField()),
        "finding_count": serializers.IntegerField(),
        "findings_truncated": serializers.BooleanField(),
        "scenario": serializers.CharField(allow_null=True),
        "vary": serializers.DictField(child=serializers.CharField()),
        "error": serializers.CharField(allow_null=True),
        "wall_s": serializers.FloatField(allow_null=True),
        "time": serializers.DictField(
            help_text="logical {start, end, elapsed_s} (scenario time the run spans; null before it is imported) and "
            "execution {sandbox_s, queued_at, started_at, finished_at} (wall time), reported apart"
        ),
        "source_run": serializers.CharField(),
        "checkpoint": serializers.CharField(),
        "decider": serializers.CharField(),
        "model_connection": serializers.DictField(allow_null=True),
        "ended": serializers.BooleanField(),
        "stop_reason": serializers.CharField(allow_null=True),
        "summary_digest": serializers.CharField(help_text="the digest of the summary it was launched with"),
        "created_at": serializers.CharField(allow_null=True),
        "url": serializers.CharField(),
        "page": serializers.CharField(),
        "missing_url": serializers.CharField(),
        "evaluation": serializers.DictField(
            allow_null=True,
            help_text="the end state judged against the scenario's declaration (n17q.scenario-evaluation/1): "
            "judgements [{check, title, status: passed|failed|not_evaluated, reason, events}]; null: none made",
        ),
        "unevaluated": serializers.ListField(
            child=serializers.DictField(),
            help_text="the lineage checks the replay's run could not judge [{code, reason, events?, scope?}]; "
            "`scope` names what its declared scope cannot support (earlier policy, later world state, final account)",
        ),
    }


class LaunchInput(serializers.Serializer):
    run = serializers.CharField(max_length=200, help_text="the id of the run to replay")
    mode = serializers.ChoiceField(
        MODES, help_text="reconstruction (inspect), rerun (replay in fixtures), counterfactual"
    )
    scenario = serializers.CharField(
        required=False,
        allow_blank=True,
        allow_null=True,
        max_length=200,
        help_text="NAME@VERSION, one of those the launch page offers; default: the run's recorded version",
    )
    vary = serializers.DictField(
        child=serializers.CharField(max_length=200),
        required=False,
        help_text='a counterfactual\'s one variable: {"decider": "careful"}, {"decider": "agent:NAME"}, '
        '{"human.<event id>": "rejected"}, {"fault": "tool:stage"}, {"clock": "…"}, {"budget.tokens": "100"}…',
    )
    checkpoint = serializers.CharField(
        required=False, default="start", max_length=200, help_text="a recorded checkpoint event's id, or start"
    )
    model_connection = serializers.CharField(
        required=False,
        allow_blank=True,
        allow_null=True,
        max_length=200,
        help_text="with an agent decider: an approved model connection's name (a fresh comparison run)",
    )
    summary_digest = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=100,
        help_text="the digest of the summary you were shown (a 409 answers it); without it nothing launches",
    )


class ReplayCollectionApi(APIView):
    """POST launches a replay, as the launch form does."""

    parser_classes = [BoundedJSONParser]
    permission_classes = [requires_perm("runs.launch_replay"), scoped(LAUNCH, READ)]

    @extend_schema(
        summary="Launch a replay",
        description="The launch form's rule (DESIGN §6): a POST without `summary_digest`, or with one that is not "
        "the summary the server computes now for these inputs, queues nothing and answers 409 with `summary` (what "
        "would launch: model, policy, workspaces, fixture completeness, clock, isolation, what it cannot touch) and "
        "its `summary_digest`; POST again with that digest to launch: 201 with the replay (queued for a worker; "
        "poll `url`). The same person confirming the same summary again while that replay is queued or running "
        "gets it back (200, `created: false`), not a second one. Inputs as `manage.py replay` takes them: `mode`, "
        "`scenario`, `vary` (one variable for a counterfactual, `decider` may be `agent:NAME`), `checkpoint`, "
        "`model_connection`. 400 with one line for input that cannot launch, 404 for an unknown run. The user needs "
        "the operator role; a harness token `replays:launch` and `replays:read`.",
        request=LaunchInput,
        responses={
            201: inline_serializer("ReplayLaunched", {**_replay_fields(), "created": serializers.BooleanField()}),
            200: inline_serializer(
                "ReplayAlreadyLaunched", {**_replay_fields(), "created": serializers.BooleanField()}
            ),
            400: ErrorOutput,
            404: ErrorOutput,
            409: inline_serializer(
                "LaunchSummary",
                {
                    "error": serializers.CharField(help_text="why nothing launched: unseen or changed summary"),
                    "summary": serializers.DictField(help_text="the pre-launch summary, as the launch page shows it"),
                    "summary_digest": serializers.CharField(help_text="send it back to launch exactly this"),
                },
            ),
        },
        examples=[
            OpenApiExample(
                "Ask for the summary of a rerun", value={"run": "run-example-docs", "mode": "reconstruction"}
            )
        ],
    )
    def post(self, request: Request) -> Response:
        data = LaunchInput(data=request.data)
        if not data.is_valid():
            raise exceptions.ValidationError(data.errors)
        given = data.validated_data
        run = Run.objects.filter(run_id=given["run"]).first()
        if run is None:
            raise exceptions.NotFound(f"no run {given['run']!r}")
        try:
            vary = vary_from_mapping(given.get("vary"))
            version = launch_version(run, mode=given["mode"], scenario=given.get("scenario") or None)
            replay, created = replay_launch_confirmed(
                run,
                mode=given["mode"],
                version=version,
                vary=vary,
                checkpoint=given.get("checkpoint") or "start",
                model_connection=given.get("model_connection") or None,
                digest=given.get("summary_digest") or "",
                user=request.user,
            )
        except LaunchUnconfirmed as exc:
            return Response(
                {"error": str(exc), "summary": exc.preview.summary, "summary_digest": exc.preview.digest},
                status=status.HTTP_409_CONFLICT,
            )
        except (VaryRefused, ReplayRefused) as exc:
            return Response({"error": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        return Response(
            {**replay_answer(replay), "created": created},
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


class ReplayDetailApi(APIView):
    permission_classes = [requires_perm("runs.view_run"), scoped(READ)]

    @extend_schema(
        summary="One replay: its state and why it stopped",
        description="`replay --json`'s shape with added keys: `source_run`, `checkpoint`, `decider`, "
        "`model_connection`, `ended`, `stop_reason` (the launcher's error, or the reason the run's final state "
        "gives), `summary_digest`, and where to read it (`page`, `missing_url`). Poll it until `ended`.",
        responses={200: inline_serializer("Replay", _replay_fields()), 404: ErrorOutput},
        parameters=[REPLAY_ID],
    )
    def get(self, request: Request, replay_id: str) -> Response:
        return Response(replay_answer(_replay_or_404(replay_id)))


class ReplayMissingApi(APIView):
    permission_classes = [requires_perm("runs.view_run"), scoped(READ)]

    @extend_schema(
        summary="What a stopped replay is missing",
        description="Each `fixture.missing` / `fixture.ambiguous` record of an ended replay as its missing-fixture "
        "page shows it: the tool, its contract (as the pinned scenario version declares it) and revision, the "
        "request digest and the full normalized `request` the replay made (for `model.chat` the chat request: "
        "model, messages, tools, parameters; for a tool its normalized arguments), the world revision and "
        "checkpoint, why it was needed, the nearby recorded requests with the fields that differ, and what the "
        "console already holds for the same request. Values as stored: what the secret scan masked stays masked. "
        "409 with one line while the replay has not ended.",
        responses={
            200: inline_serializer(
                "ReplayMissing",
                {
                    "replay": serializers.IntegerField(),
                    "run": serializers.CharField(),
                    "state": serializers.CharField(),
                    "stop_reason": serializers.CharField(allow_null=True),
                    "missing": serializers.ListField(child=serializers.DictField()),
                },
            ),
            404: ErrorOutput,
            409: ErrorOutput,
        },
        parameters=[REPLAY_ID],
    )
    def get(self, request: Request, replay_id: str) -> Response:
        replay = _replay_or_404(replay_id)
        if replay.run is None:
            return Response(
                {"error": f"replay {replay.pk} is {replay.state}: it has no run to read yet"},
                status=status.HTTP_409_CONFLICT,
            )
        return Response(
            {
                "replay": replay.pk,
                "run": replay.run.run_id,
                "state": replay.run.final_state,
                "stop_reason": stop_reason(replay),
                "missing": [missing_answer(missing_fixture_view(replay, i)) for i in range(len(replay.missing))],
            }
        )


# --- POST /api/v1/replays/<id>/missing/model-answer/ (issue 36, docs/agents.md "Model fixtures"): stage a proposed
# answer to the model request a replay stopped on, for review; the API door of `replays.model_answers`, beside the
# command `stage_model_answer` and the missing-fixture page's form.

_FIELDS = ("answer", "content", "tool_calls", "copy_similar", "missing")
# The body is an answer and a few fields: a little more than the largest answer, read at most that far.
MAX_BODY_BYTES = MAX_ANSWER_BYTES + 64 * 1024


class RawAnswerParser(BaseParser):
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

    parser_classes = [RawAnswerParser]
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


# --- scenario from a trace (issue 37 point 3): replays.trace_scenarios ---------------------------------------------


def _run_or_404(run_id: str) -> Run:
    run = Run.objects.filter(run_id=run_id).first()
    if run is None:
        raise exceptions.NotFound(f"no run {run_id!r}")
    return run


class TraceScenarioInput(serializers.Serializer):
    scenario = serializers.CharField(max_length=200, help_text="the name of the scenario to mint (NAME)")
    effect_classes = serializers.DictField(
        child=serializers.ChoiceField(choices=["read", "mutation"]),
        required=False,
        help_text='{"TOOL": "read" | "mutation"} for each tool whose effect class the trace does not say',
    )


class TraceLaunchInput(serializers.Serializer):
    agent = serializers.CharField(
        max_length=60, help_text="a registered agent's name (the decider agent:NAME), or recorded"
    )
    summary_digest = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=100,
        help_text="the digest of the summary you were shown (a 409 answers it); without it nothing launches",
    )


_STATUS = OpenApiResponse(
    OpenApiTypes.OBJECT, description="trace_scenario_status: docs/formats/recordings.md, Scenario from a trace"
)
_PROPOSED: dict[str, serializers.Field] = {"proposed": serializers.DictField(), "status": serializers.DictField()}


class RunScenarioApi(APIView):
    """GET: the flow's status for the run; POST: propose a scenario version from it (docs/formats/recordings.md,
    "Scenario from a trace")."""

    parser_classes = [BoundedJSONParser]

    def get_permissions(self) -> list[Any]:
        if self.request is not None and self.request.method == "POST":
            # Minting contracts from the run's contents: a capture's role and scope, and reading the run.
            chosen = [requires_perm(CAPTURE_PERM), requires_perm("runs.view_run"), scoped(CAPTURE, READ_RUNS)]
        else:
            chosen = [requires_perm("runs.view_run"), scoped(READ_RUNS)]
        return [permission() for permission in chosen]

    @extend_schema(
        summary="Scenario from a trace: the flow's status",
        description="What the flow has done for the run: the contracts inferred (each field with its source) and "
        "asked, the trace's counts, the recordings staged from it (staged, approved, rejected), the latest version "
        "and how many of the run's tool calls it answers, and what still blocks a replay. Optional `scenario`.",
        parameters=[OpenApiParameter("scenario", str, required=False, description="the scenario's name")],
        responses={200: _STATUS, 404: ErrorOutput},
    )
    def get(self, request: Request, run_id: str) -> Response:
        run = _run_or_404(run_id)
        name = request.query_params.get("scenario") or None
        try:
            return Response(trace_scenario_status(run, name))
        except TraceScenarioRefused as exc:
            return Response({"error": str(exc)}, status=status.HTTP_400_BAD_REQUEST)

    @extend_schema(
        summary="Scenario from a trace: propose a version",
        description="Mints NAME@1 (or the next version of NAME, whose contracts must agree) holding the contracts "
        "inferred from the run, an empty world and no fixtures, recorded from the run. 201 with `proposed` and "
        "`status`; 200 (`created: false`) when the latest version already holds them; 400 with one line (the tools "
        "whose effect class is needed, a field the trace cannot type, contracts that disagree).",
        request=TraceScenarioInput,
        responses={
            201: inline_serializer("TraceScenarioProposed", _PROPOSED),
            200: inline_serializer("TraceScenarioHeld", _PROPOSED),
            400: ErrorOutput,
            404: ErrorOutput,
        },
    )
    def post(self, request: Request, run_id: str) -> Response:
        run = _run_or_404(run_id)
        data = TraceScenarioInput(data=request.data)
        if not data.is_valid():
            raise exceptions.ValidationError(data.errors)
        given = data.validated_data
        try:
            proposal = trace_scenario_propose(
                run=run, name=given["scenario"], effect_classes=given.get("effect_classes") or {}, user=request.user
            )
        except TraceScenarioRefused as exc:
            return Response({"error": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        return Response(
            {"proposed": proposal.to_json(), "status": trace_scenario_status(run, proposal.version.name)},
            status=status.HTTP_201_CREATED if proposal.created else status.HTTP_200_OK,
        )


class RunScenarioLaunchApi(APIView):
    """POST: launch a replay of a registered agent against the latest version proposed from the run, as
    POST /api/v1/replays/ does (the summary first, then its digest)."""

    parser_classes = [BoundedJSONParser]
    permission_classes = [requires_perm("runs.launch_replay"), scoped(LAUNCH, READ)]

    @extend_schema(
        summary="Scenario from a trace: launch an agent against it",
        description="A counterfactual from the start whose decider is `agent:AGENT` (`recorded`: the recorded "
        "decisions) against the latest version proposed from the run; the run is the replay's recorded run, so its "
        "comparison page compares with the trace. Without `summary_digest`, or with a stale one: 409 with `summary` "
        "and `summary_digest`; POST again with it: 201 with the replay (200, `created: false`, for the same summary "
        "still queued or running). 400 with one line for what cannot launch.",
        request=TraceLaunchInput,
        responses={
            201: inline_serializer("TraceReplayLaunched", {**_replay_fields(), "created": serializers.BooleanField()}),
            200: inline_serializer("TraceReplayAlready", {**_replay_fields(), "created": serializers.BooleanField()}),
            400: ErrorOutput,
            404: ErrorOutput,
            409: inline_serializer(
                "TraceLaunchSummary",
                {
                    "error": serializers.CharField(),
                    "summary": serializers.DictField(),
                    "summary_digest": serializers.CharField(),
                },
            ),
        },
    )
    def post(self, request: Request, run_id: str) -> Response:
        run = _run_or_404(run_id)
        data = TraceLaunchInput(data=request.data)
        if not data.is_valid():
            raise exceptions.ValidationError(data.errors)
        given = data.validated_data
        try:
            replay, created = trace_scenario_launch(
                run=run, agent=given["agent"], user=request.user, digest=given.get("summary_digest") or ""
            )
        except LaunchUnconfirmed as exc:
            return Response(
                {"error": str(exc), "summary": exc.preview.summary, "summary_digest": exc.preview.digest},
                status=status.HTTP_409_CONFLICT,
            )
        except TraceScenarioRefused as exc:
            return Response({"error": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        return Response(
            {**replay_answer(replay), "created": created},
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


class AssessmentInput(serializers.Serializer):
    """A person's assessment of one dimension, or (`connection`, `model`) a model reviewer asked for all of them."""

    dimension = serializers.ChoiceField(list(DIMENSIONS), required=False)
    score = serializers.IntegerField(required=False, help_text=f"a whole number on {ASSESSMENT_SCALE}")
    cited = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="event or artifact ids of the run it rests on"
    )
    rationale = serializers.CharField(required=False, allow_blank=True)
    connection = serializers.CharField(required=False, help_text="an approved model connection (a model reviewer)")
    model = serializers.CharField(required=False, help_text="the model name sent to that connection")


class RunAssessmentsApi(APIView):
    """GET: a run's qualitative assessments per dimension; POST: a reviewer's (or a model reviewer's) assessment."""

    def get_permissions(self):
        if self.request.method == "POST":
            return [requires_perm(annotation_service.ANNOTATE_PERM)(), scoped(HarnessToken.Scope.ANNOTATE_RUNS)()]
        return [requires_perm("runs.view_run")(), scoped(READ_RUNS)()]

    @extend_schema(
        summary="Qualitative assessments of a run, per dimension",
        description="Code clarity, diagnostic reasoning, report usefulness and path economy (seed 003), each with its "
        "assessments newest first (score on 1..5, the ids cited, the rationale, the reviewer: a person or a model) or "
        "`reviewed: false`. Kept apart from the verdict: no score changes a finding or the run's facts.",
        responses=inline_serializer(
            "Assessments",
            {
                "run": serializers.CharField(),
                "scale": serializers.CharField(),
                "dimensions": serializers.ListField(child=serializers.DictField()),
            },
        ),
        parameters=[RUN_ID],
    )
    def get(self, request: Request, run_id: str) -> Response:
        return Response(assessment_service.assessments_json(get_object_or_404(Run, run_id=run_id)))

    @extend_schema(
        summary="Assess a run qualitatively (a person), or ask a model reviewer",
        description="JSON. A person: `dimension`, `score` (1..5), `cited` (ids the run holds; an unknown id is "
        "refused), `rationale`. A model reviewer: `connection` (an approved model connection) and `model`: it is sent "
        "the run's events and verdict and its answer is recorded per dimension, all or nothing. Appended to the run as "
        "`review.assessment` events (append-only, masked by the storage gate, audited as `run.annotated`); never "
        "read by the verdict. Needs the reviewer role; a token, `runs:annotate`. Bad input: 400 with one line.",
        request=AssessmentInput,
        responses={201: inline_serializer("AssessmentsMade", {"made": serializers.ListField()}), 400: ErrorOutput},
        parameters=[RUN_ID],
    )
    def post(self, request: Request, run_id: str) -> Response:
        run = get_object_or_404(Run, run_id=run_id)
        data = AssessmentInput(data=request.data)
        if not data.is_valid():
            return Response({"error": first_problem(data.errors)}, status=status.HTTP_400_BAD_REQUEST)
        given = data.validated_data
        try:
            if given.get("connection"):
                made = model_review_service.model_review(
                    run,
                    user=request.user,
                    connection=given["connection"],
                    model=given.get("model") or "reviewer",
                    request=request,
                )
            else:
                made = [
                    assessment_service.assessment_record(
                        run,
                        user=request.user,
                        dimension=given.get("dimension"),
                        score=given.get("score"),
                        cited=given.get("cited") or [],
                        rationale=given.get("rationale"),
                        request=request,
                    )
                ]
        except AssessmentRefused as exc:
            return Response({"error": str(exc), "field": exc.field}, status=status.HTTP_400_BAD_REQUEST)
        answer = [{"id": m.event.event_id, **{k: m.event.body.get(k) for k in ("dimension", "score")}} for m in made]
        return Response({"made": answer}, status=status.HTTP_201_CREATED)
