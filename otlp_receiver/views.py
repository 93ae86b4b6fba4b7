"""The OTLP/HTTP receiver (`POST /v1/traces`) and the pages of received traces.

The receiver answers as OTLP/HTTP specifies: 200 with an ExportTraceServiceResponse in the request's encoding
(`partial_success` when some spans were refused: spans without valid ids, or spans of a trace another token opened),
and a google.rpc.Status for a refused request: 400 bad data, 401 no or unknown token, 403 a token without the
`runs:import` scope or a user without the operator role, or spans only of traces another token opened, 413 too large,
415 a content type or encoding it does not read, 422 a request whose reading took more than a request's budget
(N17Q_UPLOAD_CPU_S, N17Q_UPLOAD_WALL_S), 429 too many requests or too many decoded bytes from one token (with
Retry-After, which exporters honour).
An exporter authenticates with the harness token it sends in its headers (`OTEL_EXPORTER_OTLP_HEADERS=
"Authorization=Bearer <key>"`).
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.views import APIView

from accounts.auth import requires_perm, scoped
from accounts.models import HarnessToken
from accounts.permissions import HasRole
from accounts.throttles import HarnessTokenRateThrottle, TokenByteBudget
from console.upload_budget import UPLOAD_BUDGET_STATUS, BudgetExceeded, upload_budget
from n17q_engine.budget import checkpoint

from . import selectors, services, wire
from .models import ReceivedTrace

log = logging.getLogger(__name__)

_RPC_CODES = {400: wire.INVALID_ARGUMENT, 401: wire.UNAUTHENTICATED, 403: wire.PERMISSION_DENIED, 429: 8}


def _byte_budget() -> TokenByteBudget:
    """Decoded bytes per token per window (read at each request, so that a changed setting takes effect)."""
    return TokenByteBudget("otlp_bytes", settings.N17Q_OTLP_TOKEN_BYTES, settings.N17Q_OTLP_TOKEN_BYTES_WINDOW_S)


def _bytes_refused(encoding: str, wait: int) -> HttpResponse:
    limit, window = settings.N17Q_OTLP_TOKEN_BYTES, settings.N17Q_OTLP_TOKEN_BYTES_WINDOW_S
    answer = _status_response(
        encoding,
        429,
        f"this token sent more than {limit} decoded bytes in {window} seconds: retry after {wait} seconds",
    )
    answer["Retry-After"] = str(wait)
    return answer


class TraceExportThrottle(HarnessTokenRateThrottle):
    """Per token, like the API's, at a rate of its own: an exporter sends a batch every few hundred spans, far more
    often than a harness imports bundles (N17Q_OTLP_RATE)."""

    scope = "otlp_export"

    def get_rate(self) -> str | None:
        return str(settings.N17Q_OTLP_RATE)


def _status_response(encoding: str | None, status: int, message: str) -> HttpResponse:
    encoding = encoding or "json"
    body = wire.status_body(encoding, _RPC_CODES.get(status, wire.INVALID_ARGUMENT), " ".join(message.splitlines()))
    return HttpResponse(body, status=status, content_type=wire.JSON if encoding == "json" else wire.PROTOBUF)


@extend_schema(exclude=True)  # OTLP/HTTP as OpenTelemetry specifies it, not our REST API (docs/otlp-receiver.md)
class TraceExportApi(APIView):
    permission_classes = [HasRole, requires_perm("runs.import_run"), scoped(HarnessToken.Scope.IMPORT_RUNS)]
    throttle_classes = [TraceExportThrottle]
    parser_classes: list[Any] = []  # the body is read as bytes, below

    def _encoding(self, request: Any) -> str | None:
        return wire.body_encoding(request.META.get("CONTENT_TYPE", ""))

    def handle_exception(self, exc: Exception) -> Any:
        """DRF's refusals (401, 403, 429) as OTLP wants them: a Status in the request's encoding, headers kept."""
        response = super().handle_exception(exc)
        data = response.data if isinstance(response.data, dict) else {}
        answer = _status_response(self._encoding(self.request), response.status_code, str(data.get("error", exc)))
        for header in ("WWW-Authenticate", "Retry-After"):
            if header in response:
                answer[header] = response[header]
        return answer

    def post(self, request: Request) -> HttpResponse:
        encoding = self._encoding(request)
        if encoding is None:
            sent = request.META.get("CONTENT_TYPE", "")
            return _status_response(
                None, 415, f"Content-Type {sent!r} is not OTLP: send {wire.PROTOBUF} or {wire.JSON}"
            )
        token = request.auth if isinstance(request.auth, HarnessToken) else None
        budget = _byte_budget()
        wait = budget.wait(token)
        if wait is not None:  # spent already: not even the body is read
            return _bytes_refused(encoding, wait)
        limit = settings.N17Q_OTLP_MAX_BODY_BYTES
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        if declared > limit:
            return _status_response(encoding, 413, f"the body is larger than {limit} bytes: send smaller batches")
        body = request._request.read(limit + 1)
        if len(body) > limit:
            return _status_response(encoding, 413, f"the body is larger than {limit} bytes: send smaller batches")
        try:
            with upload_budget("the OTLP request"):
                raw = wire.decompress(
                    body, request.META.get("HTTP_CONTENT_ENCODING", ""), max_bytes=settings.N17Q_OTLP_MAX_DECODED_BYTES
                )
                wait = budget.charge(token, len(raw))
                if wait is not None:
                    return _bytes_refused(encoding, wait)
                checkpoint(now=True)
                split = wire.split_request(raw, encoding)
                del raw
                checkpoint(now=True)  # the last before anything is stored: past it, the request is stored whole
        except wire.WireError as exc:
            return _status_response(encoding, exc.status, exc.message)
        except BudgetExceeded as exc:
            return _status_response(encoding, UPLOAD_BUDGET_STATUS, str(exc))
        received = services.spans_receive(split.batches, sender=_sender(request))
        if received.refused and not received.traces and not split.rejected:
            # Every span was for traces another token opened: nothing of the request was taken.
            return _status_response(encoding, 403, received.refusal())
        try:
            services.traces_enqueue_due(throttled=True)
        except Exception:  # the export succeeded; finding due traces is the sweep's job too
            log.warning("could not look for traces due to finalise", exc_info=True)
        message = "; ".join(m for m in (received.refusal(), split.error_message()) if m)
        body_out = wire.success_body(encoding, rejected=split.rejected + received.refused_spans, message=message)
        return HttpResponse(body_out, status=200, content_type=wire.JSON if encoding == "json" else wire.PROTOBUF)


def _sender(request: Request) -> services.Sender:
    """The request's sender: its harness token and the token's user, or a signed-in user's session (no token)."""
    token = request.auth if isinstance(request.auth, HarnessToken) else None
    return services.Sender(
        token_id=token.pk if token is not None else None,
        user_id=request.user.pk,
        user=request.user,
        token_prefix=token.prefix if token is not None else "",
    )


