"""Deciders: what a replay asks at each step "what does the agent (or its orchestrator) do next?" (DESIGN §6).

A decider is a generator of `Action`s. The engine (`replay/`) performs each action against the fixture world
before asking for the next one, so a decider can look at what happened (through the read-only `View` it is
given) and decide accordingly. The plug-in interface is one function:

    def my_decider(source: SourceRun, view: View) -> Iterator[Action]: ...
    DECIDERS["my-name"] = Decider("my-name", {"name": ..., "version": ...}, my_decider)

Built in:

- `recorded`: the source run's proposals and orchestration decisions, in order (a rerun's "recorded
  decisions"). What the harness or the world produced in the recording (results, receipts, world transitions,
  clock moves, policy outcomes, the final state) is not replayed: the engine produces its own from the
  fixtures, and the comparison tells the two apart. Recorded references are source-run ids; the engine maps
  them to the replay's.
- `careful`: a scripted agent that follows the recorded trajectory but (1) never carries validation evidence
  across a workspace change: when an admission would use evidence from another workspace or tree than the
  artifact's, it reruns that purpose's recorded command in the artifact's workspace (and when the rerun fails
  it stops with the failure and the diff instead of asking for the effect); (2) asks for an effect on the
  artifact's own evidence only, and when the effect is denied, returns to planning (see "Denied effects");
  (3) after an execution whose outcome is unknown or whose response was lost, asks the destination's status
  before resending, and resends only when the status says the effect did not happen.

Denied effects (issue 18): an effect the policy denies at activation (a `deny`, a `needs_approval` without an
approval, or the final lineage gate) does not end the run. The engine writes the `policy.decision` and then a
`run.state` with `state: running`, `returned_to: planning` and a bounded `reason` (at most `REASON_CHARS`
characters), and asks the decider what next. A decider reads it with `view.denial(intent_ref)` (additive to
the View: `None` once that intent was activated after all). The run stops only when the decider stops, a
budget runs out, a fixture is missing, or the same run has been denied `DENIAL_LIMIT` times (a decider that
asks again and again for what is refused is stopped, not looped).

- `recorded` goes on with the recording, and stops (`stopped`, the bounded reason and the step named) at the
  first recorded step that depended on the denied intent (refers to it, or to an event that did, such as its
  execution): the recording went on as if the effect had happened, so from that step on it no longer describes
  this run. Steps that do not depend on it are replayed.
- `careful` returns to planning: it opens a new attempt whose reason is the bounded reason, reruns, in the
  artifact's workspace, each purpose the policy requires that has no admitted evidence on the artifact's own
  tree, and asks for the effect once more on that evidence; when a rerun fails it stops with the failure and
  the diff, and when nothing it can rerun would answer the denial (an approval refused, a finding about the
  evidence it already holds) or the second request is denied too, it stops with the bounded reason and no
  effect.

Branching (issue 18): a replay from a recorded checkpoint restores the history before it by performing the
`recorded` decider's steps up to that checkpoint, then hands the chosen decider a `SourceRun` whose `events`
are the recording after the checkpoint (what is left to decide) and whose `history` holds the events up to and
including it (read-only context: `command_for` searches both). A decider written against `source.events`
therefore continues from the checkpoint without knowing it branched.

Human choices (issue 18): a counterfactual `human.<event id>=<choice>` replaces the action of one recorded
`human.input` by one of `HUMAN_CHOICES`; the choice decides the recorded approval that input led to (the next
`approval.recorded` of the same actor role on an effect), and nothing else.

Decisions:
- Actions carry the recorded logical time (`at`) of the step they replay; the engine advances its clock to it
  (an explicit `clock.advanced`), so a rerun keeps the recording's pacing (a reviewer's 95 seconds, a provider
  that answered within a second) and a counterfactual `clock` shifts it as a whole.
- A decider cannot write the environment, the isolation, or an approval's authority: the actions have no
  field for them.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from .bundle import iter_event_records
from .vocabulary import KINDS, references

# The choices a recorded human input can be varied to, and the approval decision each one means.
HUMAN_CHOICES = {"approve": "approved", "reject": "rejected"}
REASON_CHARS = 400  # the bounded reason of a denial: one or two sentences, never a dump
DENIAL_LIMIT = 8  # denials in one run before the engine stops a decider that keeps asking

# --- actions ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    ref: str | None  # the source event this step replays (None: the decider's own step)
    at: str | None  # the recorded logical time of that step


@dataclass(frozen=True)
class StartAttempt(Action):
    attempt: str
    number: int
    reason: str
    parent: str | None


@dataclass(frozen=True)
class EndAttempt(Action):
    outcome: str


@dataclass(frozen=True)
class CreateWorkspace(Action):
    workspace: str


@dataclass(frozen=True)
class Propose(Action):
    proposal: dict[str, Any]
    accepted: bool = True
    recorded_context: str | None = None


@dataclass(frozen=True)
class CallTool(Action):
    tool: str
    args: Any
    workspace: str | None
    proposal: str | None
    recorded_revision: int | None = None


@dataclass(frozen=True)
class CreateArtifact(Action):
    artifact: str
    workspace: str | None
    files: list[str]
    blob: str
    media_type: str
    size: int
    role: str


@dataclass(frozen=True)
class Observe(Action):
    source: str
    scope: Any


@dataclass(frozen=True)
class Admit(Action):
    observation: str
    purpose: str
    artifact: str | None
    rationale: str | None
    compatibility: dict[str, Any] | None = None
    decision: str = "admitted"


@dataclass(frozen=True)
class Supersede(Action):
    admission: str
    cause: str | None


@dataclass(frozen=True)
class Waive(Action):
    failure: str
    suite: str
    actor_role: str
    rationale: str


@dataclass(frozen=True)
class HumanInput(Action):
    actor_role: str
    visible: list[str]
    action: str
    note: str | None


@dataclass(frozen=True)
class RecordedApproval(Action):
    """A historical approval: shown as read-only evidence; its recorded decision may be simulated."""

    event: dict[str, Any]
    intent: str | None  # the source intent it approved


@dataclass(frozen=True)
class Decide(Action):
    intent: str  # the source intent the recorded decision judged
    admissions: list[str]  # the evidence it is judged on (the recorded intent's admissions)


@dataclass(frozen=True)
class Activate(Action):
    intent: str  # the source intent (or the decider's own name for one)
    proposal: str | None
    effect_class: str
    destination: str
    artifact: str | None
    admissions: list[str]
    historical_key: str | None
    args: dict[str, Any]


@dataclass(frozen=True)
class Execute(Action):
    intent: str
    attempt_no: int


@dataclass(frozen=True)
class Claim(Action):
    text: str
    kind: str
    supports: list[str]
    scope: Any = None
    artifact: str | None = None  # the claim's `artifact_id` (LIN015 reads that artifact's lineage)


@dataclass(frozen=True)
class Charge(Action):
    resource: str
    amount: float


@dataclass(frozen=True)
class Checkpoint(Action):
    pass


@dataclass(frozen=True)
class Wait(Action):
    seconds: float
    reason: str


@dataclass(frozen=True)
class Stop(Action):
    state: str
    reason: str


# --- the source run ----------------------------------------------------------------------------------------------


@dataclass
class SourceRun:
    """The recorded run a replay starts from: its manifest and events, indexed for the deciders."""

    manifest: dict[str, Any]
    events: list[dict[str, Any]]
    by_id: dict[str, dict[str, Any]] = field(default_factory=dict)
    effect_proposal: dict[str, str] = field(default_factory=dict)  # source intent -> its proposal
    result_of: dict[str, str] = field(default_factory=dict)  # source call -> its recorded result or receipt
    # A branch from a checkpoint: the recorded events up to and including it (restored, not decided again);
    # `events` then holds the rest. Empty for a replay from the start.
    history: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def parse(cls, manifest: dict[str, Any], events_jsonl: bytes, *, validate: bool = True) -> SourceRun:
        """`validate=False` for a package the worker built from an imported (validated) run: its bytes are
        digest-verified, and re-checking every event against the vocabulary is a third of a large replay."""
        if validate:
            events = [record.event for record in iter_event_records(io.BytesIO(events_jsonl))]
        else:
            # One decode of the whole log as a JSON array: a tenth of the cost of a decode per line.
            lines = [line for line in events_jsonl.splitlines() if line.strip()]
            events = json.loads(b"[" + b",".join(lines) + b"]")
        run = cls(manifest, events)
        by_id, result_of = run.by_id, run.result_of
        called: set[Any] = set()
        proposals: list[dict[str, Any]] = []  # model.proposal / effect.intent, in order: paired below
        last_seq = None
        # One pass: the shape check (validate=False) and every index the deciders read.
        for n, event in enumerate(events, start=1):
            if not validate:
                seq = event.get("seq", 0) if isinstance(event, dict) else None
                if (
                    seq is None
                    or event.get("kind") not in KINDS
                    or not isinstance(event.get("id"), str)
                    or not isinstance(event.get("at"), dict)
                    or (last_seq is not None and not seq > last_seq)
                ):
                    raise ValueError(f"source/events.jsonl line {n}: not an event of an imported run")
                last_seq = seq
            kind = event["kind"]
            by_id[event["id"]] = event
            if kind == "tool.call":
                called.add(event.get("proposal_id"))
            elif kind in ("tool.result", "command.receipt"):
                if event.get("call_id"):
                    result_of.setdefault(event["call_id"], event["id"])
            elif kind in ("model.proposal", "effect.intent"):
                proposals.append(event)
        pending: list[str] = []
        for e in proposals:
            if e["kind"] == "model.proposal":
                if e["id"] not in called and (e.get("proposal") or {}).get("type") == "tool_call":
                    pending.append(e["id"])
            elif pending:
                run.effect_proposal[e["id"]] = pending.pop()
        return run

    @property
    def run(self) -> dict[str, Any]:
        return self.manifest["run"]

    def command_for(self, purpose: str) -> dict[str, Any] | None:
        """The recorded tool call whose receipt was observed (or admitted) for `purpose`: what to rerun."""
        for e in reversed([*self.history, *self.events]):
            if e["kind"] != "evidence.observed":
                continue
            scope = e.get("scope")
            if isinstance(scope, list) and purpose in scope:
                receipt = self.by_id.get(e.get("source") or "")
                call = self.by_id.get((receipt or {}).get("call_id") or "")
                if call is not None and call["kind"] == "tool.call":
                    return call
        return None


# --- what a decider may look at ---------------------------------------------------------------------------------


class View(Protocol):
    """The engine's state, read-only. Ids are the replay's; `resolve` maps a source id to its replay id."""

    stopped: bool

    def resolve(self, ref: str | None) -> str | None: ...
    def last(self, kind: str) -> dict[str, Any] | None: ...
    def event(self, event_id: str | None) -> dict[str, Any] | None: ...
    def artifact(self, artifact_id: str | None) -> dict[str, Any] | None: ...
    def has_admitted(self, purpose: str, artifact_id: str) -> bool: ...
    def admissions_for(self, artifact_id: str) -> list[str]: ...
    def required_for(self, destination: str) -> tuple[str, ...]: ...
    def status_route(self, destination: str) -> tuple[str, tuple[str, ...]] | None: ...
    def executions(self, intent_ref: str) -> list[dict[str, Any]]: ...
    # Added for issue 18 (additive): the `run.state` (returned to planning) of the latest denial of that intent
    # (a source intent id, or a decider's own name for one) not since undone by an activation; None otherwise.
    def denial(self, intent_ref: str) -> dict[str, Any] | None: ...


DeciderFn = Callable[[SourceRun, View], Generator[Action, None, None]]


@dataclass(frozen=True)
class Decider:
    name: str
    model: Mapping[str, str] | None  # None: the source run's model (its recorded proposals)
    actions: DeciderFn


# --- recorded ------------------------------------------------------------------------------------------------------

_DERIVED = frozenset(
    {
        "tool.result",
        "command.receipt",
        "workspace.changed",
        "workspace.lifecycle",
        "world.transition",
        "world.observation",
        "clock.advanced",
        "fixture.missing",
        "fixture.ambiguous",
        "replay.scope",
        "run.state",
        "schedule.step",
        "sandbox.violation",
        "agent.context",
        "effect.outbox",
    }
)


def recorded(source: SourceRun, view: View) -> Generator[Action, None, None]:
    # Denied intents (source ids) and the recorded events that depended on one, each with the intent it rests on.
    tainted: dict[str, str] = {}
    for e in source.events:
        action = _from_event(source, e)
        if tainted:
            roots = sorted({tainted[t] for _path, t in references(e) if t in tainted})
            live = [r for r in roots if view.denial(r) is not None]
            if live and action is not None:
                denial = view.denial(live[0]) or {}
                yield Stop(
                    None,
                    e["at"]["logical"],
                    "stopped",
                    _bounded(
                        f"{denial.get('reason')}; the recording's next step ({e['id']}, {e['kind']}) depended on "
                        f"the denied intent {live[0]}, so the recorded decisions end here"
                    ),
                )
                return
            if live:
                tainted[e["id"]] = live[0]
        if action is not None:
            yield action
            if isinstance(action, Activate) and view.denial(action.intent) is not None:
                tainted[action.intent] = action.intent
        if view.stopped:
            return


def _bounded(text: str) -> str:
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1].rstrip() + "\u2026"


def _from_event(source: SourceRun, e: dict[str, Any]) -> Action | None:
    kind, ref, at = e["kind"], e["id"], e["at"]["logical"]
    if kind in _DERIVED:
        return None
    if kind == "attempt.started":
        return StartAttempt(ref, at, e["attempt"], e["number"], e["reason"], e.get("parent_attempt_id"))
    if kind == "attempt.ended":
        return EndAttempt(ref, at, e["outcome"])
    if kind == "workspace.created":
        return CreateWorkspace(ref, at, e["workspace_id"])
    if kind == "model.proposal":
        return Propose(ref, at, dict(e["proposal"]), bool(e["accepted"]), e.get("context_digest"))
    if kind == "tool.call":
        # Revision 0 is "no contract recorded" (a run converted from a trace that names none: docs/formats/otlp.md):
        # the scenario's pinned contract is the one in force, not a mismatch with a revision that never existed.
        return CallTool(
            ref,
            at,
            e["tool"],
            e["request"],
            e.get("workspace_id"),
            e.get("proposal_id"),
            e["contract_revision"] or None,
        )
    if kind == "artifact.created":
        return CreateArtifact(
            ref,
            at,
            e["artifact_id"],
            e.get("workspace_id"),
            list(e["files"]),
            e["digest"],
            e["media_type"],
            e["size"],
            e["role"],
        )
    if kind == "evidence.observed":
        return Observe(ref, at, e["source"], e.get("scope"))
    if kind == "evidence.admitted":
        return Admit(
            ref,
            at,
            e["observation_id"],
            e["purpose"],
            e.get("artifact_id"),
            e.get("rationale"),
            e.get("compatibility"),
            e["decision"],
        )
    if kind == "evidence.superseded":
        return Supersede(ref, at, e["admission_id"], e.get("cause"))
    if kind == "waiver.granted":
        return Waive(ref, at, e["failure"], e["suite"], e["actor_role"], e["rationale"])
    if kind == "human.input":
        return HumanInput(ref, at, e["actor_role"], list(e["visible_ids"]), e["action"], e.get("note"))
    if kind == "approval.recorded":
        subject = e.get("subject")
        return RecordedApproval(ref, at, e, subject if subject in source.effect_proposal else None)
    if kind == "policy.decision":
        subject = e.get("subject")
        if subject in source.effect_proposal:
            return Decide(ref, at, subject, list(source.by_id[subject]["admission_ids"]))
        return None  # a decision about something that is not an effect (a docs lookup): nothing to re-decide
    if kind == "effect.intent":
        proposal_ref = source.effect_proposal.get(ref)
        proposal = (source.by_id.get(proposal_ref or "") or {}).get("proposal") or {}
        args = {k: v for k, v in proposal.items() if k not in ("type", "tool")}
        return Activate(
            ref,
            at,
            ref,
            proposal_ref,
            e["effect_class"],
            e["destination"],
            e.get("artifact_id"),
            list(e["admission_ids"]),
            e.get("idempotency_key"),
            args,
        )
    if kind == "effect.execution":
        return Execute(ref, at, e["intent_id"], int(e["attempt_no"]))
    if kind == "checkpoint":
        return Checkpoint(ref, at)
    if kind == "account.claim":
        artifact = e.get("artifact_id")
        return Claim(
            ref,
            at,
            e["text"],
            e["claim_kind"],
            list(e.get("supports") or []),
            e.get("scope"),
            artifact if isinstance(artifact, str) else None,
        )
    if kind == "budget.charged":
        return Charge(ref, at, e["resource"], e["amount"])
    return None


# --- careful ----------------------------------------------------------------------------------------------------------


def careful(source: SourceRun, view: View) -> Generator[Action, None, None]:
    """See the module docstring. Its own steps have `ref=None` and refer to replay ids."""
    replans = 0
    for action in recorded(source, view):
        if isinstance(action, Admit) and action.purpose.startswith("validation:") and action.artifact:
            observation = view.event(view.resolve(action.observation))
            artifact = view.artifact(action.artifact)
            if artifact is not None and not _fits(observation, artifact):
                if not (yield from _revalidate(source, view, action.purpose, artifact, action.at)):
                    return
                continue  # the carried-forward admission is not made: the rerun's result stands instead
        if isinstance(action, Decide | Activate):
            intent = source.by_id.get(action.intent) or {}
            artifact = view.artifact(intent.get("artifact_id"))
            if artifact is not None:  # judged on its own evidence, never on what it declined to carry forward
                action = replace(action, admissions=_admitted_for(view, artifact))
        if isinstance(action, Execute):
            yield action
            if view.stopped:
                return
            yield from _confirm_before_resend(source, view, action)
            continue
        yield action
        if view.stopped:
            return
        if isinstance(action, Activate) and view.denial(action.intent) is not None:
            replans += 1
            if not (yield from _replan(source, view, action, replans)):
                return


def _replan(source: SourceRun, view: View, action: Activate, replans: int) -> Generator[Action, None, bool]:
    """Back to planning after a denied effect: a new attempt, the missing validation rerun on the artifact's own
    tree, one more request on that evidence. True when the effect was allowed after all."""
    denial = view.denial(action.intent) or {}
    reason = str(denial.get("reason") or "the effect was denied")
    numbers = [e.get("number") for e in [*source.history, *source.events] if e["kind"] == "attempt.started"]
    number = max([n for n in numbers if isinstance(n, int)], default=0) + replans
    parent = denial.get("attempt")
    yield StartAttempt(None, action.at, f"{parent or 'run'}.replan-{replans}", number, _bounded(reason), parent)
    artifact = view.artifact(action.artifact)
    if artifact is None:
        yield Stop(None, action.at, "stopped", _bounded(f"{reason}; no artifact to revalidate: stopping, no effect"))
        return False
    rerun = False
    if denial.get("outcome") != "needs_approval":
        for purpose in view.required_for(action.destination):
            if view.has_admitted(purpose, artifact["artifact_id"]):
                continue
            if not (yield from _revalidate(source, view, purpose, artifact, action.at)):
                return False
            rerun = True
    if not rerun:
        yield Stop(
            None,
            action.at,
            "stopped",
            _bounded(
                f"{reason}; nothing careful can rerun answers it (the evidence it holds for "
                f"{artifact['artifact_id']} is its own), so it stops with the diff and no effect"
            ),
        )
        return False
    yield replace(action, admissions=_admitted_for(view, artifact))
    if view.stopped:
        return False
    again = view.denial(action.intent)
    if again is not None:
        yield Stop(
            None,
            action.at,
            "stopped",
            _bounded(f"asked once more after revalidating and denied again: {again.get('reason')}"),
        )
        return False
    return True


def _fits(observation: dict[str, Any] | None, artifact: dict[str, Any]) -> bool:
    if observation is None:
        return False
    return (observation.get("workspace_id"), observation.get("tree_digest")) == (
        artifact.get("workspace_id"),
        artifact.get("tree_digest"),
    )


def _admitted_for(view: View, artifact: dict[str, Any]) -> list[str]:
    return view.admissions_for(artifact["artifact_id"])


def _revalidate(
    source: SourceRun, view: View, purpose: str, artifact: dict[str, Any], at: str | None
) -> Generator[Action, None, bool]:
    """Rerun `purpose`'s recorded command in the artifact's workspace; admit it, or stop on its failure."""
    call = source.command_for(purpose)
    workspace = artifact.get("workspace_id")
    if call is None or workspace is None:
        yield Stop(
            None,
            at,
            "stopped",
            f"{purpose} is required for {artifact['artifact_id']} and the recording holds no command to rerun it "
            f"in {workspace}; stopping before the effect",
        )
        return False
    yield Propose(None, at, {"type": "tool_call", "tool": call["tool"], **call["request"]})
    proposal = view.last("model.proposal")
    yield CallTool(None, at, call["tool"], call["request"], workspace, proposal["id"] if proposal else None)
    if view.stopped:
        return False
    receipt = view.last("command.receipt")
    if receipt is None or receipt.get("workspace_id") != workspace:
        yield Stop(None, at, "stopped", f"rerunning {purpose} in {workspace} gave no command receipt")
        return False
    yield Observe(None, at, receipt["id"], [purpose])
    observation = view.last("evidence.observed")
    results = receipt.get("results") or {}
    passed = receipt.get("completion") == "completed" and receipt.get("exit_code") == 0 and not results.get("failed")
    if passed:
        yield Admit(
            None,
            at,
            observation["id"] if observation else receipt["id"],
            purpose,
            artifact["artifact_id"],
            f"rerun in {workspace} on the artifact's own tree after the workspace changed",
        )
        return True
    failing = ", ".join(results.get("failing_tests") or results.get("failing_suites") or []) or "see the output"
    summary = (
        f"{purpose} fails in {workspace} on {artifact['artifact_id']}: {results.get('failed', '?')} failed, "
        f"{results.get('passed', '?')} passed ({receipt.get('completion')}): {failing}"
    )
    yield Claim(None, at, f"{summary}. No request was opened; the diff is kept for a person.", "other", [receipt["id"]])
    yield Stop(
        None,
        at,
        "stopped",
        f"{summary}. Stopping with the diff {artifact['artifact_id']} ({artifact.get('digest')}, "
        f"{', '.join(artifact.get('files') or [])}) and no request.",
    )
    return False


def _confirm_before_resend(source: SourceRun, view: View, action: Execute) -> Iterator[Action]:
    executions = view.executions(action.intent)
    if not executions or executions[-1].get("outcome") not in ("unknown", "lost_response"):
        return
    intent = source.by_id.get(action.intent) or {}
    route = view.status_route(intent.get("destination", ""))
    if route is None:
        yield Stop(
            None,
            action.at,
            "stopped",
            f"execution of {action.intent} ended {executions[-1].get('outcome')} and the scenario offers no status "
            "read for its destination: not resending blind",
        )
        return
    tool, keys = route
    proposal_ref = source.effect_proposal.get(action.intent)
    proposal = (source.by_id.get(proposal_ref or "") or {}).get("proposal") or {}
    args = {k: proposal[k] for k in keys if k in proposal}
    yield Propose(None, action.at, {"type": "tool_call", "tool": tool, **args})
    last_proposal = view.last("model.proposal")
    yield CallTool(None, action.at, tool, args, None, last_proposal["id"] if last_proposal else None)
    if view.stopped:
        return
    result = view.last("tool.result")
    if result is not None and result.get("outcome") == "not_found":
        yield Execute(None, action.at, action.intent, action.attempt_no + 1)


DECIDERS: dict[str, Decider] = {
    "recorded": Decider("recorded", None, recorded),
    "careful": Decider("careful", {"name": "n17q-scripted-careful", "version": "1"}, careful),
}
