"""One set of facts per run (issue 34, DESIGN §10): what a run's events say happened, computed once, read by every page.

Pure functions over a run's events, like the lineage checker (n17q_engine/lineage/): `FactBuilder.add` is called once
per validated event in `seq` order and keeps compact records only; `result()` returns one JSON object. The console
stores it with the run when the run is imported (a replay's run too, when its worker imports it) and every surface
reads it instead of counting for itself: the verdict header, the comparison's invariants, a replay's outcome, the
launch summary, the run list. The words they show come from here too (`validation_label`, `effects_label`,
`replay_title`), so two pages cannot describe the same run two ways.

The facts:

- **effects**: intents (destination, namespace, key, approval), their executions (outcome, connection) and
  deliveries; deliveries per intent and per destination; world changes; namespaces; what left containment.
- **validations**: receipts per purpose (completed, failed, unfinished, cited), the latest receipt of each suite in
  each workspace, the purposes the run required and which of them never ran.
- **workspaces**: each workspace as created (base, overlay, environment), what it was derived from, its latest tree,
  overlay revision and lifecycle state.
- **approvals**: each approval, whether it is this run's own, which intent it binds and whether its evidence-set
  digest is the intent's (DESIGN §3: the digest of the sorted admission ids); and the digest of the review object it
  approved (n17q_engine/lineage/review.py: effect, artifact, the admitted evidence's content, policy revision,
  expiry, as the run stood at the approval), what of it changed before the intent was acted on, and whether the
  approval still binds (nothing changed, and the `review_digest` it records, if any, is the engine's).
- **outcome**: the final state and its reason, the validation and effects sentences, and the claims made.
- **retries** (issue 39, seed 003): for each attempt after the first, each evidence observation made before it in
  another attempt, explained: carried forward (under a rule that holds, or not), rerun, stale, needing a rerun, or
  still relevant (n17q_engine/carry_forward.py).
- **models** (issue 38): the run's model calls and the tokens it charged, per model (`per_model`) and in all
  (`model_calls`, `tokens_in`, `tokens_out`, `tokens`). A run whose agent was replayed counts its `model.chat` tool
  calls (its proposals are the tool calls those answers asked for); any other run counts its `model.proposal`s. Tokens
  are the `budget.charged` events of resource `tokens`, each under the model it names (else the run's model); a charge
  without both `input_tokens` and `output_tokens` counts in `tokens` and in `unsplit`, never as 0 in or out. Cost is
  not a fact: it depends on the price table in force when a page is read (`pricing.run_cost`).

Decisions (DESIGN is silent; docs/facts.md cites these):

- A **delivery** is a world change caused by an intent: its `cause` is the intent, or an event that names the intent
  in `intent_id` (an execution, a race's `schedule.step`), except the provider's ledger of accepted effects
  (`effect:<tool>:<identity>`, n17q_engine.world.EFFECT_PREFIX), which records that the provider accepted a request,
  not its consequence. A race whose two accepted requests both commit is two deliveries to one intent, whatever
  event the world change names as its cause.
- **At most one delivery per intent** holds when no intent has more than one delivery, no intent more than one
  acknowledged execution, and no idempotency key names two intents: the same three facts LIN012 judges.
- A receipt is **for** a purpose when an observation of it names the purpose in its `scope`, an admission of such an
  observation has that purpose, or the purpose is `validation:<suite>` of one of its suites (graph.py's rule).
- The **required** validation purposes are those the run's policy decisions required and its validation claims
  scoped, plus any the caller passes in (a replay inherits its source run's: it answers the same task, so what the
  recording's policy required of that task is still required of the replay).
- **Validation complete** only when the latest receipt of every suite in every workspace completed without an
  unwaived failure and every required purpose has a receipt; a required purpose with no receipt makes the run
  "validation incomplete: <purpose> never ran". A run with no receipt and no requirement has "no validation recorded".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .agent.model import MODEL_TOOL
from .canonical import digest_json
from .carry_forward import CarryForward
from .lineage import LineageGraph
from .lineage.effects import CONTAINED_CONNECTIONS
from .lineage.graph import LIVE_ENVIRONMENTS, VALIDATION_PREFIX
from .lineage.review import approval_review
from .pricing import run_cost
from .vocabulary import APPENDED_BY_REVIEWERS
from .world import EFFECT_PREFIX

# 2: approvals carry their review object's digest, what changed of it and whether they still bind (issue 34).
# 4: model calls and tokens (`models`, issue 38).
# 5: a token charge split in and out with no `amount` counts its in + out (the run summary's rule, now one tally).
# 6: what carried forward into each retry and what became stale (`retries`, issue 39: n17q_engine/carry_forward.py).
# 7: approvals carry the decisions that wait on a person (`asked`, `pending`, issue 39; seed 001).
FACTS_VERSION = 7
# Items kept per list (intents, workspaces, approvals, receipts, event ids): the totals stay exact beyond it.
LIST_CAP = 200
# World changes whose cause had not appeared yet when they arrived, kept to be attributed at the end.
PENDING_CAP = 100_000
FINISHED_OK = "completed"


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _strs(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str) and v] if isinstance(value, list) else []


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


class FactBuilder:
    """The facts of one run, built as its events go by (see the module docstring)."""

    def __init__(
        self, run: Mapping[str, Any], *, required: Iterable[str] = (), graph: LineageGraph | None = None
    ) -> None:
        """`graph`: the run's lineage graph when the caller builds one from the same events (the importer does), else
        the builder keeps its own: an approval's review object is read from it."""
        self.run_id = str(run.get("id") or "")
        self.environment = str(run.get("environment") or "")
        self.mode = str(run.get("mode") or "")
        reconstructs = run.get("reconstructs")
        judged_env = self.environment
        if self.mode == "reconstruction" and isinstance(reconstructs, Mapping):
            judged_env = str(reconstructs.get("environment") or judged_env)
        self.live = judged_env in LIVE_ENVIRONMENTS
        self.inherited_required = {p for p in required if isinstance(p, str) and p.startswith(VALIDATION_PREFIX)}
        self.events = 0
        self.own_graph = graph is None
        self.graph = LineageGraph(dict(run)) if graph is None else graph
        # effects
        self.intents: dict[str, dict[str, Any]] = {}
        self.intent_of: dict[str, str] = {}  # event id -> the intent it names (executions, schedule steps, intents)
        self.executions: dict[str, list[dict[str, Any]]] = {}
        self.first_key: dict[str, str] = {}
        self.key_reused: list[str] = []
        self.deliveries: dict[str, list[str]] = {}
        self.delivered_resources: dict[str, set[str]] = {}
        self.per_resource: dict[str, int] = {}  # deliveries per world resource (the first LIST_CAP resources)
        self.accepted: dict[str, int] = {}  # intent -> ledger entries (accepted requests)
        self.delivery_count = 0
        self.world_changes = 0
        self.pending: list[tuple[str, str, str]] = []
        self.unattributed = 0
        self.live_effects: list[str] = []
        self.approvals: dict[str, dict[str, Any]] = {}
        self.approval_seq: dict[str, int] = {}
        self.late: list[str] = []
        # policy decisions: the latest on each subject, and those that asked for a person (`needs_approval`)
        self.latest_decision: dict[str, dict[str, Any]] = {}
        self.asks: list[dict[str, Any]] = []
        self.asked = 0
        # validations
        self.receipts: dict[str, dict[str, Any]] = {}
        self.receipt_purposes: dict[str, set[str]] = {}
        self.observed: dict[str, str] = {}  # observation -> receipt
        self.cited: set[str] = set()
        self.admitted_observations: dict[str, str] = {}  # admission -> observation
        self.waived: set[tuple[str | None, str | None]] = set()
        self.required: set[str] = set()
        self.latest_suite: dict[tuple[str, str], str] = {}  # (workspace, suite) -> receipt
        # workspaces
        self.workspaces: dict[str, dict[str, Any]] = {}
        # outcome
        self.state = ""
        self.reason = ""
        self.claims: dict[str, int] = {}
        self.unevaluated_claims: list[str] = []  # claims resting on an excluded tool's answer (a replay marks them)
        # model calls and tokens (issue 38): per model name, the run's own model when an event names none
        held_model = run.get("model")
        self.models = ModelTally(_str(held_model.get("name")) if isinstance(held_model, Mapping) else None)
        # retries: what carried forward into each later attempt and what became stale (seed 003)
        self.carry = CarryForward()

    # --- the events ---

    def add(self, event: Mapping[str, Any]) -> None:
        held_kind = event.get("kind")
        if held_kind in APPENDED_BY_REVIEWERS:
            # What reviewers append after the run (annotations, corrections, assessments) is not a fact of it: the
            # facts read the same before and after, and a recompute counts what the import counted.
            return
        self.events += 1
        if self.own_graph:
            self.graph.add(event if isinstance(event, dict) else dict(event))
        kind = str(held_kind)
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, event)
        if kind in CARRY_KINDS:
            self.carry.add(event)
        intent = _str(event.get("intent_id"))
        if intent is not None and held_kind != "effect.intent":
            self.intent_of.setdefault(str(event.get("id")), intent)

    def _intent(self, e: Mapping[str, Any]) -> None:
        iid = str(e.get("id"))
        self.intents[iid] = {
            "id": iid,
            "seq": e.get("seq"),
            "effect_class": e.get("effect_class"),
            "destination": e.get("destination"),
            "namespace": e.get("namespace"),
            "artifact": e.get("artifact_id"),
            "approval": e.get("approval_id"),
            "admissions": _strs(e.get("admission_ids")),
            "idempotency_key": e.get("idempotency_key"),
            "historical_intent": e.get("historical_intent"),
        }
        if _str(e.get("proposal_id")) is not None:
            self.intents[iid]["proposal"] = e.get("proposal_id")
        self.intent_of[iid] = iid
        if e.get("namespace") == "live" and not self.live:
            self.live_effects.append(iid)
        key = e.get("idempotency_key")
        if isinstance(key, str):
            first = self.first_key.setdefault(key, iid)
            if first != iid:
                self.key_reused.append(iid)

    def _execution(self, e: Mapping[str, Any]) -> None:
        intent = _str(e.get("intent_id")) or ""
        connection = e.get("connection")
        record = {
            "id": e.get("id"),
            "outcome": e.get("outcome"),
            "connection": connection,
            "stage": e.get("stage"),
            "attempt_no": e.get("attempt_no"),
        }
        self.executions.setdefault(intent, []).append(record)
        if not self.live and isinstance(connection, str) and not connection.startswith(CONTAINED_CONNECTIONS):
            self.live_effects.append(str(e.get("id")))
        approval = self.approvals.get(str((self.intents.get(intent) or {}).get("approval")))
        if approval is None or approval["origin"] == "historical":
            self.late.append(str(e.get("id")))

    def _world(self, e: Mapping[str, Any]) -> None:
        self.world_changes += 1
        cause = _str(e.get("cause"))
        if cause is None:
            return
        resource = str(e.get("resource") or "")
        intent = self.intent_of.get(cause)
        if intent is not None:
            self._attribute(intent, str(e.get("id")), resource)
        elif len(self.pending) < PENDING_CAP:
            self.pending.append((cause, str(e.get("id")), resource))
        else:
            self.unattributed += 1

    def _attribute(self, intent: str, change: str, resource: str) -> None:
        if resource.startswith(EFFECT_PREFIX):
            self.accepted[intent] = self.accepted.get(intent, 0) + 1
            return
        self.deliveries.setdefault(intent, []).append(change)
        self.delivered_resources.setdefault(intent, set()).add(resource)
        if resource in self.per_resource or len(self.per_resource) < LIST_CAP:
            self.per_resource[resource] = self.per_resource.get(resource, 0) + 1
        self.delivery_count += 1

    def _approval(self, e: Mapping[str, Any]) -> None:
        aid = str(e.get("id"))
        run, env = e.get("run"), e.get("environment")
        self.approvals[aid] = {
            "id": aid,
            "subject": e.get("subject"),
            "decision": e.get("decision"),
            "origin": e.get("origin"),
            "actor_role": e.get("actor_role"),
            "run": run,
            "environment": env,
            "evidence_set_digest": e.get("evidence_set_digest"),
            "own": run in (None, self.run_id) and env in (None, self.environment) and e.get("origin") != "historical",
        }
        seq = e.get("seq")
        self.approval_seq[aid] = seq if isinstance(seq, int) else 0

    def _receipt(self, e: Mapping[str, Any]) -> None:
        rid = str(e.get("id"))
        held = e.get("results")
        results: Mapping[str, Any] = held if isinstance(held, Mapping) else {}
        failed = results.get("failed") if isinstance(results.get("failed"), int) else 0
        suites = _strs(e.get("suites"))
        workspace = _str(e.get("workspace_id")) or ""
        suite = "+".join(suites) or str(e.get("command"))
        self.receipts[rid] = {
            "id": rid,
            "workspace": workspace,
            "suite": suite,
            "suites": suites,
            "completion": e.get("completion"),
            "failed": failed,
            "exit_code": e.get("exit_code"),
        }
        self.receipt_purposes[rid] = {VALIDATION_PREFIX + s for s in suites}
        self.latest_suite[(workspace, suite)] = rid

    def _observed(self, e: Mapping[str, Any]) -> None:
        source = _str(e.get("source"))
        if source is None:
            return
        self.observed[str(e.get("id"))] = source
        if source in self.receipt_purposes:
            self.receipt_purposes[source].update(_strs(e.get("scope")))

    def _admitted(self, e: Mapping[str, Any]) -> None:
        observation = _str(e.get("observation_id"))
        receipt = self.observed.get(observation or "")
        purpose = _str(e.get("purpose"))
        if observation is not None:
            self.admitted_observations[str(e.get("id"))] = observation
        if receipt in self.receipt_purposes and purpose is not None:
            self.receipt_purposes[receipt].add(purpose)

    def _waiver(self, e: Mapping[str, Any]) -> None:
        self.waived.add((_str(e.get("failure")), _str(e.get("suite"))))
        self.waived.add((_str(e.get("failure")), None))

    def _decision(self, e: Mapping[str, Any]) -> None:
        self.required.update(p for p in _strs(e.get("required")) if p.startswith(VALIDATION_PREFIX))
        for input_id in _strs(e.get("input_ids")):
            self._cite(input_id)
        seq = e.get("seq")
        record = {
            "id": str(e.get("id")),
            "seq": seq if isinstance(seq, int) else 0,
            "subject": _str(e.get("subject")),
            "outcome": e.get("outcome"),
            "policy_revision": e.get("policy_revision"),
            "required": _strs(e.get("required"))[:LIST_CAP],
            "reasons": _strs(e.get("reasons"))[:LIST_CAP],
            "at": (e.get("at") or {}).get("logical") if isinstance(e.get("at"), Mapping) else None,
        }
        subject = _str(e.get("subject"))
        if subject is not None and (subject in self.latest_decision or len(self.latest_decision) < PENDING_CAP):
            self.latest_decision[subject] = record
        if e.get("outcome") == "needs_approval":
            self.asked += 1
            if len(self.asks) < PENDING_CAP:
                self.asks.append(record)

    def _claim(self, e: Mapping[str, Any]) -> None:
        kind = str(e.get("claim_kind") or "other")
        self.claims[kind] = self.claims.get(kind, 0) + 1
        if e.get("unevaluated"):
            self.unevaluated_claims.append(str(e.get("id")))
        if kind in ("validation", "completion"):
            self.required.update(p for p in _strs(e.get("scope")) if p.startswith(VALIDATION_PREFIX))
        for ref in _strs(e.get("supports")):
            self._cite(ref)

    def _cite(self, ref: str) -> None:
        """A receipt cited by a decision or claim, directly or through an observation or admission."""
        observation = self.admitted_observations.get(ref, ref)
        self.cited.add(self.observed.get(observation, observation))

    def _workspace_created(self, e: Mapping[str, Any]) -> None:
        wid = _str(e.get("workspace_id"))
        if wid is None:
            return
        held = e.get("derived_from")
        derived: Mapping[str, Any] = held if isinstance(held, Mapping) else {}
        self.workspaces[wid] = {
            "id": wid,
            "created_by": e.get("id"),
            "base_digest": e.get("base_digest"),
            "overlay_digest": e.get("overlay_digest"),
            "overlay_revision": None,
            "environment_revision": e.get("environment_revision"),
            "derived_from": derived.get("workspace_id"),
            "relation": derived.get("relation"),
            "tree": None,
            "state": "active",
        }

    def _workspace_changed(self, e: Mapping[str, Any]) -> None:
        ws = self.workspaces.get(str(e.get("workspace_id")))
        if ws is not None:
            ws["tree"] = e.get("tree_digest")
            ws["overlay_revision"] = e.get("overlay_revision")

    def _workspace_lifecycle(self, e: Mapping[str, Any]) -> None:
        ws = self.workspaces.get(str(e.get("workspace_id")))
        if ws is not None:
            ws["state"] = e.get("state")

    def _proposal(self, e: Mapping[str, Any]) -> None:
        self.models.add(e)

    def _tool_call(self, e: Mapping[str, Any]) -> None:
        self.models.add(e)

    def _charge(self, e: Mapping[str, Any]) -> None:
        self.models.add(e)

    def _state(self, e: Mapping[str, Any]) -> None:
        self.state = str(e.get("state") or "")
        self.reason = str(e.get("reason") or "")

    # --- the answer ---

    def result(self) -> dict[str, Any]:
        for cause, change, resource in self.pending:
            intent = self.intent_of.get(cause)
            if intent is not None:
                self._attribute(intent, change, resource)
        self.pending.clear()
        effects, validations = self._effects(), self._validations()
        return {
            "version": FACTS_VERSION,
            "run": self.run_id,
            "events": self.events,
            "headline": _headline(effects, validations),
            "effects": effects,
            "validations": validations,
            "workspaces": {"count": len(self.workspaces), "items": list(self.workspaces.values())[:LIST_CAP]},
            "approvals": self._approvals(),
            "models": self.models.result(),
            "retries": self.carry.result(self.graph),
            "outcome": {
                "state": self.state,
                "reason": self.reason,
                "claims": dict(sorted(self.claims.items())),
                "unevaluated_claims": self.unevaluated_claims[:LIST_CAP],
            },
        }

    def _effects(self) -> dict[str, Any]:
        items: list[dict[str, Any]] = []
        per_destination: dict[str, int] = {}
        max_deliveries = max_acks = max_executions = 0
        acknowledged = executions = 0
        duplicates: list[str] = []
        for iid in list(self.intents) + [i for i in self.executions if i not in self.intents]:
            intent = self.intents.get(iid) or {"id": iid, "destination": None, "namespace": None, "dangling": True}
            runs = self.executions.get(iid, [])
            acks = sum(1 for x in runs if x["outcome"] == "acknowledged")
            delivered = self.deliveries.get(iid, [])
            destination = str(intent.get("destination") or "")
            per_destination[destination] = per_destination.get(destination, 0) + len(delivered)
            max_deliveries = max(max_deliveries, len(delivered))
            max_acks, max_executions = max(max_acks, acks), max(max_executions, len(runs))
            acknowledged += acks
            executions += len(runs)
            if len(delivered) > 1 or acks > 1:
                duplicates.append(iid)
            if len(items) < LIST_CAP:
                items.append(
                    {
                        **{k: v for k, v in intent.items() if k != "seq"},
                        "executions": runs[:LIST_CAP],
                        "acknowledged": acks,
                        "deliveries": len(delivered),
                        "delivery_events": delivered[:LIST_CAP],
                        "delivered_to": sorted(self.delivered_resources.get(iid, ())),
                        "accepted": self.accepted.get(iid, 0),
                    }
                )
        all_deliveries = [d for iid in self.deliveries for d in self.deliveries[iid]]
        return {
            "intents": len(self.intents),
            "executions": executions,
            "acknowledged": acknowledged,
            "deliveries": self.delivery_count,
            "delivery_events": all_deliveries[:LIST_CAP],
            "delivered_resources": sorted({r for rs in self.delivered_resources.values() for r in rs})[:LIST_CAP],
            "max_deliveries_per_intent": max_deliveries,
            "max_acknowledged_per_intent": max_acks,
            "max_executions_per_intent": max_executions,
            "per_destination": per_destination,
            "per_resource": dict(sorted(self.per_resource.items())),
            "duplicate_intents": duplicates[:LIST_CAP],
            "reused_keys": self.key_reused[:LIST_CAP],
            "at_most_one_delivery": not duplicates and not self.key_reused,
            "world_changes": self.world_changes,
            "unattributed_world_changes": self.unattributed,
            "namespaces": sorted({str(i.get("namespace")) for i in self.intents.values() if i.get("namespace")}),
            "live": self.live,
            "left_containment": self.live_effects[:LIST_CAP],
            "executed_without_prior_approval": self.late[:LIST_CAP],
            "items": items,
        }

    def _validations(self) -> dict[str, Any]:
        purposes: dict[str, dict[str, Any]] = {}
        for rid, purposes_of in self.receipt_purposes.items():
            receipt = self.receipts[rid]
            for purpose in purposes_of:
                row = purposes.setdefault(
                    purpose, {"receipts": 0, "completed": 0, "failed": 0, "unfinished": 0, "cited": 0, "latest": None}
                )
                row["receipts"] += 1
                if receipt["completion"] != FINISHED_OK:
                    row["unfinished"] += 1
                elif _has_failures(receipt):
                    row["failed"] += 1
                else:
                    row["completed"] += 1
                row["cited"] += rid in self.cited
                row["latest"] = rid
        required = sorted(self.required | self.inherited_required)
        problems = []
        latest = []
        for (workspace, suite), rid in self.latest_suite.items():
            receipt = self.receipts[rid]
            waived = (rid, suite) in self.waived or (rid, None) in self.waived
            status = "passed"
            if receipt["completion"] != FINISHED_OK:
                status = str(receipt["completion"])
                problems.append(f"{suite} in {workspace} {receipt['completion']}")
            elif _has_failures(receipt) and not waived:
                status = "failed"
                problems.append(f"{suite} in {workspace}: {receipt['failed']} failed")
            elif _has_failures(receipt):
                status = "waived"
            latest.append({"workspace": workspace, "suite": suite, "receipt": rid, "status": status})
        problems.sort()
        never = [p for p in required if p not in purposes]
        problems += [f"{p} never ran" for p in never]
        if not self.receipts and not required:
            status = "none"
        elif problems:
            status = "incomplete"
        else:
            status = "complete"
        return {
            "receipts": len(self.receipts),
            "required": required,
            "never_ran": never,
            "purposes": dict(sorted(purposes.items())),
            "latest": latest[:LIST_CAP],
            "problems": problems[:LIST_CAP],
            "status": status,
        }

    def _approvals(self) -> dict[str, Any]:
        items: list[dict[str, Any]] = []
        used_by: dict[str, list[str]] = {}  # approval -> the intents naming it, built once (not a scan per approval)
        for intent in self.intents.values():
            if intent.get("approval") in self.approvals:
                used_by.setdefault(intent["approval"], []).append(intent["id"])
        for aid, approval in self.approvals.items():
            if len(items) >= LIST_CAP:
                break  # the count below stays exact; the items are the first LIST_CAP
            users = used_by.get(aid, [])
            subject = self.intents.get(str(approval.get("subject")))
            binds = None
            if subject is not None:
                binds = approval.get("evidence_set_digest") == digest_json(sorted(subject["admissions"]))
            review = approval_review(self.graph, aid)
            items.append(
                {
                    **approval,
                    "used_by": users[:LIST_CAP],
                    "binds_admissions": subject["admissions"][:LIST_CAP] if subject else [],
                    "binds_evidence": binds,
                    # The review object (issue 34): None when the approval's subject is no intent of the run.
                    "review_digest": review["review_digest"] if review else None,
                    "recorded_review_digest": review["recorded_review_digest"] if review else None,
                    "review_changes": review["changes"][:LIST_CAP] if review else [],
                    "still_binds": review["binds"] if review else None,
                    "executed_after_expiry": review["expired_before"] if review else None,
                }
            )
        pending = self._pending()
        return {
            "count": len(self.approvals),
            "items": items,
            "asked": self.asked,
            "pending_count": len(pending),
            "pending": pending[:LIST_CAP],
        }

    def decision_on(self, subject: str | None) -> dict[str, Any] | None:
        """The latest policy decision on `subject` (an intent, or its artifact or proposal) among the events added."""
        if subject is None:
            return None
        intent = self.intents.get(subject)
        found = [self.latest_decision.get(subject)]
        if intent is not None:
            found += [self.latest_decision.get(str(r)) for r in (intent.get("artifact"), intent.get("proposal"))]
        held = [d for d in found if d is not None]
        return max(held, key=lambda d: d["seq"]) if held else None

    def _answers(self, approval_id: str, ask: Mapping[str, Any]) -> bool:
        """Whether an approval is about what a `needs_approval` decision held: the same subject, or the intent that
        subject is the artifact or the proposal of; recorded after the decision."""
        approval = self.approvals[approval_id]
        if self.approval_seq.get(approval_id, 0) <= ask["seq"]:
            return False
        subject = approval.get("subject")
        if subject == ask["subject"]:
            return True
        intent = self.intents.get(str(subject))
        return intent is not None and ask["subject"] in (intent.get("artifact"), intent.get("proposal"))

    def _pending(self) -> list[dict[str, Any]]:
        """The `needs_approval` decisions no approval of this run answers (decisions in docs/facts.md): an approval
        answers one when it is about its subject, recorded after it, and the run's own; a historical approval, or one
        given in another run or environment, is read-only evidence (seed 001) and leaves the decision waiting."""
        out = []
        for ask in self.asks:
            about = [a for a in self.approvals if self._answers(a, ask)]
            if any(self.approvals[a]["own"] for a in about):
                continue
            out.append({**ask, "not_authority": about[:LIST_CAP]})
        return out


