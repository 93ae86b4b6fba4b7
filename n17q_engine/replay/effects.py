"""Effects (DESIGN §5): approvals, policy decisions, effect intents, executions and simulated deliveries.

`_Effects` records the source run's approvals as read-only evidence (`_recorded_approval`; a recorded human
decision is what a simulated approval replays), judges an intent by the policy of the scenario or of the varied
revision (`_evaluate`, `_decide`) and activates an allowed one behind the final lineage gate (`_activate`,
`_gate`), in the replay's namespace with a key derived from the historical one; a refused one returns the decider
to planning (`_return_to_planning`). `_execute` carries out an intent through the destination's mutation contract
and fixture, with fault stages and at most one consequence per intent; when the scenario declares a race on that
tool, the first execution is the race's deliveries, following the declared schedule (`_race`, concurrency.py).
"""

from __future__ import annotations

import contextlib
from typing import Any

from .. import canonical
from ..concurrency import Race, identity_for
from ..contracts import Contract, ContractError
from ..deciders import DENIAL_LIMIT, REASON_CHARS, Activate, CallTool, Decide, Execute, RecordedApproval
from ..fixtures import Hit
from ..vocabulary import references
from ..world import WorldError, effect_resource, iso
from .calls import _ToolCalls


class _Effects(_ToolCalls):
    """Approvals, policy decisions, effect intents behind the final gate, their executions and raced deliveries."""

    def _recorded_approval(self, a: RecordedApproval) -> None:
        e = a.event
        decision = e["decision"]
        chosen = decision
        if a.intent is not None and e["origin"] in ("human", "simulated") and decision in ("approved", "rejected"):
            chosen = self.human_override or decision
            if self.human_choice is not None and a.ref == self.human_choice["approval"]:
                chosen = self.human_choice["decision"]
            self.approved[a.intent] = (chosen, e["actor_role"])
            self.approved_at[a.intent] = self.clock.now  # when the replay's approval is given, on the logical clock
        proposal = self.source.effect_proposal.get(a.intent or "")
        self.emit(
            "approval.recorded",
            ref=a.ref,
            subject=self.resolve(proposal) if proposal else self.resolve(e["subject"]),
            evidence_set_digest=e["evidence_set_digest"],
            decision=decision,
            actor_role=e["actor_role"],
            origin="historical",
            run=e["run"],
            environment=e["environment"],
            historical_event=e["id"],
            historical_origin=e["origin"],
            historical_subject=e["subject"],
            authority="none: historical approvals are read-only evidence in a replay",
            **({"decided_in_replay": chosen} if chosen != decision else {}),
        )

    # policy and effects

    def _evaluate(
        self, destination: str, artifact: str | None, admissions: list[str], intent_ref: str
    ) -> tuple[str, list[str], list[str], tuple[str, str] | None]:
        """(outcome, required, reasons, simulated approval (decision, role) or None)."""
        policy = self.policy
        rule = policy.rule_for(destination)
        if rule is None:
            return "deny", [], [f"{policy.revision} has no rule for destination {destination}: refused"], None
        admitted = {
            self.admissions[a]["purpose"]
            for a in admissions
            if a in self.admissions
            and self.admissions[a]["decision"] == "admitted"
            and self.admissions[a]["artifact_id"] == artifact
        }
        missing = [p for p in rule.required if p not in admitted]
        # Time-dependent rules read the logical clock only (seed 001 "Time had to be controlled"): each reason names
        # the rule and the logical time it was judged at, so a counterfactual that moves the clock shows why.
        where = f"{policy.revision} rule [{rule.destination_prefix}]"
        timed: list[str] = []
        quiet = rule.quiet_hours
        if quiet is not None:
            now = self.clock.now
            if quiet.holds(now.hour * 60 + now.minute):
                return (
                    "deny",
                    list(rule.required),
                    [f"{where}: quiet hours {quiet.text}; logical time {self.now}"],
                    None,
                )
            timed.append(f"{where}: outside quiet hours {quiet.text} at logical time {self.now}")
        approval = None
        if rule.approval == "required":
            recorded = self.approved.get(intent_ref)
            if self.sc.approvals == "simulated" and recorded is not None:
                approval = recorded
            given = self.approved_at.get(intent_ref)
            expires = rule.approval_expires_s
            if approval is not None and approval[0] == "approved" and expires is not None and given is not None:
                age = (self.clock.now - given).total_seconds()
                if age > expires:
                    why = (
                        f"{where}: the approval given at logical time {iso(given)} expired after {expires:g} s "
                        f"(logical time {self.now}, {age:g} s later)"
                    )
                    return "needs_approval", list(rule.required), [why], None
                timed.append(
                    f"{where}: the approval given at logical time {iso(given)} binds for {expires:g} s ({age:g} s)"
                )
            if approval is None or approval[0] != "approved":
                why = (
                    f"the reviewer's recorded decision was {approval[0]}"
                    if approval
                    else "a reviewer's approval is required and none has been given in this run yet"
                )
                return (
                    "needs_approval",
                    list(rule.required),
                    [why] + [f"{p}: no admitted evidence" for p in missing],
                    approval,
                )
        if missing and (policy.require_all or len(missing) == len(rule.required)):
            return "deny", list(rule.required), [f"{p}: no admitted evidence for {artifact}" for p in missing], approval
        reasons = [f"{p} admitted for {artifact}" for p in rule.required if p in admitted]
        if approval is not None:
            reasons.append(f"simulated approval replaying the recorded decision of the {approval[1]}")
        return "allow", list(rule.required), (reasons or ["no evidence required"]) + timed, approval

    def _decide(self, a: Decide) -> None:
        intent = self.source.by_id.get(a.intent) or {}
        admissions = self._rs(a.admissions)
        outcome, required, reasons, _approval = self._evaluate(
            intent.get("destination", ""), intent.get("artifact_id"), admissions, a.intent
        )
        if outcome == "allow":
            return  # the activation step records the allow together with the intent it allows
        proposal = self.source.effect_proposal.get(a.intent)
        self.emit(
            "policy.decision",
            ref=a.ref,
            policy_revision=self.policy.revision,
            subject=self.resolve(proposal) if proposal else self.map.get(a.intent, a.intent),
            input_ids=[x for x in admissions if x in self.admissions],
            required=required,
            outcome=outcome,
            reasons=reasons,
        )

    def _activate(self, a: Activate) -> None:
        proposal = self.resolve(a.proposal)
        admissions = [x for x in self._rs(a.admissions) if x in self.admissions]
        outcome, required, reasons, approval = self._evaluate(a.destination, a.artifact, admissions, a.intent)
        decision_fields = {"policy_revision": self.policy.revision, "input_ids": admissions, "required": required}
        if outcome != "allow":
            decision = self.emit(
                "policy.decision", subject=proposal or a.intent, outcome=outcome, reasons=reasons, **decision_fields
            )
            what = (
                f"{self.policy.revision} holds the intent for {a.destination} for an approval"
                if outcome == "needs_approval"
                else f"{self.policy.revision} denied the intent for {a.destination}"
            )
            self._return_to_planning(a, decision, outcome, None, what, reasons)
            return
        intent_id = self.log.new_id("effect.intent")
        prospective: list[dict[str, Any]] = []
        approval_id = None
        if approval is not None:
            approval_id = self.log.new_id("approval.recorded")
            prospective.append(
                self._draft(
                    "approval.recorded",
                    approval_id,
                    subject=intent_id,
                    evidence_set_digest=canonical.evidence_set_digest(admissions),
                    decision="approved",
                    actor_role=approval[1],
                    origin="simulated",
                    run=self.package.run_id,
                    environment="fixture",
                    basis="the recorded decision of the human, replayed; proves a branch, not consent",
                )
            )
        decision_id = self.log.new_id("policy.decision")
        prospective.append(
            self._draft(
                "policy.decision", decision_id, subject=intent_id, outcome="allow", reasons=reasons, **decision_fields
            )
        )
        key = (
            self.ids.replay_key(a.historical_key, self.world.name) if a.historical_key else self.ids.next("effect_key")
        )
        key = key if key.startswith("replay:") else f"{self.namespace}:{key}"
        prospective.append(
            self._draft(
                "effect.intent",
                intent_id,
                effect_class=a.effect_class,
                destination=a.destination,
                artifact_id=a.artifact,
                admission_ids=admissions,
                approval_id=approval_id,
                idempotency_key=key,
                namespace=self.namespace,
                historical_intent=a.intent if a.ref is not None else None,
            )
        )
        route = self.sc.route_for(a.destination)
        outbox = self._draft(
            "effect.outbox",
            self.log.new_id("effect.outbox"),
            intent_id=intent_id,
            destination=a.destination,
            tool=route.tool if route else None,
            idempotency_key=key,
            request_digest=canonical.digest_json(a.args),
        )
        blocking = self._activation_transaction(a, prospective, outbox)
        if blocking:
            decision = self.emit(
                "policy.decision",
                subject=proposal or a.intent,
                outcome="deny",
                reasons=[f"{f.code}: {f.message}" for f in blocking],
                gate="lineage",
                **decision_fields,
            )
            codes = sorted({f.code for f in blocking})
            self._return_to_planning(
                a,
                decision,
                "deny",
                "lineage",
                f"the final gate of {self.policy.revision} denied the intent for {a.destination}",
                codes,
            )
            return
        self.denials.pop(a.intent, None)  # asked again and allowed: the denial no longer stands
        self.map[a.intent] = intent_id
        if a.ref is not None:
            self.map[a.ref] = intent_id
        self.intent_of[a.intent] = intent_id

    def _activation_transaction(
        self, a: Activate, prospective: list[dict[str, Any]], outbox: dict[str, Any]
    ) -> list[Any]:
        """Seed 003, "The final policy gate repeated the invariant": the final gate runs inside the one local
        transaction that activates the intent and writes its outbox entry, and trusts no earlier allow. Either the
        gate blocks (its findings are returned; nothing is written), or the allow, the intent and the outbox entry
        are all written; a failure between them rolls every one of them back and stops the run, naming it.
        Executions read the intent only from the outbox (`_execute`), so an intent without its entry is never
        delivered."""
        if self.policy.lineage_gate:
            blocking = self._gate(prospective, outbox["intent_id"])
            if blocking:
                return blocking
        mark = len(self.log.events)
        try:
            for event in prospective:
                event["at"]["logical"] = self.now
                self.log.append(event)
            self._write_outbox(outbox, a.args)
        except Exception as exc:  # any failure inside the transaction rolls all of it back
            self.log.rollback(mark)
            self.outbox.pop(outbox["intent_id"], None)
            self.stop(
                "failed",
                f"the activation of the intent for {a.destination} failed before its outbox entry was written "
                f"({type(exc).__name__}: {exc}); rolled back: no intent, no outbox entry, nothing delivered",
            )
        return []

    def _write_outbox(self, outbox: dict[str, Any], args: dict[str, Any]) -> None:
        """The outbox entry: the event, and what a delivery reads (the only place `_execute` reads an intent from)."""
        outbox["at"]["logical"] = self.now
        self.log.append(outbox)
        self.outbox[outbox["intent_id"]] = {
            "id": outbox["intent_id"],
            "outbox_id": outbox["id"],
            "destination": outbox["destination"],
            "idempotency_key": outbox["idempotency_key"],
            "args": args,
        }

    def _return_to_planning(
        self, a: Activate, decision: str, outcome: str, gate: str | None, what: str, why: list[str]
    ) -> None:
        """A denied effect does not end the run: the decider is told the bounded reason (a `run.state running`
        it reads through `View.denial`) and asked what next. See deciders.py, "Denied effects"."""
        self.denied += 1
        artifact = a.artifact
        missing = [p for p in self.required_for(a.destination) if not (artifact and self.has_admitted(p, artifact))]
        reason = f"returned to planning: {what} ({'; '.join(why)})"
        if len(reason) > REASON_CHARS:
            reason = reason[: REASON_CHARS - 1].rstrip() + "\u2026"
        event_id = self.emit(
            "run.state",
            state="running",
            reason=reason,
            returned_to="planning",
            decision_id=decision,
            denied_intent=a.intent,
            destination=a.destination,
            outcome=outcome,
            gate=gate,
            missing_purposes=missing,
            denials=self.denied,
        )
        self.denials[a.intent] = self.log.by_id[event_id]
        if self.denied >= DENIAL_LIMIT:
            self.stop("stopped", f"denied {self.denied} times in one run (the limit); the last: {reason}")

    def _draft(self, kind: str, event_id: str, **fields: Any) -> dict[str, Any]:
        return {
            "seq": 0,
            "id": event_id,
            "kind": kind,
            "at": {"logical": self.now, "wall": self.log.wall},
            "attempt": self.attempt,
            **fields,
        }

    def _gate(self, prospective: list[dict[str, Any]], intent_id: str) -> list[Any]:
        from ..lineage import LineageGraph  # only a gated activation needs it: not imported by every sandbox child

        graph = LineageGraph(self._manifest_run())
        for seq, event in enumerate([*self.log.events, *prospective], start=1):
            graph.add({**event, "seq": seq}, references=references(event))
        return [f for f in graph.intent_findings(intent_id) if f.severity == "error"]

    def _manifest_run(self) -> dict[str, Any]:
        run = {"id": self.package.run_id, "environment": "fixture", "mode": self.package.mode}
        rules = self.source.run.get("compatibility_rules")
        if rules is not None:
            run["compatibility_rules"] = rules  # as the replay's manifest says (`output._run_meta`)
        return run

    def _execute(self, a: Execute) -> None:
        intent_id = self.intent_of.get(a.intent) or self.map.get(a.intent)
        # Delivery reads the outbox, never the intent: no entry, no delivery (an intent this replay never activated,
        # or one whose activation was rolled back).
        info = self.outbox.get(intent_id or "")
        if info is None:
            return
        intent = info
        route = self.sc.route_for(intent["destination"])
        attempts = self.execs.setdefault(intent["id"], [])
        attempt_no = len(attempts) + 1
        connection = f"fixture:{route.tool}" if route else "fixture:none"
        if intent["id"] in self.effect_done:
            ev = self.emit(
                "effect.execution",
                ref=a.ref,
                intent_id=intent["id"],
                attempt_no=attempt_no,
                stage="before_send",
                outcome="rejected",
                connection=connection,
                reason="the simulated provider already holds an effect for idempotency key "
                f"{intent['idempotency_key']}",
            )
            attempts.append(self.log.by_id[ev])
            return
        if route is None:
            self._missing_world(
                f"the scenario routes no contract for effects on {intent['destination']}", intent["destination"]
            )
        contract = self.sc.contracts.get(route.tool)
        excluded = self.sc.excluded(route.tool)
        if excluded is not None:
            # The effect's tool is excluded: the scenario cannot model its consequence, so the run stops here, as
            # a call to an excluded mutation does (`_excluded_call`, calls.py), naming the exclusion rather than a
            # bare miss.
            request_digest = canonical.digest_json(info["args"])
            with contextlib.suppress(ContractError):
                request_digest = contract.digest(info["args"])[1]
            self._missing_call(
                CallTool(a.ref, None, route.tool, info["args"], None, None),
                contract,
                request_digest,
                f"excluded: {route.tool} is a mutation this scenario version excludes ({excluded}): the effect's "
                "consequence cannot be evaluated",
                excluded={"tool": route.tool, "reason": excluded},
                intent_id=intent["id"],
            )
        try:
            _normalized, digest = contract.digest(info["args"])
        except ContractError as exc:
            self._missing_call(
                CallTool(a.ref, None, route.tool, info["args"], None, None),
                contract,
                canonical.digest_json(info["args"]),
                f"the effect's request does not fit {route.tool} revision {contract.revision}: {exc}",
            )
        race = self.sc.race_for(route.tool)
        if race is not None and race.id not in self.raced:
            self.raced.add(race.id)
            self._race(race, intent, contract, digest, connection, a.ref)
            return
        result = self.sc.registry.lookup(route.tool, contract.revision, digest, self.world)
        if not isinstance(result, Hit):
            record = result.record(scenario=self.sc.ref, checkpoint_id=self.checkpoint_id)
            kind = record.pop("kind")
            record["intent_id"] = intent["id"]
            self._record_missing(kind, record)
        fixture = result.fixture
        self._used(fixture)
        stage = self._fault(fixture, digest)
        outcome = {
            None: "acknowledged",
            "before_send": "failed",
            "after_acceptance": "lost_response",
            "before_receipt": "lost_response",
            "after_world_mutation": "unknown",
            "during_response": "unknown",
            "after_local_commit": "acknowledged",
        }[stage]
        ev = self.emit(
            "effect.execution",
            ref=a.ref,
            intent_id=intent["id"],
            attempt_no=attempt_no,
            stage=stage or "completed",
            outcome=outcome,
            connection=connection,
            fixture=fixture.id,
            idempotency_key=intent["idempotency_key"],
        )
        attempts.append(self.log.by_id[ev])
        if stage != "before_send":
            self.effect_done.add(intent["id"])
            if fixture.transition is not None:
                self._mutate(fixture, ev, route.tool)
        if stage == "after_local_commit":
            self.stop(
                "interrupted",
                f"fault after_local_commit injected on {route.tool}: the harness stopped after committing",
            )

    def _race(
        self, race: Race, intent: dict[str, Any], contract: Contract, digest: str, connection: str, ref: str | None
    ) -> None:
        """The intent's first execution as the race's deliveries, in the declared order (see the package docstring).

        Each delivery goes accept -> commit -> acknowledge and stops at its barrier until a `release` step; the
        world it commits into is the world at that moment, so a delivery committed second meets what the first
        left (and needs a fixture for that state, or the run stops as `incomplete_test_world`, naming the race).
        """
        tool, key, intent_id = race.tool, intent["idempotency_key"], intent["id"]
        attempts = self.execs.setdefault(intent_id, [])
        numbers = {d.name: len(attempts) + 1 + i for i, d in enumerate(race.deliveries)}
        held: dict[str, str] = {}  # delivery -> the phase it resumes at
        answered: dict[str, str] = {}  # delivery -> the fixture that answered its commit

        def step(index: int, kind: str, name: str, **fields: Any) -> str:
            return self.emit(
                "schedule.step",
                race=race.id,
                index=index,
                step=kind,
                delivery=name,
                intent_id=intent_id,
                effect_identity=identity_for(race, key, name),
                world_revision=self.world.revision,
                **fields,
            )

        def executed(name: str, **fields: Any) -> None:
            ev = self.emit(
                "effect.execution",
                ref=ref if name == race.deliveries[0].name else None,
                intent_id=intent_id,
                attempt_no=numbers[name],
                stage="completed",
                connection=connection,
                idempotency_key=key,
                race=race.id,
                delivery=name,
                effect_identity=identity_for(race, key, name),
                **fields,
            )
            attempts.append(self.log.by_id[ev])

        def proceed(index: int, name: str, phase: str) -> None:
            barrier = race.delivery(name).barrier
            identity = identity_for(race, key, name)
            if phase == "accept":
                if self.world.get(effect_resource(tool, identity)) is not None:
                    why = f"the simulated provider already holds an effect for identity {identity}"
                    step(index, "deduplicate", name, reason=why)
                    executed(name, outcome="rejected", reason=why)
                    return
                accepted = step(index, "accept", name)
                state = {"delivery": name, "request_digest": digest, "identity": identity}
                try:
                    t = self.world.accept_effect(tool, identity, state, accepted)
                except WorldError as exc:
                    self.stop("failed", f"race {race.id}: the provider's ledger refused delivery {name}: {exc}")
                assert t is not None  # the identity was not held a line ago
                self._world_event(t, accepted)
                self.effect_done.add(intent_id)
                if barrier == "after_acceptance":
                    step(index, "hold", name, barrier=barrier)
                    held[name] = "commit"
                    return
                phase = "commit"
            if phase == "commit":
                result = self.sc.registry.lookup(tool, contract.revision, digest, self.world)
                if not isinstance(result, Hit):
                    record = result.record(scenario=self.sc.ref, checkpoint_id=self.checkpoint_id)
                    kind = record.pop("kind")
                    record.update(intent_id=intent_id, race=race.id, delivery=name)
                    self._record_missing(kind, record)
                self._used(result.fixture)
                answered[name] = result.fixture.id
                committed = step(index, "commit", name, fixture=result.fixture.id)
                if result.fixture.transition is not None:
                    self._mutate(result.fixture, committed, tool)
                if barrier == "after_world_mutation":
                    step(index, "hold", name, barrier=barrier)
                    held[name] = "acknowledge"
                    return
            executed(name, outcome="acknowledged", fixture=answered[name])

        def read(index: int, name: str) -> None:
            """A read taken between deliveries: answered by the fixture of the world as it is now. A delivery held
            after acceptance has an effect the provider holds and the world does not show yet: the read is stale."""
            r = race.read(name)
            read_contract = self.sc.contracts.get(r.tool)
            _normalized, read_digest = read_contract.digest(r.args)
            result = self.sc.registry.lookup(r.tool, read_contract.revision, read_digest, self.world)
            if not isinstance(result, Hit):
                record = result.record(scenario=self.sc.ref, checkpoint_id=self.checkpoint_id)
                kind = record.pop("kind")
                record.update(intent_id=intent_id, race=race.id, read=name)
                self._record_missing(kind, record)
            fixture = result.fixture
            observed = {}
            for clause in fixture.condition:
                current = self.world.get(clause.resource)
                observed[clause.resource] = None if current is None else current[0]
            pending = sorted(d for d, phase in held.items() if phase == "commit")
            step(
                index,
                "read",
                name,
                tool=r.tool,
                fixture=fixture.id,
                outcome=fixture.response.outcome,
                observed=observed,
                stale=bool(pending),
                pending=pending,
                **(
                    {
                        "reason": f"stale: {', '.join(pending)} accepted by the provider and not committed; the "
                        "read observes the world before it"
                    }
                    if pending
                    else {}
                ),
            )

        for index, entry in enumerate(race.schedule):
            name = entry.delivery
            if entry.op == "read":
                read(index, name)
            elif entry.op == "run":
                step(index, "run", name)
                proceed(index, name, "accept")
            elif name in held:
                step(index, "release", name, barrier=race.delivery(name).barrier)
                proceed(index, name, held.pop(name))
            else:
                step(index, "skip", name, reason=f"not held: {name} ended at acceptance, before its barrier")
