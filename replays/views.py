"""Replay pages: the three buttons' pre-launch summaries, the replay page with live progress, the
comparison report, the missing-fixture page and "Make regression scenario".

Launching is an operator's (and an admin's) act: `runs.launch_replay`, 403 otherwise. Every button is a POST
form with a CSRF token; nothing launches from a GET. Views parse, call one service or selector, and render.
"""

from __future__ import annotations

import logging
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from accounts.audit import audit_record
from console.htmx import HtmxHttpRequest
from fixtures_review.models import ScenarioVersion
from fixtures_review.services import recording_copy_similar, scenario_version_mint
from n17q_engine.bundle import is_run_id
from n17q_engine.deciders import DECIDERS
from runs.models import Run

from .comparison import comparison_build, run_outcome
from .forms import CopySimilarForm, CounterfactualForm, ExcludeToolForm, LaunchForm
from .launch import BUDGET_RESOURCES, BUTTONS, VaryRefused, fault_choices, launch_summary, scenario_loaded
from .missing import missing_fixture_view
from .models import Replay
from .regression import RegressionRefused, regression_base, regression_invariants, regression_scenario_mint
from .services import ReplayRefused, replay_launch

log = logging.getLogger(__name__)


def _audit(request: HtmxHttpRequest, action: str, target: str, detail: dict[str, Any]) -> None:
    audit_record(actor=request.user, action=action, target=target, detail=detail, request=request)


def _scenario_refs(run: Run, default: ScenarioVersion | None) -> list[str]:
    names = {run.scenario_name} if run.scenario_name else set()
    if default is not None:
        names |= {default.name, f"{default.name}-regression"}
    refs = [v.ref for v in ScenarioVersion.objects.filter(name__in=names).only("name", "version")]
    if default is not None and default.ref in refs:
        refs.remove(default.ref)
        refs.insert(0, default.ref)
    return refs


@permission_required("runs.launch_replay", raise_exception=True)
@require_http_methods(["GET", "POST"])
def replay_new(request: HtmxHttpRequest, run_id: str, button: str) -> HttpResponse:
    """GET: what the button will do and what it can and cannot touch. POST: launch it."""
    run = get_object_or_404(Run, run_id=run_id)
    spec = BUTTONS.get(button)
    if spec is None:
        raise Http404(f"no button {button!r}")
    default = regression_base(run)
    refs = _scenario_refs(run, default)
    wanted = request.POST.get("scenario") or request.GET.get("scenario") or (refs[0] if refs else "")
    version = ScenarioVersion.objects.filter(
        name=wanted.partition("@")[0],
        version=int(wanted.partition("@")[2] or 0) if wanted.partition("@")[2].isdigit() else 0,
    ).first()
    data = request.POST if request.method == "POST" else None
    form: LaunchForm
    if spec.mode == "counterfactual":
        sc = scenario_loaded(version) if version else None
        choices = {
            "policy": [(p, p) for p in (sc.policies if sc else [])],
            "decider": [(d, d) for d in sorted(DECIDERS)],
            "fault": [(f, f.replace(":", ": ")) for f in fault_choices(sc)],
            "budget_resource": [(r, r) for r in BUDGET_RESOURCES],
            "delay_tool": [(c.tool, c.tool) for c in (sc.contracts if sc else []) if c.effect_class == "mutation"],
            "checkpoint": [
                ("start", f"the run's start: world revision 0, clock {sc.clock_start if sc else 'as recorded'}")
            ],
        }
        form = CounterfactualForm(data, scenarios=refs, default=wanted, choices=choices)
    else:
        form = LaunchForm(data, scenarios=refs, default=wanted)
    if request.method == "POST" and form.is_valid():
        try:
            replay = replay_launch(
                run,
                mode=spec.mode,
                vary=form.vary(),
                scenario=form.cleaned_data.get("scenario") or None,
                checkpoint=form.cleaned_data.get("checkpoint") or "start",
                user=request.user,
            )
        except ReplayRefused as exc:
            form.add_error(None, str(exc))
        else:
            # Audited by replay_create itself ("replay.create", with this request's user and address), inside the
            # launch's transaction; a second entry here would count one launch twice.
            return redirect("replays:replay-detail", pk=replay.pk)
    summary = None
    summary_error = None
    if version is not None or spec.mode == "reconstruction":
        try:
            summary = launch_summary(run, mode=spec.mode, vary={}, version=version)
        except VaryRefused as exc:
            summary_error = str(exc)
    elif spec.mode != "reconstruction":
        summary_error = (
            f"No scenario version holds run {run.run_id}'s world: a {spec.mode} needs one. Import or mint one first."
        )
    return render(
        request,
        "replays/replay_new.html",
        {"run": run, "spec": spec, "form": form, "summary": summary, "summary_error": summary_error},
        status=400 if form.errors else 200,
    )


def replay_list(request: HtmxHttpRequest) -> HttpResponse:
    replays = Replay.objects.select_related("source_run", "scenario_version", "run").order_by("-id")
    source = request.GET.get("source") or ""
    if source and not is_run_id(source):  # no run can have it (the bundle reader refuses it): a bad request
        return HttpResponseBadRequest(
            "source: a run id (1-200 characters, no '/', no spaces)", content_type="text/plain"
        )
    source_run = Run.objects.filter(run_id=source).first() if source else None
    if source:
        replays = replays.filter(source_run__run_id=source)
    page = Paginator(replays, 50).get_page(request.GET.get("page"))
    return render(request, "replays/replay_list.html", {"page": page, "source": source, "source_run": source_run})


