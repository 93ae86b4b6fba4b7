"""The replay loop: `run_replay`, the sandbox entry `sandbox_main`, and the run of a rerun or a counterfactual.

`run_replay(package, isolation=...)` returns a `ReplayOutput`: a reconstruction's (output.py), or for a rerun or
a counterfactual `_Engine.run`'s: the scope note (`replay.scope`, computed from the manifest alone) and a first
checkpoint; a branch's history restored (branching.py); the decider's actions, each paced by its recorded time and
performed (steps.py), until the decider or the run stops; scheduled transitions settled; open attempts ended and
the final `run.state` with the scenario's invariants and the budget; the manifest. `sandbox_main`
(`n17q_engine.replay:sandbox_main`, re-exported by the package) is the same as the sandbox child's entry: the
package in wire form on stdin, the output on stdout, progress lines on stderr.

The top of the package's layers (loop -> branching -> steps -> effects -> calls -> state -> output; an
import-linter contract in pyproject.toml keeps them one-way).
"""

from __future__ import annotations

import gc
import json
import os
from dataclasses import replace
from typing import Any

from .. import canonical
from ..deciders import SourceRun
from ..package import REPLAY_FORMAT, Package, ReplayPackage, load_replay
from ..vocabulary import BUNDLE_FORMAT
from ..world import parse_time
from .branching import _Branching
from .output import ReplayError, ReplayOutput, _Reconstruction, _run_meta
from .state import _Stopped
from .steps import PROGRESS_EVERY

TRUTH = {"reconstruction": "exact", "rerun": "comparable", "counterfactual": "experiment"}
ISOLATION_ENV = "N17Q_SANDBOX_ISOLATION"
# Progress lines for a watching console: `sandbox_main` sets this to write one `replay.progress` line on the
# sandbox's stderr event channel every PROGRESS_EVERY steps. Counting steps, not reading a clock, keeps the log
# byte-identical; nothing in the run depends on whether anyone is listening.
PROGRESS: Any = None


def sandbox_main(payload: bytes) -> bytes:
    """The sandbox entry: a replay package in wire form on stdin, a `ReplayOutput` on stdout."""
    global PROGRESS
    # The child runs this one replay and exits, under the sandbox's memory limit. The engine makes no reference
    # cycles worth collecting (reference counting frees what it drops), so the cyclic collector would only walk
    # the ever larger log, fixtures and source run again and again: about a tenth of a large replay's time.
    gc.disable()
    isolation = os.environ.get(ISOLATION_ENV, "degraded")
    PROGRESS = _progress_line
    package = Package.from_wire(payload, REPLAY_FORMAT)
    return run_replay(load_replay(package), isolation=isolation).to_wire()


def _progress_line(events: int, logical: str, checkpoint: str | None) -> None:
    line = {"event": "replay.progress", "events": events, "logical": logical, "checkpoint": checkpoint}
    os.write(2, (json.dumps(line) + "\n").encode("utf-8"))


def run_replay(package: ReplayPackage, *, isolation: str) -> ReplayOutput:
    if isolation not in ("netns", "degraded"):
        raise ReplayError(f"isolation must be netns or degraded, got {isolation!r}")
    # The source events are an imported run's (the importer validated every field), pinned by the package's
    # digest: their shape is checked here, and a field the engine needs and does not find is a ReplayError.
    try:
        source = SourceRun.parse(package.source_manifest, package.source_events, validate=False)
        if package.mode == "reconstruction":
            return _Reconstruction(package, source, isolation).run()
        return _Engine(package, source, isolation).run()
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, ReplayError):
            raise
        raise ReplayError(f"the source run in the package is malformed: {type(exc).__name__}: {exc}") from None


