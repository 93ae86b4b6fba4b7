"""The page of the flow "scenario from a trace" (`/runs/<run_id>/scenario/`, issue 37 point 3): its steps as the
service (`replays.trace_scenarios`) reports them, and its two actions, Propose and Launch. Thin: every rule is the
service's; the launch goes through the replays app's confirmation (the summary shown, then its digest posted)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from console.htmx import HtmxHttpRequest
from fixtures_review.review_rules import CAPTURE_PERM
from runs.models import Run

from .agents import agent_choices
from .confirm import LaunchUnconfirmed
from .trace_scenarios import (
    TraceScenarioRefused,
    trace_scenario_launch,
    trace_scenario_launch_preview,
    trace_scenario_propose,
    trace_scenario_status,
)


@require_http_methods(["GET", "POST"])
def run_scenario(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    run = get_object_or_404(Run, run_id=run_id)
    error, status, preview = None, 200, None
    action = request.POST.get("action") if request.method == "POST" else None
    agent = (request.POST.get("agent") if action == "launch" else request.GET.get("agent")) or ""
    name = (request.POST.get("scenario") or "").strip() if action == "propose" else ""
    if action == "propose" and not request.user.has_perm(CAPTURE_PERM):
        error, status = "proposing a scenario from a trace needs the operator or reviewer role", 403
    elif action == "propose":
        effect_classes = {
            key.removeprefix("effect_class:"): str(request.POST.get(key) or "")
            for key in request.POST
            if key.startswith("effect_class:") and request.POST.get(key)
        }
        try:
            proposal = trace_scenario_propose(run=run, name=name, effect_classes=effect_classes, user=request.user)
        except TraceScenarioRefused as exc:
            error, status = str(exc), 400
        else:
            said = "proposed" if proposal.created else "already holds these contracts:"
            messages.success(request, f"Scenario {said} {proposal.version.ref}.")
            return redirect(reverse("replays:run-scenario", args=[run.run_id]))
    elif action == "launch":
        if not request.user.has_perm("runs.launch_replay"):
            error, status = "launching a replay needs the operator role", 403
        else:
            try:
                replay, _created = trace_scenario_launch(
                    run=run, agent=agent, user=request.user, digest=request.POST.get("summary_digest") or ""
                )
            except LaunchUnconfirmed as exc:
                error, status, preview = str(exc), 409, exc.preview
            except TraceScenarioRefused as exc:
                error, status = str(exc), 400
            else:
                return redirect(reverse("replays:replay-detail", args=[replay.pk]))
    elif action is not None:
        error, status = f"unknown action {action[:40]!r}: propose or launch", 400
    state = trace_scenario_status(run)
    summary_error = None
    if agent and preview is None and state["latest"]:
        try:
            preview = trace_scenario_launch_preview(run, agent=agent)
        except TraceScenarioRefused as exc:
            summary_error = str(exc)
    context: dict[str, Any] = {
        "run": run,
        "s": state,
        "error": error,
        "name": name or state["scenario"] or "",
        "agents": agent_choices(),
        "agent": agent,
        "summary": preview.summary if preview else None,
        "digest": preview.digest if preview else "",
        "summary_error": summary_error,
    }
    return render(request, "replays/run_scenario.html", context, status=status)
