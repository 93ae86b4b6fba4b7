"""Scenario from a trace (issue 37 point 3): one flow that takes an imported run, proposes a scenario version from
what the trace says (contracts inferred where it says enough, the effect class asked where it does not), shows how
far its recordings have come (staged, approved, how many of the run's calls the latest version answers), and
launches a replay of a registered agent against that version, whose recorded run is the trace's own run.

The rules live here; the doors (`manage.py scenario_from_run`, `GET/POST /api/v1/runs/<run_id>/scenario/`, the page
`/runs/<run_id>/scenario/`) only call these functions:

- `trace_inference(run, effect_classes)`: the contracts the run's tool calls and recorded tool definitions imply
  (`n17q_engine.contract_inference`), with the effect classes a held version already pins filled in;
- `trace_scenario_propose(run=, name=, effect_classes=, user=)`: mints `name@1` (or the next version of a scenario of
  that name whose contracts agree) with the inferred contracts, an empty world and no fixtures, recorded from the run
  (`scenario.json`'s `source_runs`). The fixtures come through the ordinary staging and four-eyes review;
- `trace_scenario_status(run, name)`: what the flow has done and what still blocks a replay;
- `trace_scenario_launch_preview(run, agent=)` / `trace_scenario_launch(run=, agent=, user=, digest=)`: a
  counterfactual from the start whose decider is `agent:<name>` (or `recorded`), against the latest version, through
  the replays app's own confirmation (`replays.confirm`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from django.db import transaction
from django.db.models import Count

from fixtures_review.minting import _lock_scenario, fixture_request_digest, scenario_files_mint
from fixtures_review.models import ScenarioVersion, StagedRecording
from fixtures_review.review_rules import CAPTURE_PERM
from fixtures_review.scenarios import ScenarioRefused, loaded_scenario, scenario_import
from n17q_engine import canonical
from n17q_engine.agent.model import MODEL_TOOL
from n17q_engine.contract_inference import Inference, definitions_from_messages, infer_contracts
from n17q_engine.contracts import EFFECT_CLASSES, ContractError
from n17q_engine.identifiers import scenario_name_problem
from n17q_engine.package import PackageError, build_scenario
from n17q_engine.world import SNAPSHOT_FORMAT
from runs.models import Event

from .confirm import launch_preview, launch_version, replay_launch_confirmed
from .launch import VaryRefused
from .services import ReplayRefused

SOURCE = "trace"  # ScenarioVersion.source of a version proposed from a trace
MAX_CALLS_READ = 20_000  # tool calls read for the inference; a longer trace is refused rather than half-read


class TraceScenarioRefused(ValueError):
    """The flow cannot do what was asked; one line saying why and what to do."""


# --- reading the trace -----------------------------------------------------------------------------------------


def _events(run: Any, kind: str) -> list[dict[str, Any]]:
    rows = list(
        Event.objects.filter(run=run, kind=kind).order_by("seq").values_list("body", flat=True)[: MAX_CALLS_READ + 1]
    )
    if len(rows) > MAX_CALLS_READ:
        raise TraceScenarioRefused(f"run {run.run_id} holds more than {MAX_CALLS_READ} {kind} events")
    return rows


def _tool_calls(run: Any) -> list[dict[str, Any]]:
    return [c for c in _events(run, "tool.call") if isinstance(c.get("tool"), str) and c.get("tool") != MODEL_TOOL]


def trace_inference(run: Any, effect_classes: Mapping[str, str] | None = None) -> Inference:
    """The contracts the run implies: its tool calls' arguments, the tool definitions recorded with its model calls
    (and an OpenInference call's inline `tool_parameters`), the effect class a call declares. A tool the scenario's
    latest version already pins keeps that version's effect class (it was asked once)."""
    calls = _tool_calls(run)
    proposals = _events(run, "model.proposal")
    definitions: dict[str, dict[str, Any]] = {}
    for proposal in proposals:
        for name, definition in definitions_from_messages(proposal.get("input_messages")).items():
            definitions.setdefault(name, definition)
    declared: dict[str, str] = {}
    for call in calls:
        params = call.get("tool_parameters")
        if isinstance(params, dict) and call["tool"] not in definitions:
            definitions[call["tool"]] = {
                "name": call["tool"],
                "description": call.get("description"),
                "parameters": params,
                "annotations": {},
            }
        if call.get("effect_class") in EFFECT_CLASSES:
            declared.setdefault(call["tool"], call["effect_class"])
    given = dict(effect_classes or {})
    pinned: set[str] = set()
    latest = _latest(_scenario_name(run, None))
    if latest is not None:
        for contract in _contracts_of(latest):
            tool = str(contract.get("tool"))
            if tool not in given:
                given[tool] = str(contract.get("effect_class"))
                pinned.add(tool)
    inference = infer_contracts(
        ((c["tool"], c.get("request")) for c in calls),
        definitions=definitions,
        declared_effects=declared,
        effect_classes=given,
        model_calls=len(proposals),
    )
    for inferred in inference.tools:
        if inferred.tool in pinned and inferred.effect_source == "given" and latest is not None:
            inferred.effect_source = f"pinned by {latest.ref}"
    return inference


def _scenario_name(run: Any, name: str | None) -> str | None:
    """The scenario the flow works on: the one named, else the run's own, else the one proposed from it."""
    if name:
        return name
    if run.scenario_name:
        return str(run.scenario_name)
    for version in ScenarioVersion.objects.filter(source=SOURCE).order_by("-id").defer("manifest"):
        if run.run_id in version.scenario_json.get("source_runs", []):
            return version.name
    return None


def _latest(name: str | None) -> ScenarioVersion | None:
    if not name:
        return None
    return ScenarioVersion.objects.filter(name=name).order_by("-version").first()


def _contracts_of(version: ScenarioVersion) -> list[dict[str, Any]]:
    return [c for c in json.loads(version.files["contracts.json"]) if isinstance(c, dict)]


# --- proposing -------------------------------------------------------------------------------------------------


@dataclass
class Proposal:
    version: ScenarioVersion
    created: bool  # False: the latest version already holds these contracts, recorded from this run
    inference: Inference

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.version.ref,
            "created": self.created,
            "contracts": [c["tool"] for c in _contracts_of(self.version)],
            "inference": self.inference.to_json(),
        }


