"""A replay records the tool catalogue it offered as content, not only as a context digest (issue 39; seed 001)."""

from __future__ import annotations

import json

import pytest

from n17q_engine.recorded_chat import blob_fields
from tests.engine.test_replay import SEEDS, kinds, story


@pytest.mark.seed("001", "The transcript was not the run")
def test_the_deciders_own_proposals_name_the_offered_tool_catalogue_held_as_a_blob():
    out, log = story("run-003-review-request", "coding-review-request", "counterfactual", {"decider": "careful"})
    proposals = kinds(log, "model.proposal")
    own = [p for p in proposals if p["origin"].startswith("scripted:")]
    recorded = [p for p in proposals if p["origin"] == "recorded"]
    assert own and recorded
    # The recording's proposals held no catalogue: none is invented for them (the original offer is not known).
    assert all("tools_blob" not in p for p in recorded)
    (digest,) = {p["tools_blob"] for p in own}  # stored once, named by every proposal offered it
    assert blob_fields(own[0]) == {"tools": digest}
    assert out.manifest["blobs"][digest]["role"] == "model-tools"
    offered = json.loads(out.blobs[digest])
    names = [t["function"]["name"] for t in offered]
    contracts = json.loads(SEEDS["coding-review-request"].files["contracts.json"])
    expected = sorted({c["tool"] for c in contracts} - {"model.chat"})
    assert sorted(names) == expected
    for tool in offered:  # names, descriptions and schemas: what the decider was offered, as content
        assert tool["type"] == "function" and tool["function"]["description"]
        assert tool["function"]["parameters"]["type"] == "object"
