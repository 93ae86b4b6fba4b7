"""REST API for runs under /api/v1/ (DESIGN §8). One class per operation; each parses, calls, renders."""

from __future__ import annotations

import functools
import logging
from typing import Any

from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema, inline_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.generics import get_object_or_404
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.auth import READ_RUNS, requires_perm, scoped
from accounts.models import HarnessToken
from console.api_errors import first_problem
from console.openapi import ErrorOutput
from console.pagination import StrictLimitOffsetPagination
from console.upload_budget import UPLOAD_BUDGET_STATUS, BudgetExceeded, upload_budget
from n17q_engine.bundle import BundleError

from . import annotations as annotation_service
from . import approvals, search, selectors
from .bundle_export import BundleExportError, export_download
from .facts import facts_of
from .forms import SEARCH_FIELDS, RunFilterForm, form_errors_line, search_asked
from .import_formats import runs_import_from_upload
from .importer import FINDINGS_IN_ANSWER
from .models import Finding, Run, RunSummary

# The example run id in the docs (and the one the schema test tries first): the README's example bundle.
RUN_ID = OpenApiParameter(
    "run_id",
    str,
    OpenApiParameter.PATH,
    description="the run's id as its bundle's manifest gives it",
    examples=[OpenApiExample("the example bundle", value="run-example-docs")],
)

log = logging.getLogger(__name__)


FINDING_FIELDS: dict[str, serializers.Field] = {
    "code": serializers.CharField(),
    "severity": serializers.CharField(),
    "from": serializers.CharField(),
    "to": serializers.CharField(),
    "message": serializers.CharField(),
}


@functools.cache
def findings_schema() -> serializers.Serializer:
    """The finding shape of DESIGN §8, for the schema (`from` cannot be a Python attribute name)."""
    return inline_serializer("Finding", FINDING_FIELDS, many=True)


def finding_counts_schema(where: str) -> dict[str, serializers.Field]:
    """The keys that bound a `findings` list (issue 20): added beside it, the list's shape unchanged."""
    return {
        "finding_count": serializers.IntegerField(help_text="how many findings the run has, all of them"),
        "findings_truncated": serializers.BooleanField(
            help_text=f"true when `findings` holds only the first of them ({where})"
        ),
    }


class FindingOutput(serializers.ModelSerializer):
    """One stored finding, in the shape of DESIGN §8."""

    class Meta:
        model = Finding
        fields = ["code", "severity", "message"]

    def to_representation(self, instance: Finding) -> dict[str, str]:
        data = super().to_representation(instance)
        return {
            "code": data["code"],
            "severity": data["severity"],
            "from": instance.from_ref,
            "to": instance.to_ref,
            "message": data["message"],
        }


def unevaluated_schema() -> serializers.Serializer:
    return inline_serializer(
        "Unevaluated",
        {
            "code": serializers.CharField(help_text="LIN001-LIN015"),
            "reason": serializers.CharField(help_text="what the run does not hold that the check reads"),
            "events": serializers.ListField(
                child=serializers.CharField(),
                required=False,
                help_text="when only some inputs were left out: those events (claims resting on excluded tools)",
            ),
            "scope": serializers.CharField(
                required=False,
                help_text="what the replay's declared scope cannot support: earlier policy, later world state or "
                "final account (seed 000; docs/packages.md)",
            ),
        },
        many=True,
    )


class RunOutput(serializers.ModelSerializer):
    id = serializers.CharField(source="run_id")
    parent_run = serializers.CharField(source="parent_run_ref")

    class Meta:
        model = Run
        fields = [
            "id",
            "task_id",
            "task_revision",
            "environment",
            "mode",
            "scenario_name",
            "scenario_version",
            "model_name",
            "model_version",
            "policy_revision",
            "created_at",
            "parent_run",
            "isolation",
            "event_count",
            "finding_count",
            "error_count",
            "final_state",
            "imported_at",
            "title",
        ]


