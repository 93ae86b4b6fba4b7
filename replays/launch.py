"""What a replay button says before anything starts (DESIGN §6): the pre-launch summary.

`launch_summary(run, mode=…, vary=…, version=…, checkpoint=…)` is computed from the source run and the pinned
scenario version only, and is stored on the `Replay` when it is created (`Replay.environment`): the page that
shows it before launch and the replay page afterwards show the same facts, and nothing the replay does can
change them. `vary_check` refuses a variation the scenario cannot honour before a replay is queued;
`source_check` refuses a checkpoint or a human choice the source run does not hold (issue 18: branching from a
recorded checkpoint, a human choice as the variable). `checkpoint_choices` and `human_choices` are what the
counterfactual form offers.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import OuterRef, Q, Subquery
from django.db.models.fields.json import KeyTextTransform

from fixtures_review.models import ScenarioVersion
from fixtures_review.scenarios import ScenarioRefused, loaded_scenario
from n17q_engine.canonical import digest_json
from n17q_engine.contracts import ContractError
from n17q_engine.deciders import DECIDERS, HUMAN_CHOICES
from n17q_engine.package import PackageError, ScenarioPackage, check_fault, vary_value_problem
from n17q_engine.sandbox_child import NAMESPACE_HOST
from n17q_engine.vocabulary import FAULT_STAGES
from n17q_engine.world import namespace_for, parse_time
from runs.facts import facts_of
from runs.models import Event, Run


@dataclass(frozen=True)
class Button:
    slug: str
    mode: str
    label: str
    question: str
    truth: str
    explains: str


BUTTONS = {
    b.slug: b
    for b in (
        Button(
            "inspect",
            "reconstruction",
            "Inspect recorded run",
            "What exactly happened, judged by today's checks?",
            "exact",
            "The recorded events re-projected through today's lineage checks. No model, no tools, no world: "
            "nothing is decided again and nothing is called.",
        ),
        Button(
            "replay",
            "rerun",
            "Replay in fixtures",
            "Does the recorded trajectory hold up against the pinned fixtures and today's policy?",
            "comparable",
            "The original versions and the recorded decisions, answered by the scenario's fixtures and "
            "simulated world, in the sandbox. A request no fixture answers stops the replay as incomplete "
            "test world; nothing is ever fetched.",
        ),
        Button(
            "counterfactual",
            "counterfactual",
            "Create counterfactual",
            "What changes when exactly one declared variable changes?",
            "experiment",
            "An experiment: one variable changed from a checkpoint, in a child world of the fixture world. "
            "Its result describes that branch, never the original history.",
        ),
    )
}
BUTTON_FOR_MODE = {b.mode: b for b in BUTTONS.values()}

# The counterfactual variables (n17q_engine.package.VARY_KEYS) in the words the form uses.
VARIABLES = {
    "policy": "policy revision",
    "decider": "decider",
    "human": "human choice",
    "fault": "fault stage",
    "clock": "clock",
    "budget": "budget",
    "delay": "visibility delay",
}
BUDGET_RESOURCES = ("tokens", "turns", "compute_s", "artifacts")


class VaryRefused(ValueError):
    pass


def scenario_loaded(version: ScenarioVersion | None) -> ScenarioPackage | None:
    if version is None:
        return None
    try:
        return loaded_scenario(version)
    except (PackageError, ScenarioRefused) as exc:
        raise VaryRefused(f"{version.ref} cannot be loaded: {exc}") from None


def vary_check(sc: ScenarioPackage | None, vary: dict[str, str]) -> None:
    """Refuse, in one sentence, a variation the engine would refuse after queueing."""
    for key, value in vary.items():
        head, _, rest = key.partition(".")
        if head == "decider" and value.startswith("agent:"):
            _agent_or_refuse(value)
        elif head == "decider" and value not in DECIDERS:
            raise VaryRefused(f"unknown decider {value!r} (known: {', '.join(sorted(DECIDERS))})")
        if key == "human" and value not in ("approved", "rejected"):
            raise VaryRefused("human choice: approved or rejected")
        if head == "human" and rest and value not in HUMAN_CHOICES:
            raise VaryRefused(f"human.{rest}: the choice is one of {', '.join(HUMAN_CHOICES)}, not {value!r}")
        problem = vary_value_problem(key, value)
        if problem:
            raise VaryRefused(problem)
        if head == "budget" and rest not in BUDGET_RESOURCES:
            raise VaryRefused(f"budget.{rest}: not a budget resource (one of {', '.join(BUDGET_RESOURCES)})")
        if sc is None:
            continue
        if head == "policy" and value not in sc.policies:
            raise VaryRefused(f"policy {value!r} is not in {sc.name}@{sc.version} (held: {', '.join(sc.policies)})")
        if head == "fault":
            tool, _, stage = value.partition(":")
            try:
                check_fault(sc.contracts, {"tool": tool, "stage": stage}, "fault")
            except PackageError as exc:
                raise VaryRefused(str(exc)) from None
        if head == "delay" and (rest not in sc.contracts or sc.contracts.get(rest).effect_class != "mutation"):
            raise VaryRefused(f"delay.{rest}: not a mutation contract of {sc.name}@{sc.version}")


def _agent_or_refuse(decider: str) -> Any:
    """A registered agent (issue 18) that can run: its folder still has the digest pinned at registration."""
    from .agents import AgentRefused, agent_check

    try:
        return agent_check(decider)
    except AgentRefused as exc:
        raise VaryRefused(str(exc)) from None


def _agent_summary(decider: str, sc: ScenarioPackage | None) -> dict[str, Any]:
    """What the summary says of an agent decider: the agent, its pinned digest, where its model answers from."""
    from n17q_engine.agent.model import MODEL_CONTRACT, MODEL_TOOL

    from .agents import agent_json

    agent = agent_json(_agent_or_refuse(decider))
    model_fixtures = len([f for f in sc.fixtures if f.tool == MODEL_TOOL]) if sc is not None else 0
    contract = sc is not None and MODEL_TOOL in sc.contracts
    return {
        "name": agent["name"],
        "version": agent["version"],
        "decider": decider,
        "folder": agent["folder"],
        "command": agent["command"],
        "digest": agent["digest"],
        "environment": agent["environment_note"],
        "requirements_digest": agent["requirements_digest"],
        "model_source": "fixtures",
        "model_note": (
            f"model fixtures: {model_fixtures} recorded {MODEL_TOOL} response(s) in the scenario version; a request "
            "none answers stops the run as incomplete test world"
            if contract
            else f"model fixtures: the scenario version pins no {MODEL_TOOL} contract and holds no model answer; the "
            f"built-in contract (revision {MODEL_CONTRACT['revision']}) normalizes the agent's first model request and "
            "the run stops on it as incomplete test world (stage an answer from the missing-fixture page)"
        ),
        # The address the agent is given (docs/agents.md), not 127.0.0.1: that is not local inside the sandbox.
        "runs": "as a separate process inside the sandbox: its tools over MCP on its stdin/stdout, its model at "
        f"{NAMESPACE_HOST} of the sandbox's own network namespace (OPENAI_BASE_URL); never degraded",
    }


# --- branching from a checkpoint, human choices (issue 18) ---------------------------------------------------------

CHECKPOINTS_SHOWN = 200  # a run with more checkpoints offers its first 200 (and start)


@dataclass(frozen=True)
class CheckpointFacts:
    """A recorded checkpoint as the form and the summary describe it: what the recording held there."""

    id: str
    seq: int
    logical: str
    world_revision: Any
    workspaces: dict[str, Any]
    before: str  # "<event id> (<kind>)" of the event before it, or ""

    @property
    def label(self) -> str:
        trees = ", ".join(f"{ws} (tree {str(tree)[:15]}…)" for ws, tree in sorted(self.workspaces.items()))
        return (
            f"{self.id}: logical {self.logical}, world revision {self.world_revision}, "
            f"workspaces {trees or 'none'}{f', after {self.before}' if self.before else ''}"
        )


def run_checkpoints(run: Run, only: str | None = None) -> list[CheckpointFacts]:
    """The source run's `checkpoint` events in order, each with the event before it. One query."""
    before = Event.objects.filter(run=run, seq__lt=OuterRef("seq")).order_by("-seq")
    rows = (
        Event.objects.filter(run=run, kind="checkpoint", **({"event_id": only} if only else {}))
        .annotate(before_id=Subquery(before.values("event_id")[:1]), before_kind=Subquery(before.values("kind")[:1]))
        .order_by("seq")
        .values_list("event_id", "seq", "body", "before_id", "before_kind")[:CHECKPOINTS_SHOWN]
    )
    return [
        CheckpointFacts(
            event_id,
            seq,
            str(((body or {}).get("at") or {}).get("logical") or (body or {}).get("clock") or ""),
            (body or {}).get("world_revision"),
            dict((body or {}).get("workspaces") or {}),
            f"{before_id} ({before_kind})" if before_id else "",
        )
        for event_id, seq, body, before_id, before_kind in rows
    ]