def _headline(effects: Mapping[str, Any], validations: Mapping[str, Any]) -> dict[str, str]:
    """Short texts for a list row (the run list reads them by key, never the whole facts)."""
    if not effects["intents"]:
        short = "no request"
    else:
        short = f"{_plural(effects['intents'], 'intent')}, {_plural(effects['deliveries'], 'delivery', 'deliveries')}"
    bad = not effects["at_most_one_delivery"] or bool(effects["left_containment"])
    return {
        "effects": short + (" (duplicate)" if not effects["at_most_one_delivery"] else ""),
        "effects_tone": "bad" if bad else "ok",
        "validation": str(validations["status"]),
    }


def _has_failures(receipt: Mapping[str, Any]) -> bool:
    return bool(receipt.get("failed")) or bool(receipt.get("exit_code"))


_HANDLERS = {
    "effect.intent": FactBuilder._intent,
    "effect.execution": FactBuilder._execution,
    "world.transition": FactBuilder._world,
    "approval.recorded": FactBuilder._approval,
    "command.receipt": FactBuilder._receipt,
    "evidence.observed": FactBuilder._observed,
    "evidence.admitted": FactBuilder._admitted,
    "waiver.granted": FactBuilder._waiver,
    "policy.decision": FactBuilder._decision,
    "account.claim": FactBuilder._claim,
    "workspace.created": FactBuilder._workspace_created,
    "workspace.changed": FactBuilder._workspace_changed,
    "workspace.lifecycle": FactBuilder._workspace_lifecycle,
    "run.state": FactBuilder._state,
    "model.proposal": FactBuilder._proposal,
    "tool.call": FactBuilder._tool_call,
    "budget.charged": FactBuilder._charge,
}
# The kinds n17q_engine/carry_forward.py reads.
CARRY_KINDS = frozenset(
    {
        "attempt.started",
        "command.receipt",
        "tool.result",
        "evidence.observed",
        "evidence.admitted",
        "workspace.lifecycle",
        "workspace.changed",
    }
)
_MODEL_COUNTS = ("proposals", "chat_calls", "charges", "tokens", "tokens_in", "tokens_out", "unsplit")
MODEL_KINDS = ("model.proposal", "tool.call", "budget.charged")  # the kinds a ModelTally reads


