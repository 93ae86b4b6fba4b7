"""A call of a run converted from a trace records `contract_revision: 0` ("no contract recorded",
docs/formats/otlp.md). In a replay the scenario's pinned contract is in force for it, and the comparison counts the
replayed call as the recorded one when only that unknown revision differs (issue 37 point 3)."""

from __future__ import annotations

from n17q_engine.deciders import CallTool, _from_event
from n17q_engine.divergence import same_call


def call(revision: int, digest: str = "sha256:aa", outcome: str = "ok") -> dict:
    return {"tool": "lookup", "contract_revision": revision, "request_digest": digest, "result_outcome": outcome}


def test_a_recorded_revision_0_is_no_revision_for_the_replay():
    event = {"kind": "tool.call", "id": "c1", "at": {"logical": "t"}, "tool": "lookup", "request": {}}
    converted = _from_event(None, {**event, "contract_revision": 0})  # type: ignore[arg-type]
    native = _from_event(None, {**event, "contract_revision": 3})  # type: ignore[arg-type]
    assert isinstance(converted, CallTool) and converted.recorded_revision is None
    assert isinstance(native, CallTool) and native.recorded_revision == 3


def test_a_recorded_revision_0_matches_the_pinned_revision_and_nothing_else_is_forgiven():
    assert same_call(call(0), call(1))
    assert not same_call(call(2), call(1))  # a recorded revision that differs is a difference
    assert not same_call(call(0), call(1, digest="sha256:bb"))
    assert not same_call(call(0), call(1, outcome="error"))
    assert not same_call(call(1), call(0))  # only the recording's unknown revision is unknown
