"""Pages for people. Each view parses its input, calls one selector or service, and renders."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from console.htmx import HtmxHttpRequest
from n17q_engine.bundle import BundleError

from . import run_page, selectors
from .forms import BundleUploadForm, RunFilterForm
from .glossary import glossary_entries
from .importer import run_import_from_upload
from .models import Run


def run_list(request: HtmxHttpRequest) -> HttpResponse:
    form = RunFilterForm(request.GET or None)
    filters = form.cleaned_data if form.is_valid() else {}
    runs = selectors.run_list(**{k: v for k, v in filters.items() if v})
    page = Paginator(runs, 50).get_page(request.GET.get("page"))
    template = "runs/run_list.html#run-table" if request.htmx else "runs/run_list.html"
    return render(request, template, {"form": form, "page": page})


@permission_required("runs.import_run", raise_exception=True)
@require_http_methods(["GET", "POST"])
def run_import(request: HtmxHttpRequest) -> HttpResponse:
    form = BundleUploadForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        try:
            result = run_import_from_upload(form.cleaned_data["bundle"], user=request.user)
        except BundleError as exc:
            form.add_error("bundle", str(exc))
        else:
            messages.success(
                request,
                f"Imported {result.run.run_id}: {result.events} events, {len(result.findings)} lineage findings.",
            )
            return redirect("runs:run-detail", run_id=result.run.run_id)
    return render(request, "runs/run_import.html", {"form": form}, status=400 if form.errors else 200)


def run_detail(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    """The run page. With htmx, a focus change answers with the focus bar and every pane out of band."""
    run = get_object_or_404(Run, run_id=run_id)
    starts = {key: request.GET.get(f"{key}_from") for key in run_page.PANES}
    starts["timeline"] = request.GET.get("timeline_from")
    only_pane = request.GET.get("pane") if request.htmx else None
    page = run_page.page_build(
        run,
        focus_ref=request.GET.get("focus", ""),
        starts=starts,
        picture_start=request.GET.get("picture_start"),
        only_pane=only_pane,
    )
    if only_pane in run_page.PANES:
        return render(request, "runs/run_detail.html#pane", {"page": page, "pane": page.panes[0]})
    if request.htmx:
        return render(request, "runs/run_focus.html", {"page": page, "oob": True})
    return render(request, "runs/run_detail.html", {"page": page})


def glossary(request: HtmxHttpRequest) -> HttpResponse:
    """Every lineage code and product term, each with the anchor other pages link to."""
    return render(request, "runs/glossary.html", {"entries": glossary_entries()})