class _Engine(_Branching):
    """A rerun or a counterfactual, from its scope note to its final state and manifest (`run`)."""

    # ------------------------------------------------------------------ the run

    def run(self) -> ReplayOutput:
        self._scope_note()
        self._checkpoint(None)
        progress = PROGRESS
        if progress is not None:
            progress(len(self.log.events), self.now, self.checkpoint_id)
        actions = None
        step = 0
        try:
            if self.branch_index is not None:
                step = self._restore(progress)
                self._enter_segment()
            history = self.source.events[: self.branch_index + 1] if self.branch_index is not None else []
            segment = replace(self.source, events=self.source.events[len(history) :], history=history)
            actions = self.decider.actions(segment, self)
            for action in actions:
                step += 1
                self.pace(action)
                self.perform(action)
                if progress is not None and step % PROGRESS_EVERY == 0:
                    progress(len(self.log.events), self.now, self.checkpoint_id)
            self._settle_all()
        except _Stopped:
            pass
        finally:
            if actions is not None:
                actions.close()
        self._finish()
        return self._output()

    def _scope_note(self) -> None:
        sc = self.sc
        uncovered = list(sc.uncovered)
        for item in sc.excluded_tools:
            uncovered.append(f"{item['tool']}: excluded: {item['reason']}")
        with_fixtures = {f.tool for f in sc.fixtures}
        for contract in sc.contracts:
            if contract.tool not in with_fixtures and sc.excluded(contract.tool) is None:
                uncovered.append(f"{contract.tool} revision {contract.revision}: no fixture in this scenario version")
        self.emit(
            "replay.scope",
            scenario=sc.ref,
            scope=sc.scope,
            recorded_between=sc.recorded_between,
            synthetic=sorted(f.id for f in sc.fixtures if f.provenance.synthetic),
            uncovered=uncovered,
            isolation=self.isolation,
            mode=self.package.mode,
            truth=TRUTH[self.package.mode],
            fixture_world={
                "name": self.world.name,
                "parent": self.world.parent,
                "snapshot": canonical.digest_json(sc.world),
            },
            decider=self.decider.name,
            vary=dict(self.package.vary),
            policy_revision=self.varied_policy.revision,
            package=self.package.digest,
            scenario_digest=sc.digest,
            segment=self._segment_note(),
            **self._issue19_scope(),
        )
        self.scope_event = self.log.by_id[self.log.events[-1]["id"]]

    def _issue19_scope(self) -> dict[str, Any]:
        """The scope note's additive fields: the declared budget, and the synthetic credentials issued (their
        scope identity and fingerprint, never the token)."""
        sc = self.sc
        out: dict[str, Any] = {}
        if sc.budgets:
            out["budget"] = {
                r: {"limit": b.limit, "recovery_reserve": b.recovery_reserve} for r, b in sorted(sc.budgets.items())
            }
        if sc.declared:
            # Seed 003: what the scenario declares of the run's end (scenario_evaluation.py judges it from this).
            out["declared"] = dict(sc.declared)
        if sc.grants:
            out["credentials"] = [
                {
                    "grant": g.id,
                    "account": g.account,
                    "tools": list(g.tools),
                    "synthetic": True,
                    "token_fingerprint": self._fingerprint(g.id),
                }
                for g in sc.grants
            ]
        return out

    def _settle_all(self) -> None:
        pending = self.world.pending()
        if pending:
            last = max(parse_time(p["at"]) for p in pending)
            self.advance_to(last, None, "scheduled transitions settle before the replay ends")

    def _finish(self) -> None:
        invariants = self._invariants()
        broken = [i for i in invariants if not i["held"]]
        state, reason = self.final or ("completed", f"{self.decider.name} decisions exhausted")
        if broken and state == "completed":
            state = "failed"
            reason = "invariant violated: " + "; ".join(f"{i['id']}: {i['detail']}" for i in broken)
        for attempt in reversed(self.open_attempts):
            self.attempt = attempt
            self.emit("attempt.ended", outcome=f"{state}: {reason}")
        self.open_attempts = []
        extra: dict[str, Any] = {}
        budget = self._budget_record()
        if budget:
            extra["budget"] = budget
        self.emit("run.state", state=state, reason=reason, invariants=invariants, missing=self.missing, **extra)

    def _budget_record(self) -> dict[str, Any]:
        out = {}
        for resource in sorted(set(self.spent) | set(self.budget_limits)):
            out[resource] = {
                "spent": self.spent.get(resource, 0),
                "replay_own": self.own_spent.get(resource, 0),
                "recovery": self.recovery_spent.get(resource, 0),
                "limit": self.budget_limits.get(resource),
                "recovery_reserve": self.reserve.get(resource, 0) if resource in self.budget_limits else None,
            }
        return out

    def _invariants(self) -> list[dict[str, Any]]:
        out = []
        events = self.log.events
        for inv in self.sc.invariants:
            check = inv["check"]
            if check == "no_live_effect":
                bad = [
                    e["id"]
                    for e in events
                    if (e["kind"] == "effect.intent" and e["namespace"] == "live")
                    or (e["kind"] == "effect.execution" and not str(e["connection"]).startswith("fixture:"))
                ]
                detail = (
                    f"live effects: {', '.join(bad)}" if bad else "no intent in the live namespace, no live connection"
                )
            elif check == "max_transitions":
                hits = [
                    e["id"]
                    for e in events
                    if e["kind"] == "world.transition" and e["resource"].startswith(inv["resource_prefix"])
                ]
                bad = hits if len(hits) > inv["max"] else []
                detail = f"{len(hits)} transitions on {inv['resource_prefix']}* (at most {inv['max']})"
            elif check == "refused_tools":
                calls = self.refused.get(inv["id"], [])
                bad = calls if len(calls) > inv["max"] else []
                detail = (
                    f"{len(calls)} refused call{'s' if len(calls) != 1 else ''} to {', '.join(inv['tools'])} "
                    f"(at most {inv['max']} tolerated before the run stops)"
                    + (f": {', '.join(calls)}" if calls else "")
                )
            else:  # approval_before_effect
                bad = []
                for e in events:
                    if e["kind"] != "effect.execution":
                        continue
                    intent = self.log.by_id.get(e["intent_id"]) or {}
                    approval = self.log.by_id.get(intent.get("approval_id") or "")
                    rule = self.policy.rule_for(intent.get("destination", ""))
                    needs = rule is None or rule.approval == "required"
                    if needs and (approval is None or approval["seq"] > e["seq"] or approval["origin"] == "historical"):
                        bad.append(e["id"])
                detail = (
                    f"executions without a prior approval of this run: {', '.join(bad)}"
                    if bad
                    else "every execution approved first"
                )
            out.append({"id": inv["id"], "text": inv["text"], "held": not bad, "detail": detail})
        return out

    def _output(self) -> ReplayOutput:
        pkg, src = self.package, self.source
        model = dict(self.decider.model) if self.decider.model else src.run.get("model")
        manifest = {
            "format": BUNDLE_FORMAT,
            "run": {
                **_run_meta(
                    pkg,
                    src,
                    self.log.events,
                    environment="fixture",
                    mode=pkg.mode,
                    scenario=self.sc.ref,
                    isolation=self.isolation,
                    replay={
                        "id": pkg.replay_id,
                        "decider": self.decider.name,
                        "vary": dict(pkg.vary),
                        "package": pkg.digest,
                        "world": self.world.name,
                        "basis": self.basis,
                        # The branch point (a source checkpoint's id, or "start"): with mode and vary, what the
                        # console needs to launch the same replay again (runs/relaunch.py).
                        "checkpoint": pkg.checkpoint or "start",
                    },
                ),
                "model": model,
                "policy_revision": self.policy.revision,
            },
            "blobs": self.log.blob_meta,
        }
        return ReplayOutput(manifest, self.log.jsonl(), dict(self.log.blobs))
