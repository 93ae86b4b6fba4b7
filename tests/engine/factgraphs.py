"""Hypothesis strategies that build valid run event graphs for the fact layer's properties (issue 34).

A `Plan` says what a run did: workspaces (some derived from others), validation receipts (suite, completion,
failures, each observed for `validation:<suite>`), the purposes a policy decision required, effect intents with
their executions (acknowledged or not, delivering into the world or not, a delivery caused by the execution itself or
by a race's `schedule.step` naming the intent), an idempotency key reused, the final state. `build(plan)` turns it
into events through `EventLog`, so every event passes the importer's own validation. The plan keeps what happened
in plain numbers, so a property can compare the fact layer with the plan (the oracle) and with lineage.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from hypothesis import strategies as st

from tests.engine.eventlib import EventLog

SUITES = ("focused", "broad")
COMPLETIONS = ("completed", "completed", "partial", "termination_unknown")
OUTCOMES = ("acknowledged", "acknowledged", "lost_response", "failed")


@dataclass(frozen=True)
class Receipt:
    workspace: int
    suite: str
    completion: str
    failed: int


@dataclass(frozen=True)
class Execution:
    outcome: str
    delivers: bool
    via_step: bool  # the world change names a race's schedule step as its cause, not the execution


@dataclass(frozen=True)
class Intent:
    executions: tuple[Execution, ...]
    reuse_key: bool  # the intent reuses the first intent's idempotency key


@dataclass(frozen=True)
class Plan:
    live: bool
    workspaces: int
    derived: tuple[bool, ...]
    receipts: tuple[Receipt, ...]
    required: tuple[str, ...]
    intents: tuple[Intent, ...]
    state: str
    extra: tuple[str, ...] = field(default=())

    def deliveries(self) -> list[int]:
        """Deliveries per intent, as the plan says they happened."""
        return [sum(1 for x in i.executions if x.delivers) for i in self.intents]

    def acknowledged(self) -> list[int]:
        return [sum(1 for x in i.executions if x.outcome == "acknowledged") for i in self.intents]

    def lin012(self) -> bool:
        return any(n > 1 for n in self.acknowledged()) or any(i.reuse_key for i in self.intents[1:])

    def with_second_delivery(self, index: int) -> Plan:
        """The plan with one more acknowledged, delivering execution of intent `index`."""
        intents = list(self.intents)
        intent = intents[index]
        intents[index] = dataclasses.replace(
            intent, executions=(*intent.executions, Execution("acknowledged", True, False))
        )
        if sum(1 for x in intents[index].executions if x.outcome == "acknowledged") < 2:
            intents[index] = dataclasses.replace(
                intents[index], executions=(*intents[index].executions, Execution("acknowledged", True, False))
            )
        return dataclasses.replace(self, intents=tuple(intents))

    def without_suite(self, suite: str) -> Plan:
        return dataclasses.replace(self, receipts=tuple(r for r in self.receipts if r.suite != suite))


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    workspaces = draw(st.integers(0, 3))
    receipts: tuple[Receipt, ...] = ()
    if workspaces:
        receipts = tuple(
            draw(
                st.lists(
                    st.builds(
                        Receipt,
                        st.integers(0, workspaces - 1),
                        st.sampled_from(SUITES),
                        st.sampled_from(COMPLETIONS),
                        st.sampled_from((0, 0, 1)),
                    ),
                    max_size=4,
                )
            )
        )
    execution = st.builds(Execution, st.sampled_from(OUTCOMES), st.booleans(), st.booleans())
    intents = tuple(
        draw(st.lists(st.builds(Intent, st.lists(execution, max_size=3).map(tuple), st.booleans()), max_size=3))
    )
    return Plan(
        live=draw(st.booleans()),
        workspaces=workspaces,
        derived=tuple(draw(st.lists(st.booleans(), min_size=workspaces, max_size=workspaces))),
        receipts=receipts,
        required=tuple(draw(st.sets(st.sampled_from([f"validation:{s}" for s in SUITES])))),
        intents=intents,
        state=draw(st.sampled_from(("completed", "stopped", "failed"))),
    )


def build(plan: Plan, run_id: str = "run-gen") -> EventLog:
    """The plan's events (see the module docstring)."""
    environment, mode = ("live", "recorded") if plan.live else ("fixture", "rerun")
    log = EventLog(run_id=run_id, environment=environment, mode=mode)
    log.attempt()
    for w in range(plan.workspaces):
        parent = f"ws-{w - 1}" if w and plan.derived[w] else None
        log.workspace(f"ws-{w}", parent=parent)
        log.change(f"ws-{w}", f"t{w}")
    for r in plan.receipts:
        receipt = log.receipt(
            f"ws-{r.workspace}",
            f"t{r.workspace}",
            suites=(r.suite,),
            completion=r.completion,
            failed=r.failed,
            exit_code=1 if r.failed else 0,
            **({"post_tree": None} if r.completion != "completed" else {}),
        )
        log.observe(receipt, f"ws-{r.workspace}", f"t{r.workspace}", scope=[f"validation:{r.suite}"])
    if plan.required:
        log.emit("policy.decision", subject="e-gate", required=list(plan.required), outcome="deny")
    connection = "smtp-provider" if plan.live else "fixture:mail.send"
    namespace = "live" if plan.live else "replay:w1"
    revision = 0
    for n, intent in enumerate(plan.intents):
        key = "key-0" if intent.reuse_key else f"key-{n}"
        intent_id = log.emit(
            "effect.intent",
            id=f"intent-{n}",
            artifact_id=None,
            admission_ids=[],
            destination=f"mailbox:list-{n}",
            idempotency_key=key,
            namespace=namespace,
        )
        for k, x in enumerate(intent.executions):
            cause = log.emit(
                "effect.execution",
                id=f"exec-{n}-{k}",
                intent_id=intent_id,
                attempt_no=k + 1,
                outcome=x.outcome,
                stage="completed" if x.outcome == "acknowledged" else "after_acceptance",
                connection=connection,
            )
            if not x.delivers:
                continue
            if x.via_step:
                cause = log.emit(
                    "schedule.step", race="r", index=k, step="commit", delivery=f"d{k}", intent_id=intent_id
                )
            revision += 1
            log.emit(
                "world.transition",
                id=f"delivered-{n}-{k}",
                resource=f"mailbox:list-{n}",
                revision_before=revision - 1,
                revision_after=revision,
                change={"op": "update"},
                cause=cause,
            )
    log.emit("run.state", state=plan.state, reason="generated")
    return log


def validated(plan: Plan) -> Plan:
    """The plan made to validate completely with the broad suite required: at least one workspace, every receipt
    completed and passing, and a broad one among them."""
    workspaces = max(plan.workspaces, 1)
    receipts = tuple(Receipt(min(r.workspace, workspaces - 1), r.suite, "completed", 0) for r in plan.receipts)
    required = tuple(sorted({*plan.required, "validation:broad"}))
    ran = tuple(Receipt(workspaces - 1, p.split(":", 1)[1], "completed", 0) for p in required)
    return dataclasses.replace(
        plan,
        workspaces=workspaces,
        derived=(*plan.derived, False)[:workspaces],
        receipts=(*receipts, *ran),
        required=required,
    )
