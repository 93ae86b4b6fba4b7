"""What carried forward into a retry and what became stale, evidence by evidence (seed 003, "Retry preserved task and
changed attempt": "The checkpoint compiler explained what carried forward and what became stale.").

A retry is a new attempt (`attempt.started` naming its parent attempt) with its own workspace lineage; it does not
copy validation admission wholesale. For every attempt after the first, `CarryForward.result` explains each evidence
observation made before it (in another attempt), with the admissions made of it:

- `carried_forward`: admitted again in the later attempt under a compatibility rule the run's policy declares and
  whose recorded facts hold (lineage/evidence.py `rule_unmet`, LIN001's own test);
- `carried_forward_unjustified`: admitted again in the later attempt with no rule, or one that does not hold: the
  sentence names why (LIN001's reason), and the staleness below if any (LIN006);
- `rerun`: not carried forward; the later attempt ran a command for the same suites or purposes (its receipt, its
  completion and failures are named);
- `stale`: not carried forward, and its workspace left the active state or its tree moved on after it (the event
  that made it stale is named); a command receipt speaking for a validation purpose is `needs_rerun` instead;
- `needs_rerun`: command evidence for a validation purpose the later attempt neither carried forward nor reran
  (command evidence requires compatibility rules and usually a rerun);
- `still_relevant`: a tool result (a source read, a lookup) whose workspace and tree still held: sources and reasoning
  evidence remain relevant while their revisions and scope hold.

Staleness is reported on every item that has it, carried or not: evidence carried forward from a workspace that had
become uncertain is exactly the edge the story broke. The facts layer (n17q_engine/facts.py) feeds it and stores the
answer as `facts["retries"]`; the run page's attempt view and the API read it from there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .lineage import LineageGraph
from .lineage.evidence import rule_unmet
from .lineage.graph import VALIDATION_PREFIX

# Observations and receipts kept (the explanation covers the first ones; `truncated` says when more were left out).
MAX_TRACKED = 10_000
ITEMS_PER_RETRY = 200
RETRIES_KEPT = 50
# What each status is called on the pages.
LABELS = {
    "carried_forward": "carried forward",
    "carried_forward_unjustified": "carried forward without a rule that holds",
    "rerun": "rerun",
    "stale": "stale",
    "needs_rerun": "needs rerun",
    "still_relevant": "still relevant",
}
_NOT_ACTIVE = ("quarantined", "superseded", "uncertain", "torn_down")


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _strs(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str) and v] if isinstance(value, list) else []


@dataclass
class _Observation:
    id: str
    seq: int
    attempt: str | None
    source: str | None
    workspace: str | None
    tree: str | None
    scope: list[str]
    admissions: list[str] = field(default_factory=list)  # (id) made in the observation's own attempt or before
    carried: list[dict[str, Any]] = field(default_factory=list)  # admissions made later, with their attempt


@dataclass
class _Receipt:
    id: str
    seq: int
    attempt: str | None
    workspace: str | None
    suites: list[str]
    completion: str | None
    failed: int
    exit_code: Any


class CarryForward:
    """Fed every event in seq order (`add`); `result(graph)` explains each retry (see the module docstring)."""

    def __init__(self) -> None:
        self.attempts: list[dict[str, Any]] = []  # attempt.started: id, event, seq, parent
        self.observations: dict[str, _Observation] = {}
        self.receipts: dict[str, _Receipt] = {}
        self.purposes: dict[str, set[str]] = {}  # receipt -> purposes its observations and admissions named
        self.admissions: dict[str, tuple[str, str | None, int]] = {}  # admission -> (observation, attempt, seq)
        self.tool_results: set[str] = set()
        # workspace -> (seq, event id, words) of each change that makes evidence observed before it stale
        self.changes: dict[str, list[tuple[int, str, str, str | None]]] = {}
        self.truncated = False

    def add(self, e: Mapping[str, Any]) -> None:
        kind = e.get("kind")
        if kind == "tool.result":
            # Most of what is fed (a long run's every tool call has one): only its id is kept, first.
            if len(self.tool_results) < MAX_TRACKED:
                self.tool_results.add(str(e.get("id")))
            return
        held_seq = e.get("seq")
        seq: int = held_seq if isinstance(held_seq, int) else 0
        eid = str(e.get("id"))
        attempt = _str(e.get("attempt"))
        if kind == "attempt.started":
            self.attempts.append(
                {"attempt": attempt, "event": eid, "seq": seq, "parent": _str(e.get("parent_attempt_id"))}
            )
        elif kind == "command.receipt":
            if len(self.receipts) >= MAX_TRACKED:
                self.truncated = True
                return
            held = e.get("results")
            results: Mapping[str, Any] = held if isinstance(held, Mapping) else {}
            held_failed = results.get("failed")
            failed: int = held_failed if isinstance(held_failed, int) else 0
            self.receipts[eid] = _Receipt(
                eid,
                seq,
                attempt,
                _str(e.get("workspace_id")),
                _strs(e.get("suites")),
                _str(e.get("completion")),
                failed,
                e.get("exit_code"),
            )
            self.purposes[eid] = {VALIDATION_PREFIX + s for s in _strs(e.get("suites"))}
        elif kind == "evidence.observed":
            if len(self.observations) >= MAX_TRACKED:
                self.truncated = True
                return
            source = _str(e.get("source"))
            scope = _strs(e.get("scope"))
            self.observations[eid] = _Observation(
                eid, seq, attempt, source, _str(e.get("workspace_id")), _str(e.get("tree_digest")), scope
            )
            if source in self.purposes:
                self.purposes[source].update(scope)
        elif kind == "evidence.admitted":
            observation = self.observations.get(str(e.get("observation_id")))
            if observation is None:
                return
            self.admissions[eid] = (observation.id, attempt, seq)
            purpose = _str(e.get("purpose"))
            if observation.source in self.purposes and purpose:
                self.purposes[observation.source].add(purpose)
            if attempt == observation.attempt:
                observation.admissions.append(eid)
            else:
                compatibility = e.get("compatibility")
                rule = _str(compatibility.get("rule")) if isinstance(compatibility, Mapping) else None
                observation.carried.append(
                    {
                        "admission": eid,
                        "attempt": attempt,
                        "purpose": purpose,
                        "artifact": _str(e.get("artifact_id")),
                        "workspace": _str(e.get("workspace_id")),
                        "decision": _str(e.get("decision")),
                        "rule": rule,
                    }
                )
        elif kind == "workspace.lifecycle":
            state = _str(e.get("state"))
            workspace = _str(e.get("workspace_id"))
            if workspace and state in _NOT_ACTIVE:
                words = f"workspace {workspace} became {state.replace('_', ' ')}"
                self.changes.setdefault(workspace, []).append((seq, eid, words, None))
        elif kind == "workspace.changed":
            workspace = _str(e.get("workspace_id"))
            if workspace:
                tree = _str(e.get("tree_digest"))
                words = f"workspace {workspace}'s tree moved on to {_short(tree)}"
                self.changes.setdefault(workspace, []).append((seq, eid, words, tree))

    # --- the answer

    def result(self, graph: LineageGraph) -> dict[str, Any]:
        retries = []
        by_attempt = {a["attempt"]: a for a in self.attempts if a["attempt"]}
        for started in self.attempts:
            attempt = started["attempt"]
            if attempt is None or started is self.attempts[0]:
                continue
            parent = started["parent"]
            earlier = [o for o in self.observations.values() if o.seq < started["seq"] and o.attempt != attempt]
            items = [self._explain(o, attempt, graph) for o in earlier[:ITEMS_PER_RETRY]]
            counts: dict[str, int] = {}
            for item in items:
                counts[item["status"]] = counts.get(item["status"], 0) + 1
            retries.append(
                {
                    "attempt": attempt,
                    "started": started["event"],
                    "from_attempt": parent if parent in by_attempt else None,
                    "count": len(earlier),
                    "counts": dict(sorted(counts.items())),
                    "items": items,
                }
            )
        for retry in retries:
            for item in retry["items"]:
                item["label"] = LABELS[item["status"]]
        return {"retries": retries[:RETRIES_KEPT], "count": len(retries), "truncated": self.truncated}

    def _stale(self, o: _Observation) -> dict[str, str] | None:
        if o.workspace is None:
            return None
        for seq, event, words, tree in self.changes.get(o.workspace, ()):
            if seq > o.seq and (tree is None or tree != o.tree):
                return {"event": event, "why": words}
        return None

    def _rerun(self, o: _Observation, attempt: str) -> _Receipt | None:
        receipt = self.receipts.get(o.source or "")
        wanted = set(self.purposes.get(o.source or "", set())) | set(o.scope)
        suites = set(receipt.suites) if receipt is not None else set()
        for later in self.receipts.values():
            if later.attempt != attempt or later.seq <= o.seq:
                continue
            if suites.intersection(later.suites) or wanted.intersection(self.purposes.get(later.id, ())):
                return later
        return None

    def _explain(self, o: _Observation, attempt: str, graph: LineageGraph) -> dict[str, Any]:
        stale = self._stale(o)
        receipt = self.receipts.get(o.source or "")
        source_kind = (
            "command.receipt" if receipt is not None else "tool.result" if o.source in self.tool_results else None
        )
        purposes = sorted(self.purposes.get(o.source or "", set()) | set(o.scope))
        validation = [p for p in purposes if p.startswith(VALIDATION_PREFIX)]
        carried = [dict(c) for c in o.carried if c["attempt"] == attempt and c["decision"] != "rejected"]
        item: dict[str, Any] = {
            "observation": o.id,
            "attempt": o.attempt,
            "source": o.source,
            "source_kind": source_kind,
            "workspace": o.workspace,
            "tree": o.tree,
            "purposes": purposes,
            "admissions": o.admissions,
            "carried": carried,
            "stale": stale,
            "rerun": None,
        }
        stale_words = f"{stale['why']} ({stale['event']})" if stale else ""
        if carried:
            unmet: list[str] = []
            for c in carried:
                admission = graph._admissions.get(c["admission"])
                artifact = graph._artifacts.get(c["artifact"]) if c["artifact"] else None
                reason = rule_unmet(graph, admission, c["artifact"], artifact) if admission is not None else None
                c["rule_holds"] = reason is None
                c["why"] = reason or f"compatibility rule {c['rule']} holds"
                if reason is not None:
                    unmet.append(reason if len(carried) == 1 else f"{c['admission']}: {reason}")
            names = ", ".join(
                f"{c['admission']} ({c['purpose']}, for {c['artifact'] or 'no artifact'})" for c in carried
            )
            if unmet:
                item["status"] = "carried_forward_unjustified"
                text = f"Carried forward into {attempt} as {names}, but {'; '.join(unmet)}"
            else:
                item["status"] = "carried_forward"
                rules = ", ".join(sorted({str(c["rule"]) for c in carried}))
                text = f"Carried forward into {attempt} as {names} under compatibility rule {rules}, which holds"
            if stale:
                text += f"; it had gone stale: {stale_words}"
            item["explanation"] = text + "."
            return item
        later = self._rerun(o, attempt)
        if later is not None:
            item["status"] = "rerun"
            item["rerun"] = {"receipt": later.id, "completion": later.completion, "failed": later.failed}
            outcome = later.completion or "unknown"
            if later.failed or later.exit_code:
                outcome += f", {later.failed or 'some'} failed"
            item["explanation"] = f"Not carried forward: {attempt} reran it as receipt {later.id} ({outcome})."
            return item
        if receipt is not None and validation:
            item["status"] = "needs_rerun"
            text = (
                f"Not carried forward and not rerun in {attempt}: command evidence for {', '.join(validation)} needs a "
                "compatibility rule or a rerun in the new workspace"
            )
            item["explanation"] = text + (f"; it went stale: {stale_words}." if stale else ".")
            return item
        if stale:
            item["status"] = "stale"
            item["explanation"] = f"Went stale before {attempt}: {stale_words}; not carried forward."
            return item
        item["status"] = "still_relevant"
        item["explanation"] = (
            f"Still relevant to {attempt}: its workspace and tree held; not admitted again, so it authorizes "
            "nothing there."
        )
        return item


def _short(tree: str | None) -> str:
    if tree is None:
        return "an unknown tree"
    algorithm, sep, digest = tree.partition(":")
    return f"{algorithm}:{digest[:12]}" if sep and len(digest) > 12 else tree
