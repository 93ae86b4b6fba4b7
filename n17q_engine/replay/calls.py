"""Tool calls (DESIGN §5): through the scenario's contract and the fixture registry, never a live call.

`_ToolCalls._call` normalizes and digests a request by its contract, looks it up with the world as it is now and
the call's workspace visible as `call.workspace:<id>` (`_CallView`), applies a fault stage once per request
(`_fault`) and the fixture's world transition (`_mutate`, held back by a declared delay), and records the result,
or a `command.receipt` whose trees come from the simulated workspace (`_receipt`). Some calls are answered
without a lookup: a tool a `refused_tools` invariant names (`_refused_call`), an account no synthetic grant
covers (`_authorize`: denied), an excluded read (`_excluded_call`: recorded, not evaluated). What the fixture
world cannot answer stops the run as `incomplete_test_world` with the record of what is missing (`_missing_call`,
`_lookup_failed`, `_missing_world`, `_record_missing`); effects and the other steps stop through these too.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any, NoReturn

from .. import canonical
from ..agent.model import MODEL_TOOL, contract_for
from ..contracts import Contract, ContractError
from ..deciders import REASON_CHARS, CallTool
from ..fixtures import NEGATIVE_SCOPES, Ambiguous, BodyExpired, ContractMismatch, Fixture, Hit, Miss
from ..package import refused_by
from ..redirects import redirect_like
from ..world import SimulatedWorld, WorldError, parse_time, synthetic_token
from .state import _EngineState

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"


class _CallView:
    """The world as a fixture lookup sees it for one call: the world plus the call's workspace."""

    def __init__(self, world: SimulatedWorld, workspace: str | None) -> None:
        self._world, self._workspace = world, workspace

    @property
    def revision(self) -> int:
        return self._world.revision

    def get(self, resource: str) -> tuple[int, Any] | None:
        if resource.startswith("call.workspace:"):
            ws = resource[len("call.workspace:") :]
            return self._world.get(f"workspace:{ws}") if ws == self._workspace else None
        return self._world.get(resource)