class RunSummaryOutput(serializers.ModelSerializer):
    models = serializers.ListField(source="model_list", child=serializers.CharField())
    tools = serializers.ListField(source="tool_list", child=serializers.CharField())
    codes = serializers.ListField(source="code_list", child=serializers.CharField())
    cost = serializers.DecimalField(max_digits=20, decimal_places=6, allow_null=True)

    class Meta:
        model = RunSummary
        fields = [
            "kind",
            "outcome",
            "started_at",
            "models",
            "tools",
            "codes",
            "model_calls",
            "tokens",
            "tokens_in",
            "tokens_out",
            "cost",
            "currency",
        ]


class RunSearchOutput(RunOutput):
    summary = RunSummaryOutput(help_text="what the search reads of the run (runs.models.RunSummary)")

    class Meta(RunOutput.Meta):
        fields = [*RunOutput.Meta.fields, "summary"]


# The run list's filters the API answers besides the search's own (runs.forms.SEARCH_FIELDS).
API_LIST_FILTERS = ("state", "mode", "environment", "scenario", "findings")

SEARCH_PARAMETERS = [
    OpenApiParameter(name, OpenApiTypes.STR if kind is None else kind, description=text)
    for name, kind, text in (
        (
            "q",
            None,
            "text: a run's id, title or task, a tool, destination or model it used, a finding's code or message",
        ),
        ("tool", None, "a tool whose name starts with this"),
        ("model", None, "a model whose name starts with this"),
        ("code", None, "a lineage finding code (LIN012)"),
        ("kind", None, "recorded, replay or imported"),
        ("outcome", None, "clean, warnings or errors"),
        ("state", None, "the run's final state"),
        ("mode", None, "the run's mode"),
        ("environment", None, "the run's environment"),
        ("scenario", None, "the run's scenario name"),
        ("findings", None, "yes or no"),
        ("created_from", OpenApiTypes.DATE, "created on or after this day"),
        ("created_to", OpenApiTypes.DATE, "created on or before this day"),
        ("started_from", OpenApiTypes.DATE, "its first event on or after this day"),
        ("started_to", OpenApiTypes.DATE, "its first event on or before this day"),
        ("tokens_min", OpenApiTypes.INT, "at least this many tokens (runs whose tokens are not known never match)"),
        ("tokens_max", OpenApiTypes.INT, "at most this many tokens"),
        ("cost_min", OpenApiTypes.DECIMAL, "at least this cost (runs whose cost is not evaluated never match)"),
        ("cost_max", OpenApiTypes.DECIMAL, "at most this cost"),
        ("after", None, "the cursor of the next page, as `next` gives it"),
    )
]


def _run_search_answer(request: Request, filters: dict[str, Any], *, limit: int) -> Response:
    found = search.run_search(filters, page=limit)
    runs = []
    for row in found.rows:
        run = row.run
        run.summary = row
        runs.append(run)
    next_url = None
    if found.next_after:
        params = request.query_params.copy()
        params["after"] = found.next_after
        next_url = request.build_absolute_uri(f"{request.path}?{params.urlencode()}")
    answer: dict[str, Any] = {
        "count": found.count,
        "count_capped": found.count_capped,
        "next": next_url,
        "previous": None,
        "results": RunSearchOutput(runs, many=True).data,
    }
    if found.cost_asked:
        answer["cost_not_evaluated"] = found.cost_not_evaluated
    return Response(answer)