def trace_scenario_propose(
    *, run: Any, name: str, effect_classes: Mapping[str, str] | None = None, user: Any = None
) -> Proposal:
    """Mint a scenario version from the trace: `name@1` when no version of `name` is held, else the next version of
    it (its contracts and fixtures kept, the inferred contracts it lacks added, the run added to its source runs).
    Refused in one line: a tool whose effect class is needed, a field the trace cannot type, a held contract of the
    same tool that disagrees with the inferred one, a run recorded in another scenario, a user without the role."""
    if user is not None and getattr(user, "is_authenticated", False) and not user.has_perm(CAPTURE_PERM):
        raise TraceScenarioRefused("proposing a scenario from a trace needs the operator or reviewer role")
    name = (name or "").strip()
    problem = scenario_name_problem(name) if name else "must be given"
    if problem is not None:
        raise TraceScenarioRefused(f"scenario: a name {problem}")
    if run.scenario_name and run.scenario_name != name:
        raise TraceScenarioRefused(
            f"scenario: run {run.run_id} was recorded in {run.scenario_name}, not {name}: propose {run.scenario_name}"
        )
    bad = sorted(f"{tool}={value}" for tool, value in (effect_classes or {}).items() if value not in EFFECT_CLASSES)
    if bad:
        raise TraceScenarioRefused(f"effect class: read or mutation, got {', '.join(bad)}")
    inference = trace_inference(run, effect_classes)
    if not inference.tools and not inference.model_calls:
        raise TraceScenarioRefused(f"run {run.run_id} made no tool call and no model call: nothing to propose")
    if inference.problems:
        raise TraceScenarioRefused("the trace cannot type: " + "; ".join(inference.problems))
    if inference.asked:
        raise TraceScenarioRefused(
            f"effect class needed for {', '.join(inference.asked)}: say whether each reads or mutates "
            "(--effect-class TOOL=read|mutation, or the effect_classes field)"
        )
    contracts = inference.contracts()
    with transaction.atomic():
        _lock_scenario(name)
        latest = _latest(name)
        if latest is None:
            return Proposal(_first_version(run, name, contracts, user), True, inference)
        held = {str(c.get("tool")): c for c in _contracts_of(latest)}
        disagree = []
        for contract in contracts:
            mine = held.get(contract["tool"])
            if mine is None:
                continue
            if contract["tool"] == MODEL_TOOL:
                continue  # a scenario may pin a later model.chat revision (docs/agents.md): it is kept
            if _shape(mine) != _shape(contract):
                disagree.append(f"{contract['tool']} (held revision {mine.get('revision')})")
        if disagree:
            raise TraceScenarioRefused(
                f"scenario {name}: {latest.ref} pins contracts that disagree with what the trace says for "
                f"{', '.join(disagree)}: propose another scenario name, or declare a new contract revision "
                "(declare_contract)"
            )
        files = {n: json.loads(text) for n, text in latest.files.items()}
        missing = [c for c in contracts if c["tool"] not in held]
        meta = files["scenario.json"]
        sources = list(meta.get("source_runs", []))
        if not missing and run.run_id in sources:
            return Proposal(latest, False, inference)
        files["contracts.json"] = sorted([*files["contracts.json"], *missing], key=lambda c: str(c.get("tool")))
        if run.run_id not in sources:
            meta["source_runs"] = [*sources, run.run_id]
        try:
            version = scenario_files_mint(base=latest, files=files, user=user, source=SOURCE, _locked=True)
        except ScenarioRefused as exc:
            raise TraceScenarioRefused(str(exc)) from None
    return Proposal(version, True, inference)