class _ToolCalls(_EngineState):
    """Tool calls against the scenario's contracts and fixtures, and the stop for what the fixture world lacks."""

    def _call(self, a: CallTool) -> None:
        sc = self.sc
        proposal = self.resolve(a.proposal)
        workspace = a.workspace
        if self.refusals:
            for inv in self.refusals:
                if refused_by(inv, a.tool):
                    self._refused_call(a, proposal, inv)
                    return
        reason = sc.excluded(a.tool)
        if reason is not None:
            self._excluded_call(a, proposal, reason)
            return
        # The contract in force: the scenario's, or, for an agent's model request where the scenario pins none, the
        # built-in one (docs/agents.md "Model fixtures"), so the run records the exact request it stopped on.
        contract: Contract | None = contract_for(sc.contracts, a.tool)
        if contract is None:
            self._missing_call(
                a, None, canonical.digest_json(a.args), f"unknown tool: the scenario has no contract for {a.tool}"
            )
        if a.recorded_revision is not None and a.recorded_revision != contract.revision:
            self._missing_call(
                a,
                contract,
                canonical.digest_json(a.args),
                f"contract mismatch: the recorded call used {a.tool} revision {a.recorded_revision}, the scenario pins "
                f"revision {contract.revision}",
                recorded_revisions=[a.recorded_revision],
            )
        try:
            normalized, digest = contract.digest(a.args)
        except ContractError as exc:
            self._missing_call(
                a,
                contract,
                canonical.digest_json(a.args),
                f"request does not fit {a.tool} revision {contract.revision}: {exc}",
            )
        if workspace is not None and self.world.get(f"workspace:{workspace}") is None:
            self._missing_call(
                a, contract, digest, f"workspace {workspace} does not exist in the fixture world", request=normalized
            )
        authorization = self._authorize(a.tool, normalized) if a.tool in sc.authorized_tools else None
        call = self.emit(
            "tool.call",
            ref=a.ref,
            tool=a.tool,
            contract_revision=contract.revision,
            request=normalized,
            request_digest=digest,
            proposal_id=proposal,
            workspace_id=workspace,
            **({"authorization": authorization} if authorization is not None else {}),
        )
        if authorization is not None and authorization["decision"] == "denied":
            # The world refuses it as a provider would: no fixture consulted, no world change; the decider sees it.
            res = self._emit_denied(a, call, authorization=authorization)
            self.seen_since_proposal.append(res)
            return
        result = sc.registry.lookup(a.tool, contract.revision, digest, _CallView(self.world, workspace))
        if not isinstance(result, Hit):
            self._lookup_failed(result, call)
        fixture = result.fixture
        self._used(fixture)
        redirect = redirect_like(fixture.response.body)
        if redirect is not None:
            # Seed 000: a redirect-like result is an invitation to look elsewhere, never followed (redirects.py).
            self._missing_call(
                a,
                contract,
                digest,
                f"redirect-like result: fixture {fixture.id} answers with {redirect}; a replay never follows it "
                "(record the answer at its target as a fixture of its own)",
                request=normalized,
                call_id=call,
                fixture=fixture.id,
            )
        stage = self._fault(fixture, digest)
        mutated = False
        if stage != "before_send" and fixture.transition is not None:
            mutated = self._mutate(fixture, call, a.tool)
        outcome = fixture.response.outcome
        if stage in ("after_acceptance", "before_receipt"):
            outcome = "timeout"
        elif stage in ("after_world_mutation", "during_response"):
            outcome = "unknown"
        elif stage == "before_send":
            outcome = "error"
        recorded_result = self.source.result_of.get(a.ref) if a.ref is not None else None
        if contract.produces == "receipt" and stage is None:
            self._receipt(fixture, call, workspace, recorded_result)
            elapsed = fixture.response.body.get("elapsed_s") if isinstance(fixture.response.body, dict) else None
            if a.ref is None and isinstance(elapsed, int | float) and not isinstance(elapsed, bool) and elapsed > 0:
                # the decider's own command (a rerun validation): its compute is the replay's, and it is charged
                receipt = self.log.last["command.receipt"]["id"]
                self._spend("compute_s", elapsed, origin="replay", cause=receipt, what=f"the rerun {receipt}")
        else:
            body = fixture.response.body if stage in (None, "after_local_commit") else None
            blob = self.log.blob(canonical.canonical_json(body), JSON, "tool-output") if body is not None else None
            extra: dict[str, Any] = {"fixture": fixture.id, "freshness": self._freshness(fixture)}
            if stage is not None:
                extra["fault_stage"] = stage
                extra["world_mutated"] = mutated
            negative = self._negative(fixture, outcome)
            if negative is not None:
                extra["negative"] = negative
            res = self.emit(
                "tool.result",
                ref=recorded_result,
                call_id=call,
                origin="fixture",
                outcome=outcome,
                blob=blob,
                absent=dict(fixture.response.absent),
                **extra,
            )
            self.seen_since_proposal.append(blob or res)
            need = sc.required_absent(a.tool, fixture.response.absent) if stage is None else None
            if need is not None:
                # Seed 000 "Unknown fixture data stayed unknown": the answer is on the record with its absence, and
                # the run stops there rather than go on as if the value were there (or empty).
                item, path, kind = need
                self._record_missing(
                    "fixture.missing",
                    {
                        "scenario": sc.ref,
                        "tool": a.tool,
                        "contract_revision": contract.revision,
                        "request_digest": digest,
                        "world_revision": self.world.revision,
                        "checkpoint_id": self.checkpoint_id,
                        "reason": f"required value {kind}: fixture {fixture.id} answers with {path} {kind}, and the "
                        f"scenario requires {item['path']} ({item['reason']}); record it, or give a synthetic "
                        "replacement with a fidelity note",
                        "call_id": call,
                        "required_value": {"path": item["path"], "absent_path": path, "kind": kind},
                    },
                )
        if stage == "after_local_commit":
            self.stop(
                "interrupted", f"fault after_local_commit injected on {a.tool}: the harness stopped after committing"
            )

    def _freshness(self, fixture: Fixture) -> dict[str, Any]:
        """How old the fixture's recording is at the replay's logical time, judged by the scenario's freshness rule
        for the tool (seed 000: "Freshness policy evaluated against simulated time"). Never the wall clock: the same
        result is fresh in a replay whose clock stands near the recording and stale in one set a year later, and a
        stale result is still served as recorded (historically faithful and currently stale at once). No rule, or a
        recording time that is not a time: `not_evaluated`, with the reason."""
        prov = fixture.provenance
        max_age = self.sc.freshness.get(fixture.tool)
        out: dict[str, Any] = {
            "recorded_at": prov.recorded_at,
            "source_revision": prov.source_revision,
            "connection": prov.connection,
            "contract_revision": fixture.contract_revision,
            "evaluated_at": self.now,
            "age_s": None,
            "max_age_s": max_age,
        }
        try:
            recorded = parse_time(prov.recorded_at)
        except (TypeError, ValueError):
            return {**out, "state": "not_evaluated", "reason": f"the recording time {prov.recorded_at!r} is not a time"}
        age = (self.clock.now - recorded).total_seconds()
        out["age_s"] = age
        if age < 0:
            reason = "recorded after the logical time it is served at: the run it replays could not have seen it"
            return {**out, "state": "not_evaluated", "reason": reason}
        if max_age is None:
            reason = f"this scenario version declares no freshness rule for {fixture.tool}"
            return {**out, "state": "not_evaluated", "reason": reason}
        if age > max_age:
            reason = f"recorded {age:g} s before logical {self.now}, older than the {max_age:g} s {fixture.tool} allows"
            return {**out, "state": "stale", "reason": reason}
        return {
            **out,
            "state": "fresh",
            "reason": f"recorded {age:g} s before logical {self.now}, within {max_age:g} s",
        }

    def _negative(self, fixture: Fixture, outcome: str) -> dict[str, Any] | None:
        """The scope of a negative observation served as the fixture declares it (seed 000 "Unknown fixture data
        stayed unknown"): an `empty` names its query and corpus revision, a `not_found` its consistency window and
        the world state it was observed in (the world's revision and the resource's, read now). A fixture that
        declares no scope says so (`declared: false`): the gap shows, nothing is filled in."""
        declared = fixture.response.negative
        if outcome != fixture.response.outcome or outcome not in NEGATIVE_SCOPES:
            return None
        if declared is None:
            return {"outcome": outcome, "declared": False}
        out = {"outcome": outcome, "declared": True, **declared}
        if outcome == "not_found":
            held = self.world.get(str(declared["resource"]))
            out["world_revision"] = self.world.revision
            out["resource_revision"] = None if held is None else held[0]
        return out

    def _emit_denied(self, a: CallTool, call: str, **why: Any) -> str:
        """A call the world refuses as a provider would (outside every grant, or a tool the scenario forbids): a
        `denied` result, no fixture consulted, no body; `why` says which refusal it was."""
        return self.emit(
            "tool.result",
            ref=self.source.result_of.get(a.ref) if a.ref is not None else None,
            call_id=call,
            origin="fixture",
            outcome="denied",
            blob=None,
            absent={"body": "not_applicable"},
            **why,
        )

    def _refused_call(self, a: CallTool, proposal: str | None, inv: dict[str, Any]) -> None:
        """A call to a tool a `refused_tools` invariant names: recorded and refused by the world, never looked up.

        Whatever text asked for it (a fixture's body, a workspace file), the call reaches nothing: the scenario has
        no contract to perform it, the engine no live client. Repeated attempts stop the run: the one after the
        invariant's `max` ends it `failed`, naming the invariant and every refused call."""
        calls = self.refused.setdefault(inv["id"], [])
        contract = self.sc.contracts.get(a.tool) if a.tool in self.sc.contracts else None
        workspace = a.workspace if a.workspace in self.objects else None
        call = self.emit(
            "tool.call",
            ref=a.ref,
            tool=a.tool,
            contract_revision=contract.revision if contract is not None else (a.recorded_revision or 0),
            request=a.args,
            request_digest=canonical.digest_json(a.args),
            proposal_id=proposal,
            workspace_id=workspace,
        )
        calls.append(call)
        res = self._emit_denied(
            a,
            call,
            refused={"invariant": inv["id"], "reason": inv["text"], "attempt": len(calls), "tolerated": inv["max"]},
        )
        self.seen_since_proposal.append(res)
        if len(calls) > inv["max"]:
            self.stop(
                "failed",
                _bounded(
                    f"invariant {inv['id']} ({inv['text']}): {len(calls)} refused calls to tools the scenario "
                    f"forbids ({', '.join(inv['tools'])}), at most {inv['max']} tolerated; the last: {a.tool} "
                    f"({call}); refused: {', '.join(calls)}"
                ),
            )

    def _authorize(self, tool: str, normalized: Any) -> dict[str, Any]:
        """The world's answer to a call that needs authorization: which synthetic grant covers it, or why none."""
        field = self.sc.authorized_tools[tool]
        account = normalized.get(field) if isinstance(normalized, dict) else None
        for grant in self.sc.grants:
            if tool in grant.tools and grant.account == account:
                return {
                    "decision": "allowed",
                    "grant": grant.id,
                    "account": account,
                    "scope": {"account": grant.account, "tools": list(grant.tools)},
                    "synthetic": True,
                    "token_fingerprint": self._fingerprint(grant.id),
                }
        held = [{"grant": g.id, "account": g.account, "tools": list(g.tools)} for g in self.sc.grants]
        return {
            "decision": "denied",
            "account": account,
            "synthetic": True,
            "grants_held": held,
            "reason": f"no synthetic grant of this replay authorizes {tool} on account {account!r} "
            f"(held: {', '.join(f'{g.id} for {g.account}' for g in self.sc.grants) or 'none'})",
        }

    def _fingerprint(self, grant: str) -> str:
        return canonical.digest_bytes(synthetic_token(self.sc.seed, self.basis, grant).encode("utf-8"))

    def _excluded_call(self, a: CallTool, proposal: str | None, reason: str) -> None:
        """A call to a tool the scenario version excludes: recorded, not evaluated, and the replay goes on.

        The exclusion is the scenario's declared scope (DESIGN §5: "excluded tools with reasons"), not a hole in
        the test world, so it is no `fixture.missing`. The result says nothing about the world: outcome
        `unknown`, no blob, the body `not_applicable`, origin `fixture` (the scenario answered, by excluding), and
        `excluded` carries the reason. No fixture is consulted and no world state changes, so whatever the source
        run learned from this tool is not reproduced; what rests on it is marked unevaluated (see `_claim`, steps.py).
        """
        contract = self.sc.contracts.get(a.tool) if a.tool in self.sc.contracts else None
        request: Any = a.args
        digest = canonical.digest_json(a.args)
        if contract is not None:
            # an excluded tool's request is not checked: nothing is looked up with it
            with contextlib.suppress(ContractError):
                request, digest = contract.digest(a.args)
        if contract is None or contract.effect_class != "read":
            # A mutation the scenario cannot model (or a tool whose effect class it does not know): going on would
            # let the run continue as if the world had changed, or as if it had not, and neither is known. The run
            # stops here, precisely, through the missing-fixture path (seed 000, "Missing mutations were treated
            # most strictly": an incomplete simulation admits what it cannot evaluate).
            what = "a mutation" if contract is not None else "a tool of unknown effect class"
            self._missing_call(
                a,
                contract,
                digest,
                f"excluded: {a.tool} is {what} this scenario version excludes ({reason}): the world after it cannot "
                "be evaluated",
                request=request,
                excluded={"tool": a.tool, "reason": reason},
            )
        need = self.sc.requires(a.tool)
        if need is not None:
            # An excluded read whose value the scenario requires: no `unknown` placeholder to carry on with (seed 000,
            # "Unknown fixture data stayed unknown": a scenario requiring the missing value stopped).
            self._missing_call(
                a,
                contract,
                digest,
                f"excluded: {a.tool} is excluded by this scenario version ({reason}), and the scenario requires "
                f"{need['path']} of its answer ({need['reason']}): the run cannot go on without it",
                request=request,
                excluded={"tool": a.tool, "reason": reason},
                required_value={"path": need["path"], "absent_path": "body", "kind": "not_applicable"},
            )
        revision = contract.revision if contract is not None else (a.recorded_revision or 0)
        call = self.emit(
            "tool.call",
            ref=a.ref,
            tool=a.tool,
            contract_revision=revision,
            request=request,
            request_digest=digest,
            proposal_id=proposal,
            workspace_id=a.workspace,
        )
        recorded_result = self.source.result_of.get(a.ref) if a.ref is not None else None
        res = self.emit(
            "tool.result",
            ref=recorded_result,
            call_id=call,
            origin="fixture",
            outcome="unknown",
            blob=None,
            absent={"body": "not_applicable"},
            excluded={"tool": a.tool, "reason": reason},
            evaluated=False,
        )
        self.unevaluated[call] = a.tool
        self.unevaluated[res] = a.tool
        self.seen_since_proposal.append(res)

    def _receipt(self, fixture: Fixture, call: str, workspace: str | None, recorded: str | None) -> None:
        body = fixture.response.body if isinstance(fixture.response.body, dict) else {}
        if workspace is None:
            self.stop("failed", f"fixture {fixture.id} answers with a command receipt but the call names no workspace")
        held = self.world.get(f"workspace:{workspace}")
        state = held[1] if held else {}
        elapsed = body.get("elapsed_s")
        if isinstance(elapsed, int | float) and elapsed > 0:
            self.advance_to(self.clock.now + timedelta(seconds=elapsed), call, f"{fixture.id} ran for {elapsed} s")
        output = body.get("output")
        output_blob = self.log.blob(output.encode("utf-8"), TEXT, "command-output") if isinstance(output, str) else None
        receipt = self.emit(
            "command.receipt",
            ref=recorded,
            call_id=call,
            workspace_id=workspace,
            command=body.get("command", ""),
            suites=list(body.get("suites", [])),
            pre_tree=state.get("tree_digest"),
            post_tree=state.get("tree_digest"),
            environment_revision=state.get("environment_revision"),
            completion=body.get("completion", "completed"),
            exit_code=body.get("exit_code"),
            results=body.get("results", {}),
            output_blob=output_blob,
            fixture=fixture.id,
            origin="fixture",
        )
        self.seen_since_proposal.append(output_blob or receipt)
        if body.get("completion") == "termination_unknown":
            self.emit("workspace.lifecycle", workspace_id=workspace, state="uncertain", cause=receipt)

    def _fault(self, fixture: Fixture, digest: str) -> str | None:
        stage = fixture.fault_stage
        for fault in self.faults:
            if fault.tool == fixture.tool and fault.request_digest in (None, digest):
                stage = fault.stage
        if stage is None:
            return None
        key = (fixture.tool, digest, stage)
        if key in self.fired:  # a fault happens once; the retry meets the world as the fault left it
            return None
        self.fired.add(key)
        return stage

    def _mutate(self, fixture: Fixture, cause: str, tool: str) -> bool:
        t = fixture.transition
        assert t is not None
        op = "create" if t.revision_before is None else ("delete" if t.change is None else "update")
        transition = {
            "resource": t.resource,
            "revision_before": t.revision_before,
            "revision_after": t.revision_after,
            "change": {"op": op, "state": t.change},
        }
        delay = self.delays.get(tool, 0.0)
        try:
            if delay > 0:
                self.world.schedule(self.clock.now + timedelta(seconds=delay), transition, cause)
                return True
            applied = self.world.apply(transition, cause)
        except WorldError as exc:
            self._missing_world(f"fixture {fixture.id}'s transition does not fit the world: {exc}", t.resource)
        self._world_event(applied, cause)
        return True

    # the missing-fixture stop

    def _missing_call(
        self, a: CallTool, contract: Contract | None, digest: str, reason: str, *, request: Any = None, **extra: Any
    ) -> NoReturn:
        record = {
            "scenario": self.sc.ref,
            "tool": a.tool,
            "contract_revision": contract.revision if contract else (a.recorded_revision or 0),
            "request_digest": digest,
            "world_revision": self.world.revision,
            "checkpoint_id": self.checkpoint_id,
            "reason": reason,
            "proposal_id": self.resolve(a.proposal),
            # No `tool.call` is made for a call stopped before its lookup (no contract, a revision mismatch, a
            # request that does not fit, an exclusion), so the request rides here (issue 36: the missing fixture's
            # request is read, not only its digest): normalized when the contract could (`request` given, the one
            # `request_digest` digests), else as the decider sent it.
            "request": a.args if request is None else request,
            **extra,
        }
        self._record_missing("fixture.missing", record)

    def _lookup_failed(self, result: Miss | Ambiguous | ContractMismatch | BodyExpired, call: str) -> NoReturn:
        record = result.record(scenario=self.sc.ref, checkpoint_id=self.checkpoint_id)
        kind = record.pop("kind")
        record["call_id"] = call
        if isinstance(result, Miss) and result.tool == MODEL_TOOL and MODEL_TOOL not in self.sc.contracts:
            record["reason"] = (
                f"unrecorded: the scenario pins no {MODEL_TOOL} contract; the built-in one (revision "
                f"{result.contract_revision}) normalized the request and no model answer is recorded for it"
            )
        elif isinstance(result, Miss) and not any(f.tool == result.tool for f in self.sc.fixtures):
            record["reason"] = (
                f"unrecorded: the scenario has a contract for {result.tool} revision {result.contract_revision} and no "
                "fixture for it at all (this request was never recorded)"
            )
        self._record_missing(kind, record)

    def _missing_world(self, reason: str, resource: str) -> NoReturn:
        record = {
            "scenario": self.sc.ref,
            "tool": "world",
            "contract_revision": 0,
            "request_digest": canonical.digest_json({"resource": resource}),
            "world_revision": self.world.revision,
            "checkpoint_id": self.checkpoint_id,
            "reason": reason,
        }
        self._record_missing("fixture.missing", record)

    def _record_missing(self, kind: str, record: dict[str, Any]) -> NoReturn:
        event_id = self.emit(kind, **record)
        self.missing.append({"event": event_id, "kind": kind, **record})
        what = "ambiguous fixtures" if kind == "fixture.ambiguous" else "missing fixture"
        if "body_expired" in record:  # seed 001: the fixture is there, its body's bytes are not
            what = "expired fixture body"
        self.stop(
            "incomplete_test_world",
            f"{what} for {record['tool']} revision {record['contract_revision']} "
            f"(request {record['request_digest']}, world revision {record['world_revision']}): {record['reason']}",
        )


def _bounded(text: str) -> str:
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1].rstrip() + "\u2026"
