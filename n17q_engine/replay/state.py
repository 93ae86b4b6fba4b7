"""The engine's state for a rerun or a counterfactual, and the primitives every step uses.

`_EngineState.__init__` builds it from a replay package: the decider; the counterfactual's declared variable held
apart (policy, fault, delay, budget, clock, human decision or choice); the branch point (`_branch`, the source's
checkpoint a branch starts from); and what applies now: the baseline until a branch's checkpoint, the variable
from there on (`_enter_segment`, at once when the replay starts from the beginning). It answers the View a
decider reads (`deciders.View`) and holds the primitives of every step: `emit` (an event at the logical clock's
time, in the current attempt), the clock (`advance_to`, `pace`; the world's scheduled transitions settle as it
moves), `_spend` (a budget charge, checked against the limit and the recovery reserve) and `stop` (the run ends
in a state, by `_Stopped`).

The steps are layered on this class (calls.py, effects.py, steps.py), then branching.py and loop.py; this module
imports only output.py from the package.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, NoReturn

from .. import canonical
from ..deciders import DECIDERS, HUMAN_CHOICES, Action, Decider, SourceRun
from ..fixtures import Fixture
from ..package import (
    Fault,
    PackageError,
    Policy,
    ReplayPackage,
    ScenarioPackage,
    branch_basis,
    check_fault,
    vary_value_problem,
)
from ..world import IdSource, LogicalClock, SimulatedWorld, WorldError, iso, namespace_for, parse_time
from .output import ReplayError, _Log


class _Stopped(Exception):
    pass


class _EngineState:
    """A rerun's or counterfactual's state and set-up, the View deciders read, and the primitives of every step."""

    def __init__(self, package: ReplayPackage, source: SourceRun, isolation: str) -> None:
        assert package.scenario is not None
        self.package, self.source, self.isolation = package, source, isolation
        sc: ScenarioPackage = package.scenario
        self.sc = sc
        # The fixtures that answered this replay so far, id -> the digest of the fixture as loaded: each checkpoint
        # names them (seed 001: "Run checkpoints named exact fixture versions").
        self.fixtures_used: dict[str, str] = {}
        self.catalogue_blob: str | None = None  # the blob of the scenario's tools as offered (steps._tool_catalogue)
        vary = package.vary
        self.decider: Decider = self._decider(vary.get("decider", package.decider))
        # What the counterfactual's variable sets, held apart: a replay from the start applies it at once; a
        # branch restores the history before its checkpoint as a rerun would (the scenario's policy, faults,
        # delays, clock and declared budget; the recorded human decisions) and applies it at the checkpoint.
        self.varied_policy: Policy = self._policy(vary.get("policy"))
        self.varied_faults: list[Fault] = list(sc.faults)
        if "fault" in vary:
            tool, _, stage = vary["fault"].partition(":")
            try:
                self.varied_faults.append(check_fault(sc.contracts, {"tool": tool, "stage": stage}, "vary fault"))
            except PackageError as exc:
                raise ReplayError(str(exc)) from None
            race = sc.race_for(tool)
            if race is not None:
                raise ReplayError(
                    f"vary fault: {tool} races in {race.id!r}; its deliveries' stages come from the declared schedule"
                )
        self.varied_delays = dict(sc.delays)
        self.varied_limits: dict[str, float] = {r: b.limit for r, b in sc.budgets.items()}
        self.varied_human: str | None = None
        self.varied_choice: dict[str, str] | None = None
        self.branch_index = self._branch(package.checkpoint)
        for key, value in vary.items():
            head, _, rest = key.partition(".")
            if head == "delay":
                if rest not in sc.contracts or sc.contracts.get(rest).effect_class != "mutation":
                    raise ReplayError(f"vary delay.{rest}: not a mutation contract of the scenario")
                self.varied_delays[rest] = _number(value, key)
            elif head == "budget":
                if rest not in ("tokens", "turns", "compute_s", "artifacts"):
                    raise ReplayError(f"vary budget.{rest}: not a budget resource")
                self.varied_limits[rest] = _number(value, key)
            elif key == "human":
                if value not in ("approved", "rejected"):
                    raise ReplayError("vary human: approved or rejected")
                self.varied_human = value
            elif head == "human":
                self.varied_choice = self._human_choice(rest, value)
            elif head == "clock":
                problem = vary_value_problem(key, value)
                if problem:
                    raise ReplayError(problem)
        # What applies now: the baseline until a branch's checkpoint (`_enter_segment`).
        self.policy: Policy = self._policy(None)
        self.faults: list[Fault] = list(sc.faults)
        self.delays = dict(sc.delays)
        self.budget_limits: dict[str, float] = {r: b.limit for r, b in sc.budgets.items()}
        self.reserve: dict[str, float] = {r: b.recovery_reserve for r, b in sc.budgets.items()}
        self.human_override: str | None = None
        self.human_choice: dict[str, str] | None = None
        self.shift = timedelta(0)
        start = sc.clock_start
        if self.branch_index is None:
            start = vary.get("clock", sc.clock_start)
            self.shift = parse_time(start) - parse_time(sc.clock_start)
        self.clock = LogicalClock(parse_time(start))
        self._now_at, self._now_s = self.clock.now, iso(self.clock.now)
        self._paced: str | None = None
        self._task_id = (source.run.get("task") or {}).get("id")

        # Every value the replay generates derives from the branch basis (the recorded run, the branch point, what
        # the replay varies) and its position, never from the replay's own id (package.branch_basis).
        self.basis = branch_basis(package)
        world = SimulatedWorld.from_snapshot(sc.world)
        if package.mode == "counterfactual":
            world = world.child(f"{world.name}.cf-{self.basis.removeprefix('sha256:')[:8]}")
        self.world = world
        self.namespace = namespace_for(world.name)
        self.ids = IdSource(sc.seed, self.basis)
        self.log = _Log(self.ids, package.launched_at)
        self.map: dict[str, str] = {}  # source id -> replay id
        self.objects: set[str] = set()
        self.attempt: str | None = None
        self.open_attempts: list[str] = []
        self.stopped = False
        self.final: tuple[str, str] | None = None
        self.checkpoint_id: str | None = None
        self.seen_since_proposal: list[str] = []
        self.artifacts: dict[str, dict[str, Any]] = {}
        self.admissions: dict[str, dict[str, Any]] = {}
        # replay intent id -> its outbox entry (id, outbox_id, destination, idempotency_key, args): what delivery reads
        self.outbox: dict[str, dict[str, Any]] = {}
        self.intent_of: dict[str, str] = {}  # source (or decider) intent ref -> replay intent id
        self.execs: dict[str, list[dict[str, Any]]] = {}
        self.effect_done: set[str] = set()
        self.raced: set[str] = set()  # the declared races already followed (each once per replay)
        self.approved: dict[str, tuple[str, str]] = {}  # source intent -> (decision, actor role)
        self.approved_at: dict[str, datetime] = {}  # source intent -> the logical time its approval was given
        self.fired: set[tuple[str, str | None, str]] = set()
        self.spent: dict[str, float] = {}  # cumulative across every attempt of the run
        self.own_spent: dict[str, float] = {}  # of which the replay's own work (origin replay)
        self.recovery_spent: dict[str, float] = {}  # of which spent in recovery attempts
        self.recovery_attempts: set[str] = set()  # attempts started to recover from another (a parent attempt)
        # refused_tools invariants, and the calls each refused so far
        self.refusals = [inv for inv in sc.invariants if inv["check"] == "refused_tools"]
        self.refused: dict[str, list[str]] = {}
        self.missing: list[dict[str, Any]] = []
        # replay event id -> the excluded tool it stands for: results not evaluated, and what rests on them
        self.unevaluated: dict[str, str] = {}
        # intent ref (source id, or a decider's own name) -> the run.state of its latest denial not since undone
        self.denials: dict[str, dict[str, Any]] = {}
        self.denied = 0
        self.segment: dict[str, Any] = {}  # the scope note's `segment`, filled as the branch is restored
        self.scope_event: dict[str, Any] | None = None
        if self.branch_index is None:
            self._enter_segment()

    # ------------------------------------------------------------------ set-up

    @staticmethod
    def _decider(name: str) -> Decider:
        decider = DECIDERS.get(name)
        if decider is None:
            raise ReplayError(f"unknown decider {name!r} (known: {', '.join(sorted(DECIDERS))})")
        return decider

    def _branch(self, checkpoint: str | None) -> int | None:
        """The index in the source's events of the checkpoint a branch starts from (None: the run's start)."""
        if checkpoint is None:
            return None
        event = self.source.by_id.get(checkpoint)
        if event is None or event["kind"] != "checkpoint":
            held = [e["id"] for e in self.source.events if e["kind"] == "checkpoint"]
            raise ReplayError(
                f"checkpoint {checkpoint!r}: run {self.source.run.get('id')} holds no checkpoint event by that id "
                f"(it holds: start{''.join(', ' + h for h in held[:20])})"
            )
        return next(i for i, e in enumerate(self.source.events) if e is event)

    def _human_choice(self, event_id: str, choice: str) -> dict[str, str]:
        """A counterfactual `human.<event id>=<choice>`, checked against the recording: the input, its choice,
        and the recorded approval that input led to (which the choice decides)."""
        src = self.source
        event = src.by_id.get(event_id)
        if event is None or event["kind"] != "human.input":
            raise ReplayError(f"vary human.{event_id}: run {src.run.get('id')} holds no human input by that id")
        if choice not in HUMAN_CHOICES:
            raise ReplayError(f"vary human.{event_id}: the choice is one of {', '.join(HUMAN_CHOICES)}, not {choice!r}")
        if choice == event["action"]:
            raise ReplayError(f"vary human.{event_id}: the recorded choice was already {choice!r}: nothing changes")
        at = next(i for i, e in enumerate(src.events) if e is event)
        if self.branch_index is not None and at <= self.branch_index:
            raise ReplayError(
                f"vary human.{event_id}: the input comes before checkpoint {src.events[self.branch_index]['id']}, "
                "whose history the branch restores as recorded; choose an input after it"
            )
        for later in src.events[at + 1 :]:
            if (
                later["kind"] == "approval.recorded"
                and later.get("actor_role") == event.get("actor_role")
                and later.get("subject") in src.effect_proposal
            ):
                return {"input": event_id, "choice": choice, "approval": later["id"], "decision": HUMAN_CHOICES[choice]}
        raise ReplayError(
            f"vary human.{event_id}: no approval of an effect by the {event.get('actor_role')} follows it in the "
            "recording, so the choice would decide nothing the engine replays"
        )

    def _enter_segment(self) -> None:
        """The declared variable takes effect: at once from the start, at the checkpoint for a branch."""
        self.policy = self.varied_policy
        self.faults = list(self.varied_faults)
        self.delays = dict(self.varied_delays)
        self.budget_limits = dict(self.varied_limits)
        self.human_override = self.varied_human
        self.human_choice = self.varied_choice
        clock = self.package.vary.get("clock")
        if self.branch_index is not None and clock is not None:
            # The segment resumes at the varied instant; the recorded steps after the checkpoint keep their
            # spacing from it. The clock never moves back: an earlier instant leaves it where it was restored.
            recorded_at = parse_time(self.source.events[self.branch_index]["at"]["logical"])
            self.shift = parse_time(clock) - recorded_at
            self.advance_to(parse_time(clock), None, "the counterfactual's clock at the branch checkpoint")
        for resource, limit in sorted(self.budget_limits.items()):
            if self.spent.get(resource, 0) > limit:
                self.stop(
                    "stopped",
                    f"budget exhausted at the checkpoint: {resource} {self.spent[resource]:g} > {limit:g} "
                    "spent in the restored history",
                )

    def _policy(self, revision: str | None) -> Policy:
        revision = revision or self.sc.current_policy
        policy = self.sc.policies.get(revision)
        if policy is None:
            known = ", ".join(sorted(self.sc.policies))
            raise ReplayError(f"policy revision {revision!r} is not in the scenario (it holds {known})")
        return policy

    # ------------------------------------------------------------------ the View deciders read

    def resolve(self, ref: str | None) -> str | None:
        if ref is None:
            return None
        return self.map.get(ref, ref)

    def last(self, kind: str) -> dict[str, Any] | None:
        return self.log.last.get(kind)

    def event(self, event_id: str | None) -> dict[str, Any] | None:
        return self.log.by_id.get(event_id) if event_id else None

    def artifact(self, artifact_id: str | None) -> dict[str, Any] | None:
        return self.artifacts.get(artifact_id) if artifact_id else None

    def admissions_for(self, artifact_id: str) -> list[str]:
        return [
            a["id"] for a in self.admissions.values() if a["artifact_id"] == artifact_id and a["decision"] == "admitted"
        ]

    def has_admitted(self, purpose: str, artifact_id: str) -> bool:
        return any(self.admissions[a]["purpose"] == purpose for a in self.admissions_for(artifact_id))

    def required_for(self, destination: str) -> tuple[str, ...]:
        rule = self.policy.rule_for(destination)
        return rule.required if rule else ()

    def status_route(self, destination: str) -> tuple[str, tuple[str, ...]] | None:
        route = self.sc.route_for(destination)
        if route is None or route.status_tool is None:
            return None
        return route.status_tool, route.status_args

    def executions(self, intent_ref: str) -> list[dict[str, Any]]:
        intent = self.intent_of.get(intent_ref, intent_ref)
        return list(self.execs.get(intent, []))

    def denial(self, intent_ref: str) -> dict[str, Any] | None:
        return self.denials.get(intent_ref)

    # ------------------------------------------------------------------ emitting

    @property
    def now(self) -> str:
        moment = self.clock.now
        if moment is not self._now_at:  # formatted once per clock move (a new object), not once per event
            self._now_at, self._now_s = moment, iso(moment)
        return self._now_s

    def emit(self, kind: str, *, ref: Any = None, event_id: Any = None, **fields: Any) -> str:
        new = self.log.add(kind, self.now, self.attempt, event_id, fields)
        if ref is not None:
            self.map[ref] = new
        return new

    def _used(self, fixture: Fixture) -> None:
        """Note a fixture that answered a call (its version: the digest of the fixture as the scenario holds it)."""
        if fixture.id not in self.fixtures_used:
            self.fixtures_used[fixture.id] = canonical.digest_json(fixture.to_dict())

    def fixtures_in_force(self) -> dict[str, Any]:
        """What a checkpoint names of the fixtures (DESIGN §10 addition): the scenario version, the package digest that
        pins every fixture file, how many fixtures it holds, and each fixture that answered so far, with its digest."""
        return {
            "scenario": dict(self.sc.ref),
            "package_digest": self.sc.digest,
            "count": len(self.sc.fixtures),
            "answered": [{"id": fid, "digest": d} for fid, d in sorted(self.fixtures_used.items())],
        }

    def _rs(self, refs: list[str]) -> list[str]:
        return [self.map.get(r, r) for r in refs]

    def advance_to(self, moment: Any, cause: str | None, reason: str) -> None:
        if moment <= self.clock.now:
            return
        body = self.clock.advance(moment, cause)
        self.emit("clock.advanced", **{"from": body["from"], "to": body["to"], "cause": cause}, reason=reason)
        self._settle_due()

    def _settle_due(self) -> None:
        try:
            applied = self.world.due(self.clock.now)
        except WorldError as exc:
            self.stop("failed", f"a scheduled world transition was refused: {exc}")
        for t in applied:
            self._world_event(t, t.get("cause"))

    def _world_event(self, t: dict[str, Any], cause: str | None) -> None:
        self.emit(
            "world.transition",
            resource=t["resource"],
            revision_before=t["revision_before"],
            revision_after=t["revision_after"],
            change=t["change"],
            cause=cause,
        )
        resource = t["resource"]
        if resource.startswith("workspace:") and t["change"]["op"] != "delete":
            state = t["change"]["state"]
            self.emit(
                "workspace.changed",
                workspace_id=resource[len("workspace:") :],
                overlay_revision=t["revision_after"],
                tree_digest=state.get("tree_digest") if isinstance(state, dict) else None,
                cause=cause,
            )

    def pace(self, action: Action) -> None:
        if action.at is None:
            return
        if action.at == self._paced:  # most steps of a recording share their neighbour's time
            return
        self._paced = action.at
        try:
            target = parse_time(action.at) + self.shift
        except (TypeError, ValueError):
            return
        self.advance_to(target, None, "recorded timing of the replayed step")

    def stop(self, state: str, reason: str) -> NoReturn:
        self.stopped = True
        self.final = (state, reason)
        raise _Stopped()

    # ------------------------------------------------------------------ the budget

    def _spend(
        self, resource: str, amount: float, *, origin: str, what: str, ref: Any = None, cause: Any = None
    ) -> None:
        """One charge, added to the run's cumulative total and checked against the limit and the recovery reserve.

        The charge is written before the check: the work it pays for has happened, and the stop names it."""
        recovery = self.attempt in self.recovery_attempts
        spent = self.spent[resource] = self.spent.get(resource, 0) + amount
        if origin == "replay":
            self.own_spent[resource] = self.own_spent.get(resource, 0) + amount
        if recovery:
            self.recovery_spent[resource] = self.recovery_spent.get(resource, 0) + amount
        fields: dict[str, Any] = {"resource": resource, "amount": amount, "origin": origin, "recovery": recovery}
        if cause is not None:
            fields["cause"] = cause
        fields["spent_total"] = spent
        self.emit("budget.charged", ref=ref, **fields)
        limit = self.budget_limits.get(resource)
        if limit is None:
            return
        where = f"{what} in attempt {self.attempt}" if self.attempt else what
        if spent > limit:
            self.stop(
                "stopped",
                f"budget exhausted: {resource} {spent:g} > {limit:g} (cumulative across attempts; {amount:g} for "
                f"{where})",
            )
        reserve = self.reserve.get(resource, 0)
        if reserve and not recovery and spent > limit - reserve:
            self.stop(
                "stopped",
                f"budget reserve: {resource} {spent:g} spent would dig into the recovery reserve of {reserve:g} "
                f"(limit {limit:g}; ordinary work may spend {limit - reserve:g}); {amount:g} for {where}, which is "
                "not a recovery",
            )


def _number(value: str, key: str) -> float:
    problem = vary_value_problem(key, value)
    if problem:
        raise ReplayError(problem)
    return float(value)