class ModelTally:
    """A run's model calls and tokens, per model (the `models` fact): the one count every page and the cross-run
    search read (runs.models.RunSummary is filled from it), so two pages never count a run's calls differently.

    A model call is a `model.proposal`, except in a run whose agent was replayed: there its calls are its `model.chat`
    tool calls (its proposals are the tool calls those answers asked for; counting both would count each decision
    twice). Tokens are `budget.charged` of resource `tokens`; a charge without `input_tokens`/`output_tokens` is
    counted in `tokens` and in `unsplit` (its in and out are not known). An event naming no model is the run's own
    model's (its manifest's), else "unknown"."""

    def __init__(self, run_model: str | None) -> None:
        self.run_model = run_model
        self.per_model: dict[str, dict[str, int]] = {}

    def _row(self, name: Any) -> dict[str, int]:
        model = _str(name) or self.run_model or "unknown"
        row = self.per_model.get(model)
        if row is None:
            if len(self.per_model) >= LIST_CAP:
                model = "other models"
                row = self.per_model.get(model)
            if row is None:
                row = self.per_model[model] = dict.fromkeys(_MODEL_COUNTS, 0)
        return row

    def add(self, e: Mapping[str, Any]) -> None:
        kind = e.get("kind")
        if kind == "model.proposal":
            self._row(e.get("model"))["proposals"] += 1
        elif kind == "tool.call" and e.get("tool") == MODEL_TOOL:
            request = e.get("request")
            self._row(request.get("model") if isinstance(request, Mapping) else None)["chat_calls"] += 1
        elif kind == "budget.charged" and e.get("resource") == "tokens":
            row = self._row(e.get("model"))
            row["charges"] += 1
            amount = e.get("amount")
            tokens_in, tokens_out = e.get("input_tokens"), e.get("output_tokens")
            split = all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in (tokens_in, tokens_out))
            if isinstance(amount, (int, float)) and not isinstance(amount, bool) and amount >= 0:
                row["tokens"] += int(amount)
            elif split:
                row["tokens"] += int(tokens_in) + int(tokens_out)  # type: ignore[arg-type]  # a split with no amount
            if split:
                row["tokens_in"] += int(tokens_in)  # type: ignore[arg-type]
                row["tokens_out"] += int(tokens_out)  # type: ignore[arg-type]
            else:
                row["unsplit"] += 1

    def result(self) -> dict[str, Any]:
        chat = any(row["chat_calls"] for row in self.per_model.values())
        per_model = []
        for model, row in sorted(self.per_model.items()):
            calls = row["chat_calls"] if chat else row["proposals"]
            if not calls and not row["charges"]:
                continue
            per_model.append(
                {
                    "model": model,
                    "calls": calls,
                    "charges": row["charges"],
                    "tokens": row["tokens"],
                    "tokens_in": row["tokens_in"],
                    "tokens_out": row["tokens_out"],
                    "unsplit": row["unsplit"],
                }
            )
        return {
            "model_calls": sum(m["calls"] for m in per_model),
            "calls_from": MODEL_TOOL if chat else "model.proposal",
            "tokens": sum(m["tokens"] for m in per_model),
            "tokens_in": sum(m["tokens_in"] for m in per_model),
            "tokens_out": sum(m["tokens_out"] for m in per_model),
            "token_charges": sum(m["charges"] for m in per_model),
            "unsplit_charges": sum(m["unsplit"] for m in per_model),
            "per_model": per_model,
        }


