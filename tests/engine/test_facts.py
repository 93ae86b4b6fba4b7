"""The fact layer (n17q_engine/facts.py, issue 34): one set of facts per run, from its events alone."""

from __future__ import annotations

from typing import Any

from n17q_engine.canonical import evidence_set_digest
from n17q_engine.facts import effects_label, replay_title, run_facts, validation_label
from tests.engine.eventlib import EventLog


def _send(log: EventLog, *, approval: str | None = None) -> str:
    return log.emit(
        "effect.intent",
        artifact_id=None,
        admission_ids=[],
        approval_id=approval,
        idempotency_key="send-1",
        destination="mailbox:beta",
    )


def test_a_race_is_two_deliveries_whatever_event_the_world_change_names_as_its_cause():
    log = EventLog()
    intent = _send(log)
    for name, revision in (("first", 42), ("second", 43)):
        accept = log.emit("schedule.step", intent_id=intent, step="accept", delivery=name, race="r", index=0)
        log.emit(
            "world.transition",
            resource=f"effect:email.send:{name}",
            revision_before=None,
            revision_after=1,
            change={"op": "create"},
            cause=accept,
        )
        commit = log.emit("schedule.step", intent_id=intent, step="commit", delivery=name, race="r", index=1)
        log.emit(
            "world.transition",
            resource="mailbox:beta",
            revision_before=revision - 1,
            revision_after=revision,
            change={"op": "update"},
            cause=commit,
        )
        log.emit("effect.execution", intent_id=intent, connection="fixture:email.send")
    facts = run_facts(log.run, log.events)
    effects = facts["effects"]
    assert (effects["intents"], effects["deliveries"], effects["max_deliveries_per_intent"]) == (1, 2, 2)
    assert effects["acknowledged"] == 2 and effects["at_most_one_delivery"] is False
    assert effects["per_destination"] == {"mailbox:beta": 2}
    assert effects["items"][0]["accepted"] == 2  # the provider's ledger: acceptances, not deliveries
    assert effects["world_changes"] == 4
    assert effects_label(facts) == "1 effect intent, 2 deliveries (one intent delivered 2 times)"


def test_one_delivery_caused_by_the_execution_holds_and_a_forward_cause_is_attributed_at_the_end():
    log = EventLog()
    intent = _send(log)
    log.emit(
        "world.transition",
        resource="mailbox:beta",
        revision_before=1,
        revision_after=2,
        change={"op": "update"},
        cause="e-later",
    )
    log.emit("effect.execution", id="e-later", intent_id=intent)
    facts = run_facts(log.run, log.events)
    assert facts["effects"]["deliveries"] == 1 and facts["effects"]["at_most_one_delivery"] is True
    assert effects_label(facts) == "1 effect intent, 1 delivery"


def test_a_second_intent_for_one_key_breaks_at_most_one_delivery_like_lin012():
    log = EventLog()
    _send(log)
    _send(log)
    facts = run_facts(log.run, log.events)
    assert facts["effects"]["reused_keys"] and facts["effects"]["at_most_one_delivery"] is False


def test_validation_is_complete_only_when_every_required_purpose_ran():
    log = EventLog()
    log.workspace("ws-1")
    focused = log.receipt("ws-1", "t1", suites=("adapter",))
    log.observe(focused, "ws-1", "t1", scope=["validation:focused"])
    log.emit("policy.decision", subject="e-none", required=["validation:focused", "validation:broad"], outcome="deny")
    facts = run_facts(log.run, log.events)
    assert facts["validations"]["never_ran"] == ["validation:broad"]
    assert validation_label(facts) == "validation incomplete: validation:broad never ran"
    broad = log.receipt("ws-1", "t1", suites=("unit", "integration"))
    log.observe(broad, "ws-1", "t1", scope=["validation:broad"])
    facts = run_facts(log.run, log.events)
    assert validation_label(facts) == "validation complete"
    assert facts["validations"]["purposes"]["validation:broad"]["completed"] == 1


def test_a_replay_inherits_its_sources_required_purposes():
    log = EventLog()
    log.workspace("ws-1")
    log.observe(log.receipt("ws-1", "t1"), "ws-1", "t1", scope=["validation:focused"])
    assert validation_label(run_facts(log.run, log.events)) == "validation complete"
    inherited = run_facts(log.run, log.events, required=["validation:broad", "review:audience"])
    assert validation_label(inherited) == "validation incomplete: validation:broad never ran"


