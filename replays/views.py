"""Replay pages: the three buttons' pre-launch summaries, the replay page with live progress, the
comparison report, the missing-fixture page and "Make regression scenario".

Launching is an operator's (and an admin's) act: `runs.launch_replay`, 403 otherwise. Every button is a POST
form with a CSRF token; nothing launches from a GET. Views parse, call one service or selector, and render.
"""

from __future__ import annotations

import logging
from typing import Any, cast

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from accounts.audit import audit_record
from console.htmx import HtmxHttpRequest
from fixtures_review.services import recording_copy_similar, scenario_version_mint
from n17q_engine.bundle import is_run_id
from n17q_engine.deciders import DECIDERS
from runs.assessments import run_assessments
from runs.models import Run
from runs.relaunch import relaunch_url
from runs.selectors import replay_runs_imported

from .comparison import comparison_build, run_outcome
from .confirm import LaunchUnconfirmed, launch_preview, replay_launch_confirmed
from .forms import CopySimilarForm, CounterfactualForm, ExcludeToolForm, LaunchForm, ModelAnswerForm
from .launch import (
    BUDGET_RESOURCES,
    BUTTONS,
    Button,
    LaunchOptions,
    ScenarioChoice,
    VaryRefused,
    checkpoint_choices,
    fault_choices,
    human_choices,
    launch_options,
    scenario_loaded,
    summary_digest,
)
from .missing import missing_fixture_view
from .models import Replay
from .regression import RegressionRefused, regression_fixtures, regression_invariants, regression_scenario_mint
from .services import ReplayRefused, replay_times

log = logging.getLogger(__name__)


def _audit(request: HtmxHttpRequest, action: str, target: str, detail: dict[str, Any]) -> None:
    audit_record(actor=request.user, action=action, target=target, detail=detail, request=request)


def _launch_form(
    spec: Button, options: LaunchOptions, chosen: ScenarioChoice | None, data: Any, run: Run | None = None
) -> LaunchForm:
    scenarios = [(c.ref, f"{c.ref} — {c.label}") for c in options.choices]
    initial = chosen.ref if chosen else None
    if spec.mode != "counterfactual":
        return LaunchForm(data, scenarios=scenarios, default=initial)
    sc = scenario_loaded(chosen.version) if chosen else None
    choices = {
        "policy": [(p, p) for p in (sc.policies if sc else [])],
        "decider": [(d, d) for d in sorted(DECIDERS)],
        "fault": [(f, f.replace(":", ": ")) for f in fault_choices(sc)],
        "budget_resource": [(r, r) for r in BUDGET_RESOURCES],
        "delay_tool": [(c.tool, c.tool) for c in (sc.contracts if sc else []) if c.effect_class == "mutation"],
        # The run's recorded checkpoints and human inputs (issue 18), one query each at most.
        "checkpoint": checkpoint_choices(run, sc) if run is not None else [("start", "start")],
        "human": human_choices(run) if run is not None else [("approved", "approved"), ("rejected", "rejected")],
    }
    return CounterfactualForm(data, scenarios=scenarios, default=initial, choices=choices)