def run_facts(run: Mapping[str, Any], events: Iterable[Mapping[str, Any]], *, required: Iterable[str] = ()) -> dict:
    """The facts of a run from its events (validated, in seq order)."""
    builder = FactBuilder(run, required=required)
    for event in events:
        builder.add(event)
    return builder.result()


# --- the words every page uses -------------------------------------------------------------------------------------


def validation_label(facts: Mapping[str, Any]) -> str:
    """ "validation complete" | "validation incomplete: …" | "no validation recorded" (see the module docstring)."""
    v = facts["validations"]
    if v["status"] == "none":
        return "no validation recorded"
    if v["status"] == "incomplete":
        return "validation incomplete: " + "; ".join(v["problems"])
    return "validation complete"


def effects_label(facts: Mapping[str, Any]) -> str:
    e = facts["effects"]
    if not e["intents"]:
        return "no request: no effect intent, no delivery"
    text = f"{_plural(e['intents'], 'effect intent')}, {_plural(e['deliveries'], 'delivery', 'deliveries')}"
    if e["max_deliveries_per_intent"] > 1:
        text += f" (one intent delivered {e['max_deliveries_per_intent']} times)"
    elif e["max_acknowledged_per_intent"] > 1:
        text += f" (one intent acknowledged {e['max_acknowledged_per_intent']} times)"
    return text