def replay_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The replay page. Polled by htmx while it runs (`?poll=1`): the progress region only; when a polled
    replay ends on a missing fixture, the browser is sent to the missing-fixture page."""
    replay = get_object_or_404(Replay.objects.select_related("source_run", "scenario_version", "run"), pk=pk)
    context = {
        "replay": replay,
        "button": BUTTONS_BY_MODE.get(replay.mode),
        "outcome": run_outcome(replay.run) if replay.ended and replay.run else None,
    }
    if request.htmx and request.GET.get("poll"):
        response = render(request, "replays/replay_detail.html#progress", context)
        if replay.ended and replay.missing:
            response["HX-Redirect"] = reverse("replays:missing-fixture", args=[replay.pk, 0])
        elif replay.ended:
            response["HX-Refresh"] = "true"
        return response
    return render(request, "replays/replay_detail.html", context)


BUTTONS_BY_MODE = {b.mode: b for b in BUTTONS.values()}


def replay_comparison(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    replay = get_object_or_404(Replay.objects.select_related("source_run", "run", "run__parent"), pk=pk)
    if replay.run is None:
        return render(request, "replays/replay_comparison.html", {"replay": replay, "report": None}, status=409)
    return render(
        request,
        "replays/replay_comparison.html",
        {"replay": replay, "report": comparison_build(replay.run), "outcome": run_outcome(replay.run)},
    )


def missing_fixture(request: HtmxHttpRequest, pk: int, index: int) -> HttpResponse:
    replay = get_object_or_404(Replay.objects.select_related("source_run", "scenario_version", "run"), pk=pk)
    if replay.run is None or not 0 <= index < len(replay.missing):
        raise Http404(f"replay {pk} has no missing fixture #{index}")
    view = missing_fixture_view(replay, index)
    return render(
        request,
        "replays/missing_fixture.html",
        {
            "view": view,
            "exclude_form": ExcludeToolForm(),
        },
    )


@permission_required("runs.launch_replay", raise_exception=True)
@require_POST
def missing_copy_similar(request: HtmxHttpRequest, pk: int, index: int) -> HttpResponse:
    """Copy similar: a staged candidate only (helper B's service). It never acts inside the replay."""
    replay = get_object_or_404(Replay.objects.select_related("run"), pk=pk)
    if replay.run is None or not 0 <= index < len(replay.missing):
        raise Http404(f"replay {pk} has no missing fixture #{index}")
    form = CopySimilarForm(request.POST)
    form.is_valid()
    record = replay.missing[index]
    try:
        staged = recording_copy_similar(
            replay_run=replay.run,
            missing_event_id=record["id"],
            like_fixture_id=form.cleaned_data.get("like_fixture") or None,
            user=request.user,
        )
    except ValueError as exc:
        messages.error(request, f"Copy similar refused: {exc}")
        return redirect("replays:missing-fixture", pk=pk, index=index)
    _audit(request, "fixture.copy_similar", f"staged:{staged.pk}", {"replay": pk, "missing": record["id"]})
    messages.success(
        request,
        f"Staged candidate {staged.public_id} created for {record['tool']} (marked synthetic). It satisfies nothing "
        "until a reviewer other than you approves it.",
    )
    return redirect("fixtures:recording", public_id=staged.public_id)


@permission_required("runs.launch_replay", raise_exception=True)
@require_POST
def missing_exclude_tool(request: HtmxHttpRequest, pk: int, index: int) -> HttpResponse:
    """Exclude the tool: a new scenario version naming it and the reason (helper B's mint)."""
    replay = get_object_or_404(Replay.objects.select_related("run", "scenario_version"), pk=pk)
    if replay.run is None or not 0 <= index < len(replay.missing) or replay.scenario_version is None:
        raise Http404(f"replay {pk} has no missing fixture #{index}")
    form = ExcludeToolForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Say why the tool is excluded: the reason is recorded in the scenario version.")
        return redirect("replays:missing-fixture", pk=pk, index=index)
    tool = replay.missing[index]["tool"]
    try:
        version = scenario_version_mint(
            base=replay.scenario_version,
            exclude_tools={tool: form.cleaned_data["reason"]},
            user=request.user,
            source="exclusion",
        )
    except ValueError as exc:
        messages.error(request, f"Excluding {tool} refused: {exc}")
        return redirect("replays:missing-fixture", pk=pk, index=index)
    _audit(request, "scenario.exclude_tool", f"scenario:{version.ref}", {"tool": tool, "replay": pk})
    messages.success(
        request,
        f"{version.ref} minted without {tool} (reason recorded). Replays of {replay.scenario_version.ref} stay pinned.",
    )
    launch = reverse("replays:replay-new", args=[replay.source_run.run_id, "replay"])
    return redirect(launch + f"?scenario={version.ref}")


@permission_required("runs.launch_replay", raise_exception=True)
@require_http_methods(["GET", "POST"])
def regression_new(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    run = get_object_or_404(Run, run_id=run_id)
    base = regression_base(run)
    error = None
    if request.method == "POST":
        try:
            version = regression_scenario_mint(run=run, user=request.user)
        except RegressionRefused as exc:
            error = str(exc)
        else:
            _audit(request, "scenario.regression", f"scenario:{version.ref}", {"run": run.run_id})
            messages.success(request, f"Minted {version.ref}: its success criteria are {run.run_id}'s invariants.")
            return redirect(reverse("replays:replay-new", args=[run.run_id, "replay"]) + f"?scenario={version.ref}")
    invariants = regression_invariants(run, base) if base else []
    return render(
        request,
        "replays/regression_new.html",
        {"run": run, "base": base, "invariants": invariants, "error": error},
        status=400 if error else 200,
    )