def checkpoint_choices(run: Run, sc: ScenarioPackage | None) -> list[tuple[str, str]]:
    start = f"start: the run's start, world revision {sc.world.get('revision') if sc else 0}, clock " + (
        sc.clock_start if sc else "as recorded"
    )
    return [("start", start)] + [(c.id, c.label) for c in run_checkpoints(run)]


def human_choices(run: Run) -> list[tuple[str, str]]:
    """The run's human inputs that decide an approval of an effect, each with the choices it could be varied to
    (as `human.<id>=<choice>` values), after the two whole-run choices of the plain `human` variable."""
    out = [("approved", "every recorded approval: approved"), ("rejected", "every recorded approval: rejected")]
    for event_id, action, role, _approval in _human_inputs(run):
        for choice in HUMAN_CHOICES:
            if choice != action:
                out.append((f"{event_id}={choice}", f"{event_id} ({role}, recorded: {action}) → {choice}"))
    return out


def _human_inputs(run: Run) -> list[tuple[str, str, str, str]]:
    """(input id, recorded action, actor role, the approval it decides) for each human input followed by an
    approval of an effect by the same role (the engine's rule, n17q_engine.replay.state `_human_choice`). Three
    queries."""
    inputs = list(
        Event.objects.filter(run=run, kind="human.input").order_by("seq").values_list("event_id", "seq", "body")[:200]
    )
    if not inputs:
        return []
    approvals = list(
        Event.objects.filter(run=run, kind="approval.recorded", seq__gt=inputs[0][1])
        .order_by("seq")
        .values_list("event_id", "seq", "body")[:1000]
    )
    intents = set(
        Event.objects.filter(
            run=run, kind="effect.intent", event_id__in=[str((b or {}).get("subject")) for _i, _s, b in approvals]
        ).values_list("event_id", flat=True)
    )
    out = []
    for event_id, seq, body in inputs:
        role = (body or {}).get("actor_role")
        decided = next(
            (
                a_id
                for a_id, a_seq, a_body in approvals
                if a_seq > seq and (a_body or {}).get("actor_role") == role and (a_body or {}).get("subject") in intents
            ),
            None,
        )
        if decided is not None:
            out.append((event_id, str((body or {}).get("action")), str(role), decided))
    return out


