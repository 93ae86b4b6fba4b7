"""The final gate, the intent and its outbox entry in one local transaction (seed 003, "The final policy gate
repeated the invariant"): all of them are written or none is, and delivery reads the outbox alone."""

from __future__ import annotations

import json
from typing import Any

import pytest

from n17q_engine.bundle import validate_event
from n17q_engine.package import build_scenario
from n17q_engine.replay.effects import _Effects
from tests.engine.test_replay import SEEDS, final, kinds, story


def mailbox_deliveries(log: list[dict]) -> list[dict]:
    return [t for t in kinds(log, "world.transition") if t["resource"].startswith("mailbox:")]


@pytest.mark.seed("003", "The final policy gate repeated the invariant")
def test_the_allow_the_intent_and_its_outbox_entry_are_written_together_and_delivery_follows_the_entry():
    _out, log = story("run-001-recorded", "email-delivery")

    (intent,) = kinds(log, "effect.intent")
    (entry,) = kinds(log, "effect.outbox")
    allow = next(d for d in kinds(log, "policy.decision") if d["subject"] == intent["id"])
    assert allow["outcome"] == "allow"
    # One transaction: the allow, the intent and the outbox entry are consecutive, in that order.
    assert [allow["seq"] + 1, intent["seq"] + 1] == [intent["seq"], entry["seq"]]
    assert (entry["intent_id"], entry["destination"], entry["tool"]) == (
        intent["id"],
        intent["destination"],
        "email.send",
    )
    assert entry["idempotency_key"] == intent["idempotency_key"]
    validate_event(entry, line=1)
    (execution,) = kinds(log, "effect.execution")
    assert execution["seq"] > entry["seq"] and execution["intent_id"] == intent["id"]
    assert len(mailbox_deliveries(log)) == 1


@pytest.mark.seed("003", "The final policy gate repeated the invariant")
def test_a_failure_between_the_activation_and_the_outbox_write_leaves_neither(monkeypatch):
    def failing(self: Any, outbox: dict, args: dict) -> None:
        raise OSError("the outbox store refused the write")

    monkeypatch.setattr(_Effects, "_write_outbox", failing)
    _out, log = story("run-001-recorded", "email-delivery")

    assert kinds(log, "effect.intent") == [], "the intent was rolled back with its outbox entry"
    assert kinds(log, "effect.outbox") == []
    assert [d for d in kinds(log, "policy.decision") if d["outcome"] == "allow"] == [], "and the allow with them"
    assert kinds(log, "effect.execution") == [] and mailbox_deliveries(log) == [], "nothing delivered"
    state = final(log)
    assert state["state"] == "failed"
    assert "failed before its outbox entry was written (OSError: the outbox store refused the write)" in state["reason"]
    assert "rolled back: no intent, no outbox entry, nothing delivered" in state["reason"]
    seqs = [e["seq"] for e in log]
    assert seqs == list(range(1, len(log) + 1)), "the log has no gap where the rolled-back events were"


@pytest.mark.seed("003", "The final policy gate repeated the invariant")
def test_delivery_reads_only_the_outbox_an_intent_without_an_entry_is_never_executed(monkeypatch):
    # The outbox write "succeeds" without keeping the entry: the intent stands in the log, and still nothing is sent.
    monkeypatch.setattr(_Effects, "_write_outbox", lambda self, outbox, args: None)
    _out, log = story("run-001-recorded", "email-delivery")

    assert len(kinds(log, "effect.intent")) == 1
    assert kinds(log, "effect.execution") == [] and mailbox_deliveries(log) == []


@pytest.mark.seed("003", "The final policy gate repeated the invariant")
def test_a_final_gate_that_blocks_writes_neither_the_intent_nor_an_outbox_entry():
    files = {n: json.loads(d) for n, d in SEEDS["coding-review-request"].files.items()}
    files["policy.json"]["revisions"]["review-policy@8"]["require_all"] = False  # only the gate stands in the way
    _out, log = story("run-003-review-request", None, scenario_pkg=build_scenario(files))

    assert kinds(log, "policy.decision")[-1]["gate"] == "lineage"
    assert kinds(log, "effect.intent") == [] and kinds(log, "effect.outbox") == []