def _shape(contract: Mapping[str, Any]) -> tuple[Any, ...]:
    """What must agree between a held contract and an inferred one: the effect class and the fields."""
    return (contract.get("effect_class"), canonical.digest_json(contract.get("fields") or {}))


def _first_version(run: Any, name: str, contracts: list[dict[str, Any]], user: Any) -> ScenarioVersion:
    start = _instant(run.first_logical_at or run.created_at)
    files = {
        "scenario.json": {
            "name": name,
            "version": 1,
            "seed": f"{name}/trace",
            "clock_start": start,
            "scope": "scenario",
            "world": f"{name}-w1",
            "source_runs": [run.run_id],
            "description": (
                f"Proposed from the trace of run {run.run_id}: contracts inferred from its calls and the tool "
                "definitions it recorded; fixtures come from its reviewed recordings."
            ),
        },
        "contracts.json": contracts,
        "fixtures.json": [],
        "world.json": {
            "format": SNAPSHOT_FORMAT,
            "name": f"{name}-w1",
            "parent": None,
            "revision": 0,
            "resources": {},
            "deleted": {},
            "pending": [],
        },
        "workspaces.json": {},
        "policy.json": _policy(run),
    }
    try:
        package = build_scenario(files)
        version, _created = scenario_import(package, user=user, source=SOURCE)
    except (PackageError, ScenarioRefused) as exc:
        raise TraceScenarioRefused(f"{name}@1 would not load: {exc}") from None
    return version


def _policy(run: Any) -> dict[str, Any]:
    """The run's policy revision, with no rules (a trace records none): the revision the run names stays its name."""
    revision = str(run.policy_revision or "").strip() or "trace-policy@1"
    return {"current": revision, "revisions": {revision: {"rules": [], "require_all": True, "lineage_gate": True}}}


def _instant(moment: Any) -> str:
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


# --- status ----------------------------------------------------------------------------------------------------


def trace_scenario_status(run: Any, name: str | None = None) -> dict[str, Any]:
    """What the flow has done for `run` (and `name`, default the scenario proposed from it), and what still blocks a
    replay. See docs/formats/recordings.md, "Scenario from a trace", for the JSON's keys."""
    name = _scenario_name(run, name)
    inference = trace_inference(run)
    calls = _tool_calls(run)
    results = _events(run, "tool.result")
    call_tools = {c.get("id"): c.get("tool") for c in calls}
    tool_results = [r for r in results if call_tools.get(r.get("call_id"))]
    states = dict(
        StagedRecording.objects.filter(source_run=run.run_id)
        .values_list("state")
        .annotate(n=Count("id"))
        .values_list("state", "n")
    )
    model_states = dict(
        StagedRecording.objects.filter(source_run=run.run_id, tool=MODEL_TOOL)
        .values_list("state")
        .annotate(n=Count("id"))
        .values_list("state", "n")
    )
    latest = _latest(name)
    version: dict[str, Any] | None = None
    blocks: list[str] = []
    if latest is None:
        blocks.append(
            f"no version of {name} is held yet: propose one" if name else "no scenario is proposed from this run yet"
        )
        if inference.asked:
            blocks.append(f"effect class needed for {', '.join(inference.asked)}")
        if inference.problems:
            blocks.append("the trace cannot type: " + "; ".join(inference.problems))
    else:
        version = _answered(latest, calls)
        unanswered = version["calls"] - version["answered"]
        if version["unreadable"]:
            blocks.append(version["unreadable"])
        elif unanswered:
            blocks.append(
                f"{unanswered} of the run's {version['calls']} tool calls have no approved fixture in {latest.ref}: "
                "stage the run's tool results and have a second reviewer approve them"
            )
        if inference.model_calls and version["model_fixtures"] == 0:
            blocks.append(
                f"{latest.ref} holds no model answer: an agent replay stops at its first model call until the run's "
                "model calls are staged and approved as model.chat recordings"
            )
    waiting = states.get(StagedRecording.State.STAGED, 0)
    if waiting:
        blocks.append(f"{waiting} recording(s) from this run wait for review")
    mutations = [t.tool for t in inference.tools if t.effect_class == "mutation"]
    return {
        "run": run.run_id,
        "scenario": name,
        "contracts": inference.to_json(),
        "mutations": mutations,
        "trace": {
            "tool_calls": len(calls),
            "tool_results": len(tool_results),
            "model_calls": inference.model_calls,
            "tools": dict(sorted(Counter(str(c["tool"]) for c in calls).items())),
        },
        "recordings": {
            "staged": waiting,
            "approved": states.get(StagedRecording.State.PROMOTED, 0),
            "rejected": states.get(StagedRecording.State.REJECTED, 0),
            "model_calls": {
                "staged": model_states.get(StagedRecording.State.STAGED, 0),
                "approved": model_states.get(StagedRecording.State.PROMOTED, 0),
                "rejected": model_states.get(StagedRecording.State.REJECTED, 0),
            },
        },
        "latest": version,
        "blocks": blocks,
        "ready": latest is not None and not blocks,
    }