def models_label(models: Mapping[str, Any], table: Mapping[str, Any]) -> str:
    """The run's model calls, tokens and cost in one line, from its `models` facts priced by `table` (the one wording
    the run page and the run list share): "3 model calls (gpt-4o-mini); 652 tokens in, 173 out; cost 0.000202 USD",
    or what of the cost was not evaluated and why."""
    names = [m["model"] for m in models["per_model"] if m["calls"]]
    calls = models["model_calls"]
    text = f"{calls} model call{'s' if calls != 1 else ''}"
    if names:
        text += f" ({', '.join(names[:3])}{'…' if len(names) > 3 else ''})"
    if models["token_charges"]:
        if models["unsplit_charges"] == models["token_charges"]:
            text += f"; {models['tokens']} tokens (in and out not recorded apart)"
        else:
            text += f"; {models['tokens_in']} tokens in, {models['tokens_out']} out"
            if models["unsplit_charges"]:
                text += f" (and {models['tokens']} in all, {models['unsplit_charges']} charges not split)"
    else:
        text += "; tokens not recorded"
    cost = run_cost(models, table)
    return text + ("; cost " if cost.amount is not None else "; ") + cost.text()


MODE_WORDS = {
    "reconstruction": "Reconstruction",
    "rerun": "Rerun",
    "counterfactual": "Counterfactual",
    "regression": "Regression run",
}


def replay_title(mode: str, source_id: str, facts: Mapping[str, Any], max_chars: int = 300) -> str:
    """A replay's own title, from its own facts: what it is, of what, and what happened in it (never its source's
    words: a counterfactual that opened nothing must not be called "Review request opened…")."""
    e = facts["effects"]
    if not e["intents"]:
        effects = "no effect requested"
    else:
        destinations = sorted(d for d in e["per_destination"] if d) or ["an unnamed destination"]
        times = e["deliveries"]
        done = f"delivered {_plural(times, 'time')}" if times else "nothing delivered"
        effects = f"{done} to {', '.join(destinations[:2])}" + ("…" if len(destinations) > 2 else "")
        if not e["at_most_one_delivery"]:
            effects += " (duplicate consequence)"
    status = facts["validations"]["status"]
    validation = {"none": "no validation", "incomplete": "validation incomplete", "complete": "validation complete"}[
        status
    ]
    state = facts["outcome"]["state"] or "no final state"
    head = f"{MODE_WORDS.get(mode, mode.capitalize() or 'Replay')} of {source_id}: "
    title = f"{head}{effects}; {validation}; {state}"
    if len(title) > max_chars:
        title = title[: max_chars - 1].rstrip() + "\u2026"
    return title