def source_check(run: Run, *, mode: str, vary: dict[str, str], checkpoint: str) -> CheckpointFacts | None:
    """Refuse, in one sentence, a checkpoint or a human choice the source run does not hold (the engine would
    refuse it after queueing). Returns the checkpoint's facts (None: the run's start)."""
    facts = None
    if checkpoint != "start":
        if mode == "reconstruction":
            raise VaryRefused("a reconstruction re-projects the whole run: it starts at the run's start only")
        found = run_checkpoints(run, only=checkpoint)
        if not found:
            held = ", ".join(["start", *(c.id for c in run_checkpoints(run))][:12])
            raise VaryRefused(f"checkpoint {checkpoint!r}: run {run.run_id} holds no checkpoint by that id ({held})")
        facts = found[0]
    for key, value in vary.items():
        head, _, rest = key.partition(".")
        if head == "human" and rest:
            known = {i: action for i, action, _role, _approval in _human_inputs(run)}
            if rest not in known:
                raise VaryRefused(
                    f"human.{rest}: not a human input of {run.run_id} that decides an approval of an effect"
                )
            if known[rest] == value:
                raise VaryRefused(f"human.{rest}: the recorded choice was already {value!r}: nothing changes")
            if facts is not None:
                at = Event.objects.filter(run=run, event_id=rest).values_list("seq", flat=True).first() or 0
                if at <= facts.seq:
                    raise VaryRefused(
                        f"human.{rest} comes before checkpoint {facts.id}, whose history the branch restores as "
                        "recorded; choose an input after it, or branch earlier"
                    )
        if head == "clock" and facts is not None:
            try:
                later = parse_time(value) >= parse_time(facts.logical)
            except (TypeError, ValueError):
                later = True  # vary_check says what is wrong with the value itself
            if not later:
                raise VaryRefused(
                    f"clock {value} is before checkpoint {facts.id} ({facts.logical}): a branch resumes at or after "
                    "its checkpoint, time does not run back"
                )
    return facts