def _answered(version: ScenarioVersion, calls: list[dict[str, Any]]) -> dict[str, Any]:
    """How many of the run's tool calls `version` answers: each call normalized under the version's contract for its
    tool, keyed (tool, revision, request digest) as a replay looks it up."""
    out: dict[str, Any] = {
        "ref": version.ref,
        "version": version.version,
        "calls": len(calls),
        "answered": 0,
        "fixtures": 0,
        "model_fixtures": 0,
        "unanswered_tools": {},
        "unreadable": None,
    }
    try:
        sc = loaded_scenario(version)
    except (PackageError, ScenarioRefused) as exc:
        out["unreadable"] = f"{version.ref} cannot be loaded: {exc}"
        return out
    items = version.fixture_items
    out["fixtures"] = len(items)
    out["model_fixtures"] = sum(1 for f in items if f.get("tool") == MODEL_TOOL)
    keys = {(f.get("tool"), f.get("contract_revision"), fixture_request_digest(f)) for f in items}
    missing: Counter[str] = Counter()
    for call in calls:
        tool = call["tool"]
        key = None
        if tool in sc.contracts:
            contract = sc.contracts.get(tool)
            try:
                normalized = contract.normalize(call.get("request"))
            except ContractError:
                normalized = None
            if normalized is not None:
                key = (tool, contract.revision, canonical.request_digest(normalized))
        if key is not None and key in keys:
            out["answered"] += 1
        else:
            missing[tool] += 1
    out["unanswered_tools"] = dict(sorted(missing.items()))
    return out


# --- launching -------------------------------------------------------------------------------------------------


def _launch_inputs(run: Any, agent: str | None) -> tuple[Any, dict[str, str]]:

    name = _scenario_name(run, None)
    latest = _latest(name)
    if latest is None:
        raise TraceScenarioRefused(f"no scenario is proposed from run {run.run_id} yet: propose one first")
    decider = "recorded" if not agent or agent == "recorded" else f"agent:{agent.removeprefix('agent:')}"
    try:
        version = launch_version(run, mode="counterfactual", scenario=latest.ref)
    except ReplayRefused as exc:
        raise TraceScenarioRefused(str(exc)) from None
    return version, {"decider": decider}


def trace_scenario_launch_preview(run: Any, *, agent: str | None) -> Any:
    """The launch summary (replays.confirm.LaunchPreview) of the flow's replay: a counterfactual from the start whose
    decider is `agent:<agent>` (`recorded` when no agent is named), against the latest version."""

    version, vary = _launch_inputs(run, agent)
    try:
        return launch_preview(
            run, mode="counterfactual", version=version, vary=vary, checkpoint="start", model_connection=None
        )
    except (VaryRefused, ReplayRefused) as exc:
        raise TraceScenarioRefused(str(exc)) from None


def trace_scenario_launch(*, run: Any, agent: str | None, user: Any, digest: str | None) -> tuple[Any, bool]:
    """Launch the flow's replay once the person confirmed its summary (`digest`, as `replays.confirm` requires):
    (the replay, created). Its source run is `run`, the trace itself, so its comparison page compares with the trace.
    Raises replays.confirm.LaunchUnconfirmed (with the summary as it is now) for a missing or stale digest."""

    version, vary = _launch_inputs(run, agent)
    try:
        return replay_launch_confirmed(
            run,
            mode="counterfactual",
            version=version,
            vary=vary,
            checkpoint="start",
            model_connection=None,
            digest=digest,
            user=user,
        )
    except (VaryRefused, ReplayRefused) as exc:
        raise TraceScenarioRefused(str(exc)) from None