class RunCollectionApi(APIView):
    """GET lists runs; POST imports a bundle (.zip or .tar.gz, multipart field `bundle`)."""

    parser_classes = [MultiPartParser, FormParser]
    # Declared on the class so that the schema describes the paginated shape and its limit/offset parameters.
    pagination_class = StrictLimitOffsetPagination

    def get_permissions(self):
        if self.request.method == "POST":
            return [requires_perm("runs.import_run")(), scoped(HarnessToken.Scope.IMPORT_RUNS)()]
        return [requires_perm("runs.view_run")(), scoped(READ_RUNS)()]

    @extend_schema(
        summary="List runs",
        description="Imported runs, the latest import first, with their summary (events, findings, final state). "
        'Any filter (docs/facts.md "Search over runs": the run list\'s, by the same names) makes it the search: '
        "the matching runs newest created first, each with its `summary` (kind, models, tools, finding codes, model "
        f"calls, tokens, cost), `count` at most {search.COUNT_CAP} (`count_capped` when more match), `next` the URL "
        "of the next page by cursor (`after`, no offset), and with a cost filter `cost_not_evaluated`: runs the other "
        "filters match whose cost is not evaluated, which a cost filter never matches. A bad value is a 400 naming "
        "the field.",
        parameters=SEARCH_PARAMETERS,
        responses=RunOutput(many=True),
    )
    def get(self, request: Request) -> Response:
        paginator = self.pagination_class()
        # A parameter given empty is not a filter the schema allows (a date, a number, a name): say so, as for any bad
        # value, rather than read it as absent (the list page's form, which sends its empty fields, reads it so).
        empty = next((k for k in SEARCH_FIELDS if k in request.query_params and not request.query_params[k]), None)
        if empty is not None:
            return Response(
                {"error": f"{empty}: give a value, or leave the parameter out"}, status=status.HTTP_400_BAD_REQUEST
            )
        form = RunFilterForm(request.query_params)
        if not form.is_valid():
            return Response({"error": form_errors_line(form)}, status=status.HTTP_400_BAD_REQUEST)
        filters = form.cleaned_data
        if search_asked(filters) or any(filters.get(k) for k in API_LIST_FILTERS):
            return _run_search_answer(request, filters, limit=paginator.get_limit(request) or search.PAGE)
        page = paginator.paginate_queryset(Run.objects.order_by("-imported_at", "-id"), request, view=self)
        return paginator.get_paginated_response(RunOutput(page, many=True).data)

    class ImportInput(serializers.Serializer):
        bundle = serializers.FileField(
            help_text="a run bundle (.zip, .tar.gz), an OTLP trace file (JSON or protobuf) or an Inspect AI log "
            "(.eval, .json), recognised by its content"
        )

    @extend_schema(
        summary="Import a run bundle",
        description="A bundle (`n17q.run-bundle/1`) as a .zip or .tar.gz in the multipart field `bundle`. All or "
        "nothing: a refused bundle stores nothing and the error names the file, line and field. Secrets the scan "
        "finds are masked before anything is stored and listed in `masked_secrets`. `findings` holds the run's first "
        f"{FINDINGS_IN_ANSWER} lineage findings; `finding_count` counts them all, `findings_truncated` says some were "
        "left out and `findings_url` lists every one, page by page. A harness token "
        "needs the `runs:import` scope; the user, the operator role. The field also takes an OTLP trace file (one run "
        "per trace) or an Inspect AI log (one run per sample and epoch), recognised by content: converted, the "
        "original kept as a blob, all runs or none imported; the answer's keys then describe the first run and add "
        "`runs` (each run's answer) and `conversion` (format, mapped, unmapped, notes). Anything else is refused "
        "with one line naming what it looks like.",
        request={"multipart/form-data": ImportInput},
        responses={
            201: inline_serializer(
                "ImportResult",
                {
                    "run": serializers.CharField(),
                    "events": serializers.IntegerField(),
                    "findings": findings_schema(),
                    **finding_counts_schema(
                        f"at most {FINDINGS_IN_ANSWER}; every one is listed at `findings_url`, page by page"
                    ),
                    "findings_url": serializers.CharField(
                        help_text="GET /api/v1/runs/{id}/findings/: the findings stored at import, paginated"
                    ),
                    "masked_secrets": inline_serializer(
                        "MaskedSecret",
                        {
                            "place": serializers.ChoiceField(["manifest", "event", "blob"]),
                            "event": serializers.CharField(required=False, help_text="the event's id"),
                            "path": serializers.CharField(),
                            "rule": serializers.CharField(),
                            "preview": serializers.CharField(help_text="a public prefix and a length, never the value"),
                        },
                        many=True,
                    ),
                    "runs": serializers.ListField(
                        child=serializers.DictField(),
                        required=False,
                        help_text="a converted file only: each run's answer (these keys, its title and conversion)",
                    ),
                    "conversion": serializers.DictField(
                        required=False,
                        help_text="a converted file only: {format, runs, mapped, unmapped, notes}",
                    ),
                },
            ),
            400: ErrorOutput,
            422: ErrorOutput,  # its reading took more than a request's budget (N17Q_UPLOAD_CPU_S, N17Q_UPLOAD_WALL_S)
        },
    )
    def post(self, request: Request) -> Response:
        data = self.ImportInput(data=request.data)
        if not data.is_valid():
            raise exceptions.ValidationError("send the bundle as a .zip or .tar.gz in the multipart field 'bundle'")
        try:
            with upload_budget("the upload"):
                result = runs_import_from_upload(data.validated_data["bundle"], user=request.user)
        except BundleError as exc:
            return Response({"error": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        except BudgetExceeded as exc:
            return Response({"error": str(exc)}, status=UPLOAD_BUDGET_STATUS)
        return Response(result.to_json(), status=status.HTTP_201_CREATED)


class RunDetailApi(APIView):
    permission_classes = [requires_perm("runs.view_run"), scoped(READ_RUNS)]

    @extend_schema(summary="One run's summary", responses=RunOutput, parameters=[RUN_ID])
    def get(self, request: Request, run_id: str) -> Response:
        return Response(RunOutput(get_object_or_404(Run, run_id=run_id)).data)


class RunLineageApi(APIView):
    permission_classes = [requires_perm("runs.view_run"), scoped(READ_RUNS)]

    @extend_schema(
        summary="Lineage findings of a run",
        description="The run re-checked with today's rules (LIN001-LIN015), shaped as `manage.py lineage --json`. "
        "`unevaluated` names the checks that had nothing to judge in this run (no workspaces, no admissions…): no "
        "finding for such a code is not a pass. `findings` holds at most the first "
        f"{selectors.LINEAGE_FINDINGS_IN_ANSWER}; `finding_count` and `error_count` count them all.",
        responses=inline_serializer(
            "Lineage",
            {
                "run": serializers.CharField(),
                "findings": findings_schema(),
                **finding_counts_schema(f"at most {selectors.LINEAGE_FINDINGS_IN_ANSWER}"),
                "error_count": serializers.IntegerField(help_text="how many of them are errors"),
                "unevaluated": unevaluated_schema(),
            },
        ),
        parameters=[RUN_ID],
    )
    def get(self, request: Request, run_id: str) -> Response:
        run = get_object_or_404(Run, run_id=run_id)
        return Response(selectors.run_lineage_json(run))


class RunFindingsApi(APIView):
    """The lineage findings stored when the run was imported, in the checker's order, page by page."""

    permission_classes = [requires_perm("runs.view_run"), scoped(READ_RUNS)]
    pagination_class = StrictLimitOffsetPagination

    @extend_schema(
        summary="Stored lineage findings of a run, paginated",
        description="Every finding recorded at import (the import's answer carries only the first "
        f"{FINDINGS_IN_ANSWER}), in the checker's order, `?limit=&offset=`. `GET .../lineage/` re-checks the run "
        "with today's rules instead.",
        responses=FindingOutput(many=True),
        parameters=[RUN_ID],
    )
    def get(self, request: Request, run_id: str) -> Response:
        run = get_object_or_404(Run, run_id=run_id)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(Finding.objects.filter(run=run).order_by("id"), request, view=self)
        return paginator.get_paginated_response(FindingOutput(page, many=True).data)


class RunRetriesApi(APIView):
    """What carried forward into each retry and what became stale (seed 003; n17q_engine/carry_forward.py)."""

    permission_classes = [requires_perm("runs.view_run"), scoped(READ_RUNS)]

    @extend_schema(
        summary="What carried forward into each retry of a run, and what became stale",
        description="For every attempt after the first, each evidence observation made before it in another attempt, "
        "with `status` (`carried_forward`, `carried_forward_unjustified`, `rerun`, `stale`, `needs_rerun`, "
        "`still_relevant`), the admissions that carried it and whether their compatibility rule holds (`carried`), "
        "the event that made it stale (`stale`), the rerun receipt (`rerun`) and one `explanation` sentence. A run "
        "with one attempt has `retries: []`.",
        responses=inline_serializer(
            "Retries",
            {
                "run": serializers.CharField(),
                "retries": serializers.ListField(child=serializers.DictField()),
                "count": serializers.IntegerField(),
                "truncated": serializers.BooleanField(),
            },
        ),
        parameters=[RUN_ID],
    )
    def get(self, request: Request, run_id: str) -> Response:
        run = get_object_or_404(Run, run_id=run_id)
        return Response({"run": run.run_id, **facts_of(run)["retries"]})


def _export(request: Request, run_id: str, fmt: str) -> FileResponse | Response:
    run = get_object_or_404(Run, run_id=run_id)
    try:
        return export_download(run, actor=request.user, by="api", request=request, fmt=fmt)
    except BundleExportError as exc:
        return Response({"error": str(exc)}, status=status.HTTP_409_CONFLICT)


class RunBundleApi(APIView):
    """The run as a `.zip` run bundle (`n17q.run-bundle/1`), as `manage.py export_run` writes it."""

    permission_classes = [requires_perm("runs.view_run"), scoped(READ_RUNS)]

    @extend_schema(
        summary="Export a run as a run bundle (.zip)",
        description="The run as the console stores it: `manifest.json` (the run as imported, its blobs), "
        "`events.jsonl` (every event in seq order) and `blobs/sha256/<hex>`; secrets the scan masked stay masked, a "
        "blob whose bytes retention removed is listed with its deletion record and no bytes, and the manifest's "
        "`exported` key says so (for a replay, with its scope note). Audited (`run.exported`). 409 with one line "
        "when the run's bytes changed while it was written.",
        responses={(200, "application/zip"): OpenApiTypes.BINARY, 409: ErrorOutput},
        parameters=[RUN_ID],
    )
    def get(self, request: Request, run_id: str) -> FileResponse | Response:
        return _export(request, run_id, "bundle")


class RunOtlpApi(APIView):
    """The run as one OTLP/JSON trace, as `manage.py export_run RUN OUT.json --format otlp-json` writes it."""

    permission_classes = [requires_perm("runs.view_run"), scoped(READ_RUNS)]

    @extend_schema(
        summary="Export a run as OTLP JSON",
        description='One OTLP/JSON `ExportTraceServiceRequest` (docs/formats/otlp.md "Export"): one trace per run '
        "(its id from the run id), a root span, a span per attempt, a GenAI `execute_tool` span per tool call and "
        "result, a `chat` span per model proposal, and every event as a span event carrying it whole (`n17q.event`); "
        "the resource names the run and carries its scope note. Secrets the scan masked stay masked; blobs are named "
        "by digest, not inlined. It imports again through the OTLP file door. Audited (`run.exported`). 409 with one "
        "line when the run's bytes changed while it was written.",
        responses={(200, "application/json"): OpenApiTypes.OBJECT, 409: ErrorOutput},
        parameters=[RUN_ID],
    )
    def get(self, request: Request, run_id: str) -> FileResponse | Response:
        return _export(request, run_id, "otlp-json")


class AnnotationInput(serializers.Serializer):
    """A score, label, comment or correction (runs/annotations.py): `annotation` says which."""

    annotation = serializers.ChoiceField(["score", "label", "comment", "correction"])
    target = serializers.ChoiceField(
        list(annotation_service.TARGETS), required=False, help_text="run (default), event, finding"
    )
    event = serializers.CharField(
        required=False, help_text="the event annotated, or corrected (a correction's subject)"
    )
    finding = serializers.CharField(required=False, help_text="a finding: its id, or CODE:from-event (LIN006:e-12)")
    name = serializers.CharField(required=False, help_text="a score's or a label's name (correctness, hallucination)")
    value = serializers.JSONField(required=False, help_text="a score's value on its scale (0.8, or pass)")
    scale = serializers.CharField(required=False, help_text="LOW..HIGH (default 0..1) or words joined by / (pass/fail)")
    text = serializers.CharField(
        required=False, help_text=f"a comment, at most {annotation_service.TEXT_MAX} characters"
    )
    field = serializers.CharField(required=False, help_text="a correction: the event's field it corrects (outcome)")
    corrected = serializers.JSONField(required=False, help_text="a correction: the value the field should have read")
    basis = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="a correction: the event ids it rests on"
    )
    rationale = serializers.CharField(required=False, help_text="a correction: why, in a sentence")
    supersedes = serializers.CharField(required=False, help_text="the id of an earlier annotation this one replaces")


def annotation_output_schema(*, made: bool = False) -> serializers.Serializer:
    """A listed annotation (paginated, many), or the one a POST made (with what was masked in it)."""
    extra: dict[str, serializers.Field] = {}
    if made:
        extra["masked"] = serializers.ListField(
            child=serializers.DictField(), help_text="{path, rule} of each secret masked before it was stored"
        )
    return inline_serializer(
        "AnnotationMade" if made else "Annotation",
        {
            "id": serializers.CharField(help_text="the annotation's event id (ann-<seq>)"),
            "seq": serializers.IntegerField(),
            "kind": serializers.ChoiceField(["annotation.recorded", "annotation.correction"]),
            "annotation": serializers.ChoiceField(["score", "label", "comment", "correction"]),
            "target": serializers.ChoiceField(list(annotation_service.TARGETS)),
            "subject": serializers.CharField(allow_null=True),
            "finding": serializers.DictField(allow_null=True, help_text="{code, from_id, to_id}"),
            "author": serializers.CharField(),
            "author_role": serializers.CharField(),
            "at": serializers.DateTimeField(help_text="when it was made (the event's wall time)"),
            "supersedes": serializers.CharField(allow_null=True),
            "superseded_by": serializers.CharField(allow_null=True),
            **extra,
        },
        many=not made,
    )


class RunAnnotationsApi(APIView):
    """GET lists a run's annotations and corrections; POST appends one (reviewers)."""

    pagination_class = StrictLimitOffsetPagination

    def get_permissions(self):
        if self.request.method == "POST":
            return [requires_perm(annotation_service.ANNOTATE_PERM)(), scoped(HarnessToken.Scope.ANNOTATE_RUNS)()]
        return [requires_perm("runs.view_run")(), scoped(READ_RUNS)()]

    @extend_schema(
        summary="Annotations and corrections of a run, paginated",
        description="Scores, labels and comments on the run, its events and its findings, and corrections of recorded "
        "facts, in the order they were made (docs/annotations.md). Each is an event of the run's graph "
        "(`annotation.recorded`, `annotation.correction`) naming its author, role and time; `superseded_by` names a "
        "later one that replaces it.",
        responses=annotation_output_schema(),
        parameters=[RUN_ID],
    )
    def get(self, request: Request, run_id: str) -> Response:
        run = get_object_or_404(Run, run_id=run_id)
        paginator = self.pagination_class()
        # The page's window of the run's annotations, read with what supersedes them (the annotations are few).
        rows = annotation_service.run_annotations(run, limit=annotation_service.annotation_total(run))
        page = paginator.paginate_queryset(rows, request, view=self) or []
        return paginator.get_paginated_response([a.as_json() for a in page])

    @extend_schema(
        summary="Annotate a run, an event or a finding, or correct a recorded fact",
        description="JSON. `annotation`: `score` (`name`, `value`, `scale` LOW..HIGH or a/b), `label` (`name`), "
        f"`comment` (`text`, at most {annotation_service.TEXT_MAX} characters), on `target` run, event (`event`) or "
        "finding (`finding`); or `correction` (`event`, `field`, `corrected`, `basis` event ids, `rationale`): "
        "appended as a new event naming the author, the basis and the time; the corrected event is not changed, "
        "nor the run's facts, findings or verdict. `supersedes` names an earlier annotation this one replaces. Secrets "
        "typed are masked before anything is stored (`masked`). Needs the reviewer role; a token, `runs:annotate`. "
        "Audited (`run.annotated`). Bad input: 400 with one line.",
        request=AnnotationInput,
        responses={201: annotation_output_schema(made=True), 400: ErrorOutput},
        parameters=[RUN_ID],
    )
    def post(self, request: Request, run_id: str) -> Response:
        run = get_object_or_404(Run, run_id=run_id)
        data = AnnotationInput(data=request.data)
        if not data.is_valid():
            return Response({"error": first_problem(data.errors)}, status=status.HTTP_400_BAD_REQUEST)
        try:
            made = annotation_service.annotate(run, data.validated_data, user=request.user, request=request)
        except annotation_service.AnnotationRefused as exc:
            return Response({"error": str(exc), "field": exc.field}, status=status.HTTP_400_BAD_REQUEST)
        answer = annotation_service.Annotation(made.event).as_json()
        return Response({**answer, "masked": made.masked}, status=status.HTTP_201_CREATED)


class PendingDecisionOutput(serializers.Serializer):
    id = serializers.CharField(help_text="The `policy.decision` event's id.")
    seq = serializers.IntegerField()
    subject = serializers.CharField(allow_null=True)
    policy_revision = serializers.CharField(allow_null=True)
    # DESIGN §3's field name; a serializer field of that name shadows Field.required only in the type checker's eyes.
    required = serializers.ListField(child=serializers.CharField())  # type: ignore[assignment]
    reasons = serializers.ListField(child=serializers.CharField())
    at = serializers.CharField(allow_null=True, help_text="The decision's logical time.")
    not_authority = serializers.ListField(
        child=serializers.CharField(),
        help_text="Approvals about the same subject that are no authority here (historical, or another run's).",
    )


class PendingRunOutput(serializers.Serializer):
    run = serializers.CharField(source="run.run_id")
    title = serializers.CharField(source="run.title")
    mode = serializers.CharField(source="run.mode")
    environment = serializers.CharField(source="run.environment")
    state = serializers.CharField(help_text="The run's final state as recorded (`paused` while it waits).")
    count = serializers.IntegerField(help_text="Decisions waiting in the run (the first 200 are listed).")
    pending = PendingDecisionOutput(many=True)


class PendingApprovalsOutput(serializers.Serializer):
    decisions = serializers.IntegerField()
    runs = PendingRunOutput(many=True)
    runs_more = serializers.IntegerField(help_text="Runs with waiting decisions beyond those listed.")
    not_evaluated = serializers.IntegerField(
        help_text="Runs whose stored facts predate this version: their waiting decisions are not known here."
    )


class PendingApprovalsApi(APIView):
    """The policy decisions waiting on a person across runs (runs/approvals.py: pending_approvals)."""

    permission_classes = [requires_perm("runs.view_run"), scoped(READ_RUNS)]

    @extend_schema(
        summary="Decisions waiting on a person",
        description="Every `policy.decision` with outcome `needs_approval` that no approval of its own run answers "
        "(a historical approval, or one given in another run or environment, leaves it waiting), grouped by run, "
        "newest run first; the same list as the page /approvals/pending/.",
        responses=PendingApprovalsOutput,
    )
    def get(self, request: Request) -> Response:
        return Response(PendingApprovalsOutput(approvals.pending_approvals()).data)