def fault_choices(sc: ScenarioPackage | None) -> list[str]:
    if sc is None:
        return []
    return [f"{c.tool}:{stage}" for c in sc.contracts for stage in FAULT_STAGES if stage in c.fault_stages]


def _fixture_completeness(run: Run, sc: ScenarioPackage) -> dict[str, Any]:
    """Each recorded tool call of the source run against the pinned version's fixture keys.

    A held key is necessary, not sufficient: a fixture also selects on world state, which only the replay
    itself reaches. Calls the recording never made (a status lookup after a lost response, say) cannot be
    counted here; the replay reports them as `fixture.missing` when it gets there.
    """
    keys = {f.key for f in sc.fixtures}
    calls = Event.objects.filter(run=run, kind="tool.call").order_by("seq").values_list("event_id", "body")
    total = 0
    missing: list[dict[str, Any]] = []
    for event_id, body in calls.iterator(2000):
        total += 1
        tool, revision, digest = body.get("tool"), body.get("contract_revision"), body.get("request_digest")
        if revision == 0 and tool in sc.contracts:
            # No contract recorded (a run converted from a trace): the replay uses the pinned one (deciders), so the
            # call is looked up as the replay will, its request normalized under it.
            contract = sc.contracts.get(tool)
            revision = contract.revision
            with contextlib.suppress(ContractError):  # a request the contract refuses keeps its recorded digest
                digest = contract.digest(body.get("request"))[1]
        why = None
        if sc.excluded(tool):
            why = f"excluded from the scenario: {sc.excluded(tool)}"
        elif tool not in sc.contracts:
            why = "no contract for this tool in the scenario version"
        elif (tool, revision, digest) not in keys:
            why = "no fixture holds this request"
        if why and len(missing) < 50:
            missing.append(
                {"call": event_id, "tool": tool, "contract_revision": revision, "request_digest": digest, "why": why}
            )
        elif why:
            missing.append({"call": "…", "tool": tool, "why": "and more"})
    return {
        "recorded_calls": total,
        "answered": total - len([m for m in missing if m.get("call") != "…"]),
        "missing": missing,
        "fixtures": len(sc.fixtures),
        "synthetic": sorted(f.id for f in sc.fixtures if f.provenance.synthetic),
        "excluded": [dict(item) for item in sc.excluded_tools],
        "uncovered": list(sc.uncovered),
        "contracts_without_fixture": sorted(
            f"{c.tool} r{c.revision}" for c in sc.contracts if c.tool not in {f.tool for f in sc.fixtures}
        ),
    }