@permission_required("runs.launch_replay", raise_exception=True)
@require_http_methods(["GET", "POST"])
def replay_new(request: HtmxHttpRequest, run_id: str, button: str) -> HttpResponse:
    """GET: what the button will do, for exactly the inputs given (htmx re-renders the `launch` partial on every
    change; without JavaScript, "Update summary" submits them by GET). POST: launch it, only if the summary the
    form carries (`summary_digest`) is still what would launch now."""
    if "csrfmiddlewaretoken" in request.GET:
        # "Update summary" without JavaScript submits the launch form by GET: keep its token out of the address.
        query = request.GET.copy()
        for key in ("csrfmiddlewaretoken", "summary_digest", "update"):
            query.pop(key, None)
        return redirect(f"{request.path}?{query.urlencode()}")
    run = get_object_or_404(Run, run_id=run_id)
    spec = BUTTONS.get(button)
    if spec is None:
        raise Http404(f"no button {button!r}")
    options = launch_options(run, others=True)
    option = options.buttons[spec.slug]
    data = request.POST if request.method == "POST" else request.GET
    wanted = data.get("scenario") or ""
    chosen = options.choice(wanted) or (options.choices[0] if options.choices else None)
    notes = []
    if wanted and chosen is not None and chosen.ref != wanted and spec.mode != "reconstruction":
        notes.append(
            f"{wanted} is not one of the scenario versions offered for this run (its recorded version, newer ones, "
            f"regression ones, authored ones): the summary is for {chosen.ref}, the version the form names."
        )
    # A reconstruction uses no scenario; it names the recorded one, never a derived one.
    version = options.recorded if spec.mode == "reconstruction" else (chosen.version if chosen else None)
    form = _launch_form(spec, options, chosen, request.POST if request.method == "POST" else None, run)
    vary: dict[str, str] = {}
    checkpoint = "start"
    connection = None  # an agent decider's live model connection (issue 18)
    if spec.mode == "counterfactual":
        probe = form if request.method == "POST" else _launch_form(spec, options, chosen, request.GET, run)
        if probe.is_bound and probe.is_valid():
            vary = probe.vary()
            checkpoint = probe.cleaned_data.get("checkpoint") or "start"
            connection = cast(CounterfactualForm, probe).chosen_model_connection()
        if request.method == "GET":
            form.initial.update({k: v for k, v in request.GET.items() if k in form.fields})
    if spec.mode == "counterfactual" and not vary and option.available:
        notes.append("Choose the one variable to change and its value: the summary then shows it.")

    summary, summary_error, error, status = None, None, None, 200
    if not option.available:
        summary_error = option.reason
    else:
        try:
            summary = launch_preview(
                run,
                mode=spec.mode,
                version=version,
                vary=vary,
                checkpoint=checkpoint,
                model_connection=connection,
                complete=False,  # shown while the variable is still being chosen; the launch requires it
            ).summary
        except (VaryRefused, ReplayRefused) as exc:
            summary_error = str(exc)

    if request.method == "POST":
        status = 400
        if not option.available:
            error = option.reason
        elif not form.is_valid() or summary is None:
            pass  # the form's or the summary's own message says why
        else:
            # The one rule of every door (replays.confirm): launched only when the digest the form carries is the
            # summary's now, and once (a second click on the same summary answers the replay the first queued).
            try:
                replay, created = replay_launch_confirmed(
                    run,
                    mode=spec.mode,
                    version=version,
                    vary=vary,
                    checkpoint=checkpoint,
                    model_connection=connection,
                    digest=request.POST.get("summary_digest") or "",
                    user=request.user,
                )
            except LaunchUnconfirmed as exc:
                error, summary = str(exc), exc.preview.summary
            except (VaryRefused, ReplayRefused) as exc:
                error = str(exc)
            else:
                if not created:
                    messages.info(request, f"Replay {replay.pk} of this very summary is already {replay.state}: shown.")
                # Audited by replay_create itself ("replay.create", with this request's user and address), inside
                # the launch's transaction; a second entry here would count one launch twice.
                return redirect("replays:replay-detail", pk=replay.pk)
    context = {
        "run": run,
        "spec": spec,
        "option": option,
        "options": options,
        "chosen": chosen,
        "form": form,
        "summary": summary,
        "summary_error": summary_error,
        "digest": summary_digest(summary) if summary else "",
        "error": error,
        "notes": notes,
    }
    template = (
        "replays/replay_new.html#launch" if request.htmx and request.method == "GET" else "replays/replay_new.html"
    )
    return render(request, template, context, status=status)


# The replays page lists the newest imported replay runs up to this many; the run list (`?replays=on`) has them all.
IMPORTED_REPLAYS_SHOWN = 50


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
    imported = list(replay_runs_imported(source=source)[: IMPORTED_REPLAYS_SHOWN + 1])
    context = {
        "page": page,
        "source": source,
        "source_run": source_run,
        "imported": imported[:IMPORTED_REPLAYS_SHOWN],
        "imported_more": len(imported) > IMPORTED_REPLAYS_SHOWN,
    }
    return render(request, "replays/replay_list.html", context)


def replay_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The replay page. Polled by htmx while it runs (`?poll=1`): the progress region only; when a polled
    replay ends on a missing fixture, the browser is sent to the missing-fixture page."""
    replay = get_object_or_404(Replay.objects.select_related("source_run", "scenario_version", "run"), pk=pk)
    context = {
        "replay": replay,
        "button": BUTTONS_BY_MODE.get(replay.mode),
        "outcome": run_outcome(replay.run) if replay.ended and replay.run else None,
        "times": replay_times(replay),
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
    report = comparison_build(replay.run)
    # Each run's qualitative assessments side by side (issue 39): beside the invariants, never one of them.
    qualitative = list(zip(run_assessments(report.source), run_assessments(replay.run), strict=True))
    return render(
        request,
        "replays/replay_comparison.html",
        {"replay": replay, "report": report, "outcome": run_outcome(replay.run), "qualitative": qualitative},
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
            "model_form": ModelAnswerForm(),
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
    return redirect(relaunch_url(replay.source_run.run_id, replay.mode, replay.vary, replay.checkpoint, version.ref))


@permission_required("runs.launch_replay", raise_exception=True)
@require_http_methods(["GET", "POST"])
def regression_new(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    run = get_object_or_404(Run, run_id=run_id)
    options = launch_options(run)
    option, base = options.buttons["regression"], options.recorded
    error = None
    if request.method == "POST":
        if not option.available:
            error = option.reason
        else:
            try:
                version = regression_scenario_mint(run=run, user=request.user)
            except RegressionRefused as exc:
                error = str(exc)
            else:
                _audit(request, "scenario.regression", f"scenario:{version.ref}", {"run": run.run_id})
                messages.success(request, f"Minted {version.ref}: its success criteria are {run.run_id}'s invariants.")
                launch = reverse("replays:replay-new", args=[run.run_id, "replay"])
                return redirect(f"{launch}?scenario={version.ref}")
    invariants = regression_invariants(run, base) if base else []
    selection = regression_fixtures(run, base, invariants) if base and option.available else None
    return render(
        request,
        "replays/regression_new.html",
        {
            "run": run,
            "base": base,
            "option": option,
            "invariants": invariants,
            "selection": selection,
            "error": error,
        },
        status=400 if error else 200,
    )
