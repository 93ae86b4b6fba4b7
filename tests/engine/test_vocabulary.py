"""References: what counts as an edge of the run graph, and what is someone else's data."""

from n17q_engine import vocabulary as v


def event(kind: str, **fields):
    return {"seq": 1, "id": "e1", "kind": kind, "at": {}, "attempt": "a1", **fields}


def test_it_reads_the_attempt_and_named_references():
    found = v.references(event("account.claim", text="t", claim_kind="other", supports=["r1", "r2"]))
    assert found == [("attempt", "a1"), ("supports[0]", "r1"), ("supports[1]", "r2")]


def test_it_does_not_read_identifiers_inside_a_tool_request():
    found = v.references(
        event(
            "tool.call", tool="status.lookup", request={"request_id": "req-7781"}, proposal_id="p1", workspace_id=None
        )
    )
    assert found == [("attempt", "a1"), ("proposal_id", "p1")]


def test_it_reads_nested_ids_but_not_the_id_an_event_introduces():
    found = v.references(
        event(
            "workspace.created", workspace_id="ws-2", derived_from={"workspace_id": "ws-1", "relation": "reconstruct"}
        )
    )
    assert found == [("attempt", "a1"), ("derived_from.workspace_id", "ws-1")]


def test_it_reads_checkpoint_workspaces_by_key():
    found = v.references(event("checkpoint", workspaces={"ws-1": "sha256:aa"}, world_revision=1, clock="t"))
    assert ("workspaces.ws-1", "ws-1") in found


def test_it_does_not_count_the_attempt_an_attempt_started_introduces():
    assert v.references(event("attempt.started", number=1, reason="task", parent_attempt_id="a0")) == [
        ("parent_attempt_id", "a0")
    ]


def test_it_does_not_read_identifiers_inside_a_converted_events_provenance():
    # `otlp` and `inspect` say where in the original file an event came from: a span id there is the trace's,
    # not an event or object of this run, so it is neither an edge nor a dangling reference (LIN011).
    found = v.references(
        event(
            "tool.call",
            tool="search",
            request={},
            proposal_id="p1",
            otlp={"span": "a831cbd4b15dc60f", "parent_span_id": "9e2c90054f8166d5", "blob": "sha256:aa"},
            inspect={"event": "tool", "uuid": "u-1", "sample_id": "s-1"},
        )
    )
    assert found == [("attempt", "a1"), ("proposal_id", "p1")]