def _checkpoint_note(run: Run, facts: CheckpointFacts | None, version: ScenarioVersion | None, mode: str) -> str:
    if facts is None:
        return "start: the run's start; the whole run is replayed" + (
            "" if mode == "reconstruction" else " and compared"
        )
    restore = ""
    if version is not None:
        sc = scenario_loaded(version)
        if sc is not None:
            keys = {f.key for f in sc.fixtures}
            calls = Event.objects.filter(run=run, kind="tool.call", seq__lt=facts.seq).values_list("event_id", "body")
            lacking = [
                event_id
                for event_id, body in calls[:5000]
                if not sc.excluded(body.get("tool"))
                and (body.get("tool"), body.get("contract_revision"), body.get("request_digest")) not in keys
            ]
            restore = "; restoring it re-runs the recorded history before it against the fixtures, where " + (
                f"{len(lacking)} recorded call(s) have no fixture for their exact request "
                f"({', '.join(lacking[:5])}): the replay would stop there as incomplete test world"
                if lacking
                else "every recorded call has a fixture for its exact request"
            )
    return (
        f"{facts.label}. The history up to it is the recording's, rebuilt by re-running its recorded decisions; "
        f"the variable applies from it, and only the segment after it is compared{restore}"
    )


def launch_summary(
    run: Run,
    *,
    mode: str,
    vary: dict[str, str] | None,
    version: ScenarioVersion | None,
    checkpoint: str = "start",
    model_connection: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The facts a button shows before it starts anything; see the module docstring. Raises `VaryRefused` for
    a checkpoint or human choice the run does not hold (`source_check`). `model_connection` (an agent decider's
    live model, issue 18) makes the run a fresh comparison run, not a replay, and the summary says so."""
    vary = dict(vary or {})
    facts = source_check(run, mode=mode, vary=vary, checkpoint=checkpoint)
    button = BUTTON_FOR_MODE[mode]
    sc = scenario_loaded(version) if mode != "reconstruction" else None
    decider = DECIDERS.get(vary.get("decider", "recorded"))
    model = dict(run.manifest_run.get("model") or {"name": run.model_name, "version": run.model_version})
    model_note = "the recorded model's proposals, replayed"
    if mode == "reconstruction":
        model_note = "no model: the recorded proposals are re-projected as they are"
    elif decider is not None and decider.model:
        model, model_note = dict(decider.model), f"the {decider.name} decider proposes instead of the recording"
    agent = None
    if mode == "counterfactual" and str(vary.get("decider", "")).startswith("agent:"):
        agent = _agent_summary(vary["decider"], sc)
        if model_connection:
            agent.update(
                model_source="live",
                model_note=f"relayed live by the worker through the approved model connection "
                f"{model_connection['connection']} to {model_connection['base_url']} with the credential named "
                f"{model_connection['credential_name']} in the worker's environment (never inside the sandbox, never "
                f"stored); every call is recorded with origin live, at most {model_connection['max_calls']} of them",
            )
        model = {"name": agent["decider"], "version": agent["digest"]}
        model_note = "your agent decides from the branch point; where its model's answers come from: Agent, below"
    isolation = {
        "network": "its own network namespace with loopback down: no route to anything",
        "degraded_allowed": settings.N17Q_ALLOW_DEGRADED_ISOLATION,
        "level": "netns or degraded (N17Q_ALLOW_DEGRADED_ISOLATION=1)"
        if settings.N17Q_ALLOW_DEGRADED_ISOLATION
        else "netns (refused when no namespace can be made)",
    }
    summary: dict[str, Any] = {
        "mode": mode,
        "button": button.label,
        "question": button.question,
        "truth": button.truth,
        "source_run": run.run_id,
        "vary": vary,
        "checkpoint": _checkpoint_note(run, facts, version, mode),
        "model": {"name": model.get("name"), "version": model.get("version"), "note": model_note},
        "isolation": isolation,
        "cannot_touch": [
            "the network: no route, no DNS, no live client in the sandbox",
            "credentials: the sandbox's environment is an allowlist without any",
            "the live world: no live connection exists; effects go to the fixture world only",
            "the source run: history is append-only, the replay becomes a new child run",
            "the database and other replays: the sandbox reads a package and writes a log",
        ],
    }
    if agent is not None:  # added keys (issue 18): the agent, its digest and its model source
        summary["agent"] = agent
        if model_connection:
            summary.update(
                truth="fresh comparison",
                run_label="a fresh comparison run, not a replay: the agent's model answers live, so nothing "
                "guarantees the same answers again",
                model_connection={
                    "connection": model_connection["connection"],
                    "base_url": model_connection["base_url"],
                    "credential_name": model_connection["credential_name"],
                    "max_calls": model_connection["max_calls"],
                },
            )
        summary["isolation"] = {
            **isolation,
            "network": "its own network namespace: its own address on its loopback (the agent's model endpoint), and "
            "every other route, 127.0.0.1 included, into the engine's network watch, which records an attempt as a "
            "sandbox.violation, stops the run and forwards nothing",
            "level": "netns (an agent replay is refused when no namespace can be made, whatever the setting)",
        }
    if mode == "reconstruction":
        summary.update(
            scenario=f"{version.ref}" if version else None,
            policy={"revision": run.policy_revision, "note": "as recorded; today's lineage checks judge it"},
            workspaces=[
                {
                    "id": ws["id"],
                    "base_digest": ws.get("base_digest"),
                    "overlay_digest": ws.get("overlay_digest"),
                    "overlay_revision": ws.get("overlay_revision"),
                    "environment_revision": ws.get("environment_revision"),
                    "derived_from": ws.get("derived_from"),
                    "relation": ws.get("relation"),
                    "state": ws.get("state"),
                }
                for ws in facts_of(run)["workspaces"]["items"]
            ],
            workspace_note="as recorded (re-projected, not rebuilt)",
            workspace_none="no workspaces in this run",
            fixtures=None,
            clock={"start": run.first_logical_at.isoformat() if run.first_logical_at else None, "note": "as recorded"},
            can_touch=["nothing: no model, no tools, no world"],
        )
        return summary
    assert sc is not None and version is not None
    policy_revision = vary.get("policy", sc.current_policy)
    summary.update(
        scenario=version.ref,
        scenario_digest=version.digest,
        scope=sc.scope,
        policy={
            "revision": policy_revision,
            "note": "varied by this counterfactual" if "policy" in vary else "the scenario version's current policy",
        },
        workspaces=[
            {
                "id": ws_id,
                "base_digest": ws.get("base_digest"),
                "overlay_digest": ws.get("overlay_digest"),
                "overlay_revision": ws.get("overlay_revision"),
                "environment_revision": ws.get("environment_revision"),
            }
            for ws_id, ws in sorted(sc.workspaces.items())
        ],
        workspace_note="rebuilt from the scenario version's snapshots inside the sandbox",
        workspace_none="no workspaces in this scenario version",
        fixtures=_fixture_completeness(run, sc),
        clock={
            "start": vary.get("clock", sc.clock_start),
            "note": "varied by this counterfactual" if "clock" in vary else "the scenario's clock start",
        },
        world=sc.world_name,
        can_touch=[
            *(
                [
                    f"the model endpoint {model_connection['base_url']} of the approved model connection "
                    f"{model_connection['connection']}, only through the worker's relay, at most "
                    f"{model_connection['max_calls']} calls"
                ]
                if agent is not None and model_connection
                else []
            ),
            (
                f"a child world of the simulated world {sc.world_name} (named for this branch: {sc.world_name}.cf-…): "
                if mode == "counterfactual"
                else f"the simulated world {sc.world_name}: "
            )
            + f"{len(sc.world.get('resources', {}))} resources at revision {sc.world.get('revision')}",
            "effects only in the namespace "
            + (f"{namespace_for(sc.world_name)}.cf-…" if mode == "counterfactual" else namespace_for(sc.world_name))
            + ", through fixture connections",
            "mutation tools: "
            + (", ".join(sorted(c.tool for c in sc.contracts if c.effect_class == "mutation")) or "none"),
        ],
    )
    return summary


# --- what a run can be launched in, and whether each button can work -------------------------------------------


@dataclass(frozen=True)
class ScenarioChoice:
    version: ScenarioVersion
    kind: str  # recorded | newer | regression | other
    label: str

    @property
    def ref(self) -> str:
        return self.version.ref


@dataclass(frozen=True)
class ModeOption:
    slug: str
    label: str
    available: bool
    reason: str  # why it cannot work, in the web's words; "" when it can


@dataclass(frozen=True)
class LaunchOptions:
    """What the run page's buttons, the launch page and its POST agree on (`launch_options`)."""

    recorded: ScenarioVersion | None
    choices: tuple[ScenarioChoice, ...]
    buttons: dict[str, ModeOption]  # by button slug, and "regression" for Make regression scenario

    @property
    def reasons(self) -> list[str]:
        """Why the unavailable buttons cannot work, each sentence once."""
        return list(dict.fromkeys(b.reason for b in self.buttons.values() if not b.available))

    def choice(self, ref: str) -> ScenarioChoice | None:
        return next((c for c in self.choices if c.ref == ref), None)


def _meta(version: Any) -> dict[str, Any]:
    try:
        meta = json.loads(version.meta or "{}")
    except (TypeError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _derived(version: Any) -> bool:
    return version.source == "regression" or version.based_on_id is not None or version.name.endswith("-regression")


def _versions(condition: Q, *, limit: int | None = None, contracts: bool = False) -> list[Any]:
    # scenario.json only (a few hundred bytes), never the fixtures: the choices cost the same for any package size;
    # `contracts` adds contracts.json (the tools a world models), for the authored versions the launch page offers
    versions = ScenarioVersion.objects.annotate(meta=KeyTextTransform("scenario.json", "files"))
    if contracts:
        versions = versions.annotate(contract_text=KeyTextTransform("contracts.json", "files"))
    versions = (
        versions.filter(condition).defer("files", "manifest").select_related("based_on").order_by("name", "version")
    )
    return list(versions[:limit] if limit is not None else versions)


# The launch page offers at most this many authored scenario versions beside the run's own (issue 38's tour: the
# declared race, recorded from no run, could not be chosen in the browser); `replay --scenario NAME@VERSION` takes
# any version held.
OTHER_SCENARIOS_SHOWN = 50


def _contract_tools(version: Any) -> set[str]:
    try:
        contracts = json.loads(version.contract_text or "[]")
    except (TypeError, ValueError):
        return set()
    if not isinstance(contracts, list):
        return set()
    return {str(c["tool"]) for c in contracts if isinstance(c, dict) and isinstance(c.get("tool"), str)}


def _authored_choices(run: Run, offered: set[str]) -> list[ScenarioChoice]:
    """The authored scenario versions (recorded from no run: a world built beside a recorded one, such as a declared
    race) whose contracts model at least one tool the run called, each labelled with how many. A scenario recorded
    from other runs is theirs, and a world that models none of this run's tools is not a world for it. One query."""
    run_tools = {t for t in run.tools.split("\n") if t}
    original = Q(based_on__isnull=True) & ~Q(source__in=("regression", "promotion", "exclusion"))
    found: list[ScenarioChoice] = []
    for v in _versions(original & ~Q(name__in=offered), limit=4 * OTHER_SCENARIOS_SHOWN, contracts=True):
        if _derived(v) or _meta(v).get("source_runs"):
            continue
        covered = len(_contract_tools(v) & run_tools)
        if not covered:
            continue
        label = f"authored, recorded from no run; models {covered} of this run's {len(run_tools)} tools"
        found.append(ScenarioChoice(v, "other", label))
        if len(found) == OTHER_SCENARIOS_SHOWN:
            break
    return found


def launch_options(run: Run, *, others: bool = False) -> LaunchOptions:
    """The run's scenario choices and, per button, whether it can work and why not (DESIGN §6).

    The recorded version is the one the run names, or else the first original (not derived: no promotion, no
    exclusion, no regression) version recorded from it; it is the default everywhere, never a derived one.
    Then its newer versions and the regression versions of its scenario, each labelled. With `others` (the launch
    page), then the authored scenario versions held (recorded from no run: a world built beside a recorded one, such
    as a declared race), labelled so; the summary checks the run's calls against whichever is chosen.
    Queries: 1 when the run names its scenario version, 2 otherwise (the versions recorded from it, then the
    choices); `others` adds 1.
    """
    recorded = None
    named = f"{run.scenario_name}@{run.scenario_version}" if run.scenario_name and run.scenario_version else ""
    if named:
        name = run.scenario_name
        candidates = _versions(Q(name=name) | Q(name=f"{name}-regression"))
        recorded = next((v for v in candidates if v.version == run.scenario_version), None)
    else:
        from_run = [
            v for v in _versions(Q(meta__contains=f'"{run.run_id}"')) if run.run_id in _meta(v).get("source_runs", [])
        ]
        originals = [v for v in from_run if not _derived(v)] or [v for v in from_run if v.source != "regression"]
        recorded = min(originals, key=lambda v: (v.imported_at, v.pk), default=None)
        candidates = []
        if recorded is not None:
            candidates = _versions(Q(name=recorded.name) | Q(name=f"{recorded.name}-regression"))
    choices: list[ScenarioChoice] = []
    if recorded is not None:
        choices.append(ScenarioChoice(recorded, "recorded", "recorded version"))
        for v in candidates:
            if v.pk == recorded.pk:
                continue
            if v.name == recorded.name and v.version > recorded.version:
                how = {"promotion": "a fixture promoted", "exclusion": "a tool excluded"}.get(v.source, v.source)
                choices.append(ScenarioChoice(v, "newer", f"newer ({how})"))
            elif v.name == f"{recorded.name}-regression":
                base = v.based_on.ref if v.based_on else recorded.name
                runs = ", ".join(_meta(v).get("source_runs", [])) or "a run"
                choices.append(ScenarioChoice(v, "regression", f"regression of {base}, from {runs}"))
    if recorded is not None and others:
        choices.extend(_authored_choices(run, {recorded.name, f"{recorded.name}-regression"}))
    # One sentence for every button it stops: the run page shows it once, under the disabled buttons.
    if recorded is not None:
        why_not = ""
    elif named:
        why_not = (
            f"This run names scenario version {named}, which this console does not hold, so there is no fixture "
            "world to replay it in or build a regression scenario on: import that scenario package first."
        )
    else:
        why_not = (
            "This run names no scenario version and none was recorded from it, so there is no fixture world to "
            "replay it in or build a regression scenario on: import a scenario package recorded from this run first."
        )
    buttons = {
        "inspect": ModeOption("inspect", BUTTONS["inspect"].label, True, ""),
        "replay": ModeOption("replay", BUTTONS["replay"].label, not why_not, why_not),
        "counterfactual": ModeOption("counterfactual", BUTTONS["counterfactual"].label, not why_not, why_not),
        "regression": ModeOption(
            "regression",
            "Make regression scenario",
            recorded is not None,
            why_not,
        ),
    }
    return LaunchOptions(recorded=recorded, choices=tuple(choices), buttons=buttons)


def summary_digest(summary: dict[str, Any]) -> str:
    """The digest the launch form carries: what the operator was shown (DESIGN §3's canonical JSON digest)."""
    return digest_json(summary)