def trace_list(request: HttpRequest) -> HttpResponse:
    """Traces sent to /v1/traces: the ones still receiving first, then the latest."""
    page = Paginator(selectors.trace_list(), 50).get_page(request.GET.get("page"))
    return render(
        request,
        "otlp_receiver/trace_list.html",
        {"page": page, "quiet_seconds": settings.N17Q_OTLP_QUIET_SECONDS},
    )


def trace_detail(request: HttpRequest, trace_id: str) -> HttpResponse:
    trace = selectors.trace_get(trace_id)
    if trace is None:
        raise Http404("no trace of that id was received")
    return render(
        request,
        "otlp_receiver/trace_detail.html",
        {
            "trace": trace,
            "late": selectors.late_spans(trace) if trace.late_span_count else None,
            # Until it is a run, its spans as received (issue 31): readable while the trace is still coming in, and
            # when it was refused. A finalized trace's chunks are gone: its run holds its spans (the page says so).
            "received": selectors.received_spans(trace) if trace.state != ReceivedTrace.State.FINALIZED else None,
            "quiet_seconds": settings.N17Q_OTLP_QUIET_SECONDS,
            "can_flush": trace.state == ReceivedTrace.State.RECEIVING
            and request.user.has_perm("runs.import_run")
            and services.trace_may_finalize(trace, request.user),
        },
    )


@permission_required("runs.import_run", raise_exception=True)
@require_POST
def trace_flush(request: HttpRequest, trace_id: str) -> HttpResponse:
    """An operator's "Import now": the trace becomes a run without waiting for the quiet period. Only its opener's
    (or an admin's): anyone else gets 403 with one line, audited (services.trace_flush)."""
    trace = selectors.trace_get(trace_id)
    if trace is None:
        raise Http404("no trace of that id was received")
    try:
        done = services.trace_flush(trace_pk=trace.pk, user=request.user)
    except services.TraceRefused as exc:
        raise PermissionDenied(str(exc)) from None
    if done.state == ReceivedTrace.State.FINALIZED and done.run is not None:
        messages.success(request, f"Trace {done.trace_id} imported as run {done.run.run_id}.")
    elif done.state == ReceivedTrace.State.REFUSED:
        messages.error(request, f"Trace {done.trace_id} was not imported: {done.error}")
    return redirect("otlp:trace-detail", trace_id=done.trace_id)
