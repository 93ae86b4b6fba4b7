"""Pages for people. Each view parses its input, calls one selector or service, and renders."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.paginator import Paginator
from django.http import FileResponse, Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_http_methods

from console.htmx import HtmxHttpRequest
from console.upload_budget import UPLOAD_BUDGET_STATUS, BudgetExceeded, upload_budget
from n17q_engine.bundle import BundleError

from . import annotations as annotation_service
from . import approvals, compare, run_page, search, selectors
from .blob_access import run_blob_read
from .blob_preview import INLINE_IMAGE_TYPES
from .bundle_export import EXPORT_FORMATS, BundleExportError, export_download
from .event_detail import event_detail_build
from .forms import BundleUploadForm, RunFilterForm, SpanSearchForm, form_errors_line, search_asked
from .glossary import glossary_entries
from .import_formats import runs_import_from_upload
from .models import Run
from .trace import SEARCH_SPAN


def run_list(request: HtmxHttpRequest) -> HttpResponse:
    """The runs, newest created first, each named by its title; replays under their source when asked for. Any search
    field (runs/search.py) makes it the cross-run search: every matching run, replays included, a page at a time."""
    form = RunFilterForm(request.GET or None)
    template = "runs/run_list.html#run-table" if request.htmx else "runs/run_list.html"
    if request.GET and not form.is_valid():
        # A value the filters cannot read: said in one line beside the form, nothing listed (never a 500).
        context = {"form": form, "page": [], "refused": form_errors_line(form)}
        # htmx swaps no 4xx answer: the table it replaces would go on showing the last filter's runs, so the partial
        # says the refusal with a 200 (the address and the API answer 400).
        return render(request, template, context, status=200 if request.htmx else 400)
    filters = form.cleaned_data if request.GET else {}
    if search_asked(filters):
        found = search.run_search(filters)
        context = {"form": form, "search": found, "page": found.rows, "replays_shown": True}
        return render(request, template, context)
    filters = {k: v for k, v in filters.items() if v and k in LIST_FILTERS}
    runs = selectors.run_list(**filters)
    page = Paginator(runs, 50).get_page(request.GET.get("page"))
    selectors.run_list_facts(page)
    context = {
        "form": form,
        "page": page,
        "replays_shown": bool(filters.get("replays") or filters.get("q") or filters.get("source")),
    }
    return render(request, template, context)


LIST_FILTERS = ("q", "state", "mode", "environment", "scenario", "findings", "replays", "source")


def run_compare(request: HtmxHttpRequest) -> HttpResponse:
    """Two runs side by side, layer by layer (runs/compare.py); `?run=A&run=B`, as the run list's checkboxes send."""
    chosen = [r for r in request.GET.getlist("run") if r][:3]
    if len(chosen) != 2 or chosen[0] == chosen[1]:
        return render(
            request,
            "runs/run_compare.html",
            {"refused": "choose two different runs to compare (tick two rows of the run list)"},
            status=400,
        )
    runs = {r.run_id: r for r in Run.objects.filter(run_id__in=chosen).select_related("summary")}
    missing = [r for r in chosen if r not in runs]
    if missing:
        raise Http404(f"no run {missing[0]}")
    comparison = compare.runs_compare(runs[chosen[0]], runs[chosen[1]])
    return render(request, "runs/run_compare.html", {"comparison": comparison})


def event_search(request: HtmxHttpRequest) -> HttpResponse:
    """Events across runs by tool, model, kind and text (runs/search.py: span_search), each linked to its run."""
    form = SpanSearchForm(request.GET or None)
    if request.GET and not form.is_valid():
        context = {"form": form, "refused": form_errors_line(form)}
        return render(request, "runs/event_search.html", context, status=400)
    found = search.span_search(form.cleaned_data) if request.GET else None
    return render(request, "runs/event_search.html", {"form": form, "found": found})


@permission_required("runs.import_run", raise_exception=True)
@require_http_methods(["GET", "POST"])
def run_import(request: HtmxHttpRequest) -> HttpResponse:
    form = BundleUploadForm(request.POST or None, request.FILES or None)
    refused_status = 400
    if request.method == "POST" and form.is_valid():
        try:
            with upload_budget("the upload"):
                imported = runs_import_from_upload(form.cleaned_data["bundle"], user=request.user)
        except BundleError as exc:
            form.add_error("bundle", str(exc))
        except BudgetExceeded as exc:
            form.add_error("bundle", str(exc))
            refused_status = UPLOAD_BUDGET_STATUS
        else:
            result = imported.first
            more = len(imported.results) - 1
            messages.success(
                request,
                f"Imported {result.run.run_id}: {result.events} events, {result.finding_count} lineage findings"
                + (f", and {more} more run{'s' if more > 1 else ''} from the same file." if more else "."),
            )
            if more:
                return redirect("runs:run-list")
            return redirect("runs:run-detail", run_id=result.run.run_id)
    return render(request, "runs/run_import.html", {"form": form}, status=refused_status if form.errors else 200)


def _page(request: HtmxHttpRequest, run: Run, *, event_ref: str) -> run_page.RunPage:
    get = request.GET
    return run_page.page_build(
        run,
        focus_ref=get.get("focus", ""),
        event_ref=event_ref,
        facets=get.getlist("facet"),
        query=get.get("q", ""),
        trace_from=get.get("trace_from"),
        narrow=get.get("narrow", "dim"),
        picture_start=get.get("picture_start"),
        finding=get.get("finding"),
        view=get.get("view", ""),
    )