def test_failed_unfinished_waived_and_cited_receipts_per_purpose():
    log = EventLog()
    log.workspace("ws-1")
    failed = log.receipt("ws-1", "t1", suites=("unit",), failed=2, exit_code=1)
    log.observe(failed, "ws-1", "t1", scope=["validation:broad"])
    facts = run_facts(log.run, log.events)
    assert validation_label(facts) == "validation incomplete: unit in ws-1: 2 failed"
    assert facts["validations"]["purposes"]["validation:broad"]["failed"] == 1
    log.emit("waiver.granted", failure=failed, suite="unit")
    assert validation_label(run_facts(log.run, log.events)) == "validation complete"
    unfinished = log.receipt("ws-1", "t1", suites=("e2e",), completion="termination_unknown", post_tree=None)
    log.emit("account.claim", supports=[unfinished], claim_kind="validation", scope=["validation:e2e"])
    facts = run_facts(log.run, log.events)
    assert validation_label(facts) == "validation incomplete: e2e in ws-1 termination_unknown"
    assert facts["validations"]["purposes"]["validation:e2e"] == {
        "receipts": 1, "completed": 0, "failed": 0, "unfinished": 1, "cited": 1, "latest": unfinished,
    }  # fmt: skip


def test_workspaces_and_approvals_and_what_they_bind():
    log = EventLog(run_id="run-9")
    log.workspace("ws-1")
    log.change("ws-1", "t1", overlay_revision=2)
    log.workspace("ws-2", parent="ws-1", relation="copy")
    log.lifecycle("ws-1", "superseded")
    approval = log.emit(
        "approval.recorded",
        subject="e-intent",
        evidence_set_digest=evidence_set_digest(["adm-2", "adm-1"]),
        run="run-9",
        environment="fixture",
    )
    log.emit(
        "effect.intent",
        id="e-intent",
        artifact_id=None,
        admission_ids=["adm-1", "adm-2"],
        approval_id=approval,
        idempotency_key="k",
    )
    facts = run_facts(log.run, log.events)
    ws = {w["id"]: w for w in facts["workspaces"]["items"]}
    assert facts["workspaces"]["count"] == 2 and ws["ws-1"]["state"] == "superseded"
    assert ws["ws-1"]["overlay_revision"] == 2 and ws["ws-2"]["derived_from"] == "ws-1"
    (a,) = facts["approvals"]["items"]
    assert a["own"] is True and a["binds_evidence"] is True and a["used_by"] == ["e-intent"]


def test_a_replay_title_says_what_its_own_facts_say():
    log = EventLog()
    log.emit("run.state", state="stopped", reason="the agent exited")
    facts = run_facts(log.run, log.events)
    title = replay_title("counterfactual", "run-003", facts)
    assert title == "Counterfactual of run-003: no effect requested; no validation; stopped"


def test_model_calls_and_tokens_per_model_a_replayed_agent_s_calls_are_its_model_chat_calls():
    run = {"id": "r", "environment": "replay", "mode": "recorded", "model": {"name": "house-model"}}
    events: list[dict[str, Any]] = [
        {"kind": "model.proposal", "id": "p1", "model": "gpt-4o-mini"},
        {"kind": "budget.charged", "id": "t1", "resource": "tokens", "amount": 12, "model": "gpt-4o-mini",
         "input_tokens": 10, "output_tokens": 2},
        {"kind": "model.proposal", "id": "p2"},  # no model named: the run's
        {"kind": "budget.charged", "id": "t2", "resource": "tokens", "amount": 500},  # no split: never 0 in or out
        {"kind": "budget.charged", "id": "c1", "resource": "compute_s", "amount": 9},
    ]  # fmt: skip
    at = {"logical": "2026-01-01T00:00:00Z", "wall": "2026-01-01T00:00:00Z"}
    events = [{**e, "seq": i + 1, "at": at, "attempt": None} for i, e in enumerate(events)]
    models = run_facts(run, events)["models"]
    assert models["model_calls"] == 2 and models["calls_from"] == "model.proposal"
    assert (models["tokens_in"], models["tokens_out"], models["tokens"]) == (10, 2, 512)
    assert models["unsplit_charges"] == 1
    rows = {m["model"]: m for m in models["per_model"]}
    assert rows["house-model"]["calls"] == 1 and rows["house-model"]["unsplit"] == 1
    chat: dict[str, Any] = {
        "kind": "tool.call",
        "tool": "model.chat",
        "request": {"model": "example-model", "messages": []},
    }
    chats = [{**chat, "id": f"m{i}", "seq": 10 + i, "at": at, "attempt": None} for i in (1, 2)]
    replayed = run_facts(run, [*events, *chats])["models"]
    assert replayed["model_calls"] == 2 and replayed["calls_from"] == "model.chat"
    assert {m["model"]: m["calls"] for m in replayed["per_model"]}["example-model"] == 2