def run_detail(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    """The run page: verdict, trace and detail panel, lineage picture; every link works without JavaScript."""
    run = get_object_or_404(Run, run_id=run_id)
    page = _page(request, run, event_ref=request.GET.get("event", ""))
    context = {"page": page, "search_span": f"{SEARCH_SPAN:,}"}
    return render(request, "runs/run_detail.html", context)


def event_detail(request: HtmxHttpRequest, run_id: str, event_id: str) -> HttpResponse:
    """One event in the detail panel: the panel alone for htmx, else the run page with it selected."""
    run = get_object_or_404(Run, run_id=run_id)
    if not request.htmx:
        return redirect(f"{reverse('runs:run-detail', args=[run.run_id])}?{urlencode({'event': event_id})}#detail")
    detail = event_detail_build(run, event_id)
    if detail is None:
        raise Http404("this run holds no such event")
    return render(request, "runs/_detail.html", {"detail": detail, "run": run})


def blob_download(request: HtmxHttpRequest, run_id: str, digest: str) -> HttpResponse | FileResponse:
    """A blob of the run: raster images inline (the detail panel shows them), everything else as an attachment."""
    run = get_object_or_404(Run, run_id=run_id)
    read = run_blob_read(run, digest)
    if read.expiry is not None:
        # Bytes the run's hold no longer covers are gone for it, not missing: 410 with the deletion record, one line
        # (whether the sweep removed them or only ended this run's hold while another run's keeps them).
        return HttpResponse(
            f"{digest[:71]}: {read.expiry.sentence}\n", status=410, content_type="text/plain; charset=utf-8"
        )
    if read.run_blob is None or read.handle is None:
        raise Http404("this run holds no such blob")
    run_blob, handle = read.run_blob, read.handle
    inline = run_blob.media_type in INLINE_IMAGE_TYPES and request.GET.get("inline") == "1"
    response = FileResponse(
        handle,
        as_attachment=not inline,
        filename="" if inline else f"{run.run_id}-{digest.removeprefix('sha256:')[:16]}.bin",
        content_type=run_blob.media_type if inline else "application/octet-stream",
    )
    response["X-Content-Type-Options"] = "nosniff"
    # Served bytes are the world's, not ours: even a browser that ignored the type would run nothing.
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    return response


def run_export(request: HtmxHttpRequest, run_id: str) -> HttpResponse | FileResponse:
    """The run as a `.zip` run bundle, or (`?format=otlp-json`) as one OTLP/JSON trace (runs/bundle_export.py), as
    an attachment; audited."""
    run = get_object_or_404(Run, run_id=run_id)
    fmt = request.GET.get("format") or "bundle"
    if fmt not in EXPORT_FORMATS:
        return HttpResponse(
            f"format must be one of {', '.join(sorted(EXPORT_FORMATS))}\n",
            status=400,
            content_type="text/plain; charset=utf-8",
        )
    try:
        return export_download(run, actor=request.user, by="web", request=request, fmt=fmt)
    except BundleExportError as exc:
        return HttpResponse(f"{exc}\n", status=409, content_type="text/plain; charset=utf-8")


@permission_required(annotation_service.ANNOTATE_PERM, raise_exception=True)
@require_http_methods(["POST"])
def run_annotate(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    """The run page's Annotate forms (the run, an event in the detail panel, a finding): one annotation or correction
    appended (runs/annotations.py), then back to where it was made; bad input is a 400 with one line."""
    run = get_object_or_404(Run, run_id=run_id)
    post = request.POST
    data: dict[str, object] = {k: post.get(k) for k in annotation_service.FORM_FIELDS if post.get(k) not in (None, "")}
    if "basis" in data:
        data["basis"] = str(data["basis"]).replace(",", " ").split()
    try:
        made = annotation_service.annotate(run, data, user=request.user, request=request)
    except annotation_service.AnnotationRefused as exc:
        return HttpResponse(f"{exc}\n", status=400, content_type="text/plain; charset=utf-8")
    if made.masked:
        messages.warning(request, f"{len(made.masked)} secret(s) in what you typed were masked before it was stored.")
    where = reverse("runs:run-detail", args=[run.run_id])
    subject = made.event.body.get("subject") if isinstance(made.event.body, dict) else None
    if subject:
        return redirect(f"{where}?{urlencode({'event': subject})}#detail")
    return redirect(f"{where}#annotations")


def glossary(request: HtmxHttpRequest) -> HttpResponse:
    """Every lineage code and product term, each with the anchor other pages link to."""
    return render(request, "runs/glossary.html", {"entries": glossary_entries()})


def approval_surface(request: HtmxHttpRequest, run_id: str, event_id: str) -> HttpResponse:
    """One approval's review surface as the approver saw it, rebuilt from the recording up to that approval (or a
    decision still waiting on a person): read-only (runs/approvals.py)."""
    run = get_object_or_404(Run, run_id=run_id)
    found = approvals.approval_surface_of(run, event_id)
    if found is None:
        raise Http404("this run holds no such approval or decision waiting on a person")
    return render(request, "runs/approval_surface.html", {"found": found, "s": found.surface, "run": run})


def approvals_pending(request: HtmxHttpRequest) -> HttpResponse:
    """The policy decisions waiting on a person across runs: `needs_approval` with no approval of the run answering."""
    return render(request, "runs/approvals_pending.html", {"found": approvals.pending_approvals()})
